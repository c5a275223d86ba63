-- What /metrics reads from the database at scrape time (mergebot/db/views.py, METRIC_QUERIES). Named queries, as
-- in every file of this folder.
-- The counters of what grows with the history (verify runs and their histogram, landings, lost leases) are read
-- from totals the write path keeps (migration 0022's triggers: each finished run, landed row and lost lease adds
-- itself once), so a scrape reads a few rows however long the history; the rest are one pass over a table that
-- stays small (subtasks, the live candidates, deliveries) or over the few event kinds counted here. All of it is
-- in the database, so it survives restarts and agrees across replicas.

-- name: metric_snapshot
-- The first statement of a scrape's transaction: every query after it reads the same snapshot.
SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY;

-- name: metric_subtasks
-- Subtasks by status, and claims: every claim bumps its subtask's claim_version by one and nothing else does,
-- so the sum of claim versions is the number of claims ever made.
-- Every status is listed, zero included.
SELECT st.status::text AS status, count(s.id) AS n, coalesce(sum(s.claim_version), 0)::bigint AS claims
FROM unnest(enum_range(NULL::subtask_status)) AS st(status)
LEFT JOIN subtasks s ON s.status = st.status
GROUP BY st.status;

-- name: metric_holders
SELECT count(DISTINCT owner_id) AS agents FROM subtasks WHERE owner_id IS NOT NULL;

-- name: metric_landings
-- Landed rows by repository and verifier result, as counted when each was written (``landed_metric``).
SELECT repo, result, landings AS n FROM metric_landing_totals;

-- name: metric_queue_depth
-- Every repository and live candidate status, zero included (a gauge that disappears reads as "no data").
SELECT r.name AS repo, st.status::text AS status, count(c.id) AS n
FROM repos r
CROSS JOIN unnest(ARRAY['queued', 'verifying', 'landing', 'parked', 'awaiting_approval']::candidate_status[]) AS st(status)
LEFT JOIN candidates c ON c.repo = r.name AND c.status = st.status
GROUP BY r.name, st.status;

-- name: metric_events
-- Refusals by stage and reason, and subtask leases that expired. A refusal is a push refused at push time (its
-- rule's code), a candidate the queue rejected (the kind of its reason), a forge push ignored (why), or a
-- webhook delivery refused for reusing an id with another body. A lease expiry is the recovery loop's move of a
-- running subtask back to ready (or to failed: a poison pill); it is the only writer with no actor that moves
-- a subtask out of running to those states.
SELECT x.kind, x.reason, count(*) AS n
FROM (
    SELECT CASE WHEN e.kind = 'status' THEN 'lease_expired' ELSE e.kind END AS kind,
           CASE WHEN e.kind = 'status' THEN e.to_status::text ELSE refusal_reason(e.kind, e.detail) END AS reason
    FROM events e
    WHERE e.kind IN ('push_refused', 'candidate_rejected', 'push_ignored', 'webhook_refused')
       OR (e.kind = 'status' AND e.from_status = 'running' AND e.to_status IN ('ready', 'failed')
           AND e.actor_id IS NULL)
) x
GROUP BY x.kind, x.reason;

-- name: metric_verify_runs
-- Finished verify jobs by purpose and outcome, with their total wall time (claim to result), as counted when each
-- finished (``verify_jobs_metric``).
SELECT purpose, outcome, sum(runs)::bigint AS n, sum(seconds)::float8 AS seconds
FROM metric_run_totals
GROUP BY purpose, outcome;

-- name: metric_verify_buckets
-- The same runs as cumulative histogram buckets: for each upper bound (seconds), how many took at most that. Each
-- run was counted with how many bounds lie below its length (``metric_below``), so a bound's bucket sums the
-- totals with fewer bounds below than its own place.
SELECT t.purpose, b.le, coalesce(sum(t.runs) FILTER (WHERE t.below < b.i), 0)::bigint AS n
FROM metric_run_totals t
CROSS JOIN unnest(%(bounds)s::float8[]) WITH ORDINALITY AS b(le, i)
GROUP BY t.purpose, b.le;

-- name: metric_verify_expiries
-- Verify job leases that expired, counted as recovery takes each back (``job_recover_expired``, ``leases_lost``).
SELECT coalesce((SELECT n FROM metric_totals WHERE name = 'verify_leases_lost'), 0)::bigint AS n;

-- name: metric_webhook_deliveries
-- Signed webhook deliveries by forge, event and latest outcome (a failed delivery that is redelivered and
-- processed moves from failed to accepted). Deliveries refused before they were recorded (a bad signature) are
-- not here.
SELECT forge, event,
       CASE WHEN status = 'processing' THEN 'processing'
            WHEN http_status < 300 THEN 'accepted'
            WHEN http_status < 500 THEN 'refused'
            ELSE 'failed' END AS outcome,
       count(*) AS n
FROM webhook_deliveries
GROUP BY 1, 2, 3;

-- name: metric_unattested
-- The audit of main, per repository: the commits of main no landing statement explains that no admin has seen yet
-- (0 once one resumed it), and the reconciler's findings of such moves ever made.
SELECT r.name AS repo, coalesce((r.unattested ->> 'count')::bigint, 0) AS commits,
       (SELECT count(*) FROM reconcile_findings f WHERE f.repo = r.name AND f.kind = 'unattested_main') AS findings
FROM repos r;
