-- What /metrics reads from the database at scrape time. Named queries, as in queries.sql.
-- Counters are derived from durable rows (subtasks, landed, events, candidates, verify_jobs, webhook_deliveries),
-- so they survive restarts, agree across replicas and need no instrumentation on the write path. Each query is
-- one pass over a table that stays small (subtasks, landed, candidates, verify jobs: one row per unit of work)
-- except metric_events, one sequential pass over events filtered to the few kinds counted here (milliseconds at
-- the seeds' tens of thousands of events).

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
SELECT repo, verifier_result AS result, count(*) AS n
FROM landed
GROUP BY repo, verifier_result;

-- name: metric_queue_depth
-- Every repository and live candidate status, zero included (a gauge that disappears reads as "no data").
SELECT r.name AS repo, st.status::text AS status, count(c.id) AS n
FROM repos r
CROSS JOIN unnest(ARRAY['queued', 'verifying', 'landing', 'parked']::candidate_status[]) AS st(status)
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
-- Finished verify jobs by purpose and outcome, with their total wall time (claim to result).
SELECT purpose, coalesce(outcome, 'none') AS outcome, count(*) AS n,
       coalesce(sum(extract(epoch FROM finished_at - started_at)), 0)::float8 AS seconds
FROM verify_jobs
WHERE status = 'done' AND started_at IS NOT NULL AND finished_at IS NOT NULL
GROUP BY purpose, coalesce(outcome, 'none');

-- name: metric_verify_buckets
-- The same runs as cumulative histogram buckets: for each upper bound (seconds), how many took at most that. One
-- pass over the runs: each is counted by how many bounds lie below it (width_bucket, a binary search, on the
-- negated bounds so that a run of exactly a bound's length falls in that bound's bucket, as Prometheus's "le"
-- says), and only those few groups are summed per bound.
WITH bounds AS (SELECT le, i FROM unnest(%(bounds)s::float8[]) WITH ORDINALITY AS u(le, i)),
runs AS (
    SELECT purpose,
           (SELECT count(*) FROM bounds)
           - width_bucket(-extract(epoch FROM finished_at - started_at)::float8,
                          (SELECT array_agg(-le ORDER BY le DESC) FROM bounds)) AS below,
           count(*) AS n
    FROM verify_jobs
    WHERE status = 'done' AND started_at IS NOT NULL AND finished_at IS NOT NULL
    GROUP BY 1, 2
)
SELECT r.purpose, b.le, coalesce(sum(r.n) FILTER (WHERE r.below < b.i), 0)::bigint AS n
FROM runs r CROSS JOIN bounds b
GROUP BY r.purpose, b.le;

-- name: metric_verify_expiries
-- Verify job leases that expired, counted on each job as recovery takes them back (``job_recover_expired``).
SELECT coalesce(sum(leases_lost), 0)::bigint AS n FROM verify_jobs;

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
