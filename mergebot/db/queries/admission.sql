-- Admission control at claim time and the caps on work in progress (``mergebot.db.admission``).

-- name: admission_measure
-- Admission control's measurements (``mergebot.landing.intake.admission``), one row per repository (a lane): its
-- queued and in-flight candidates with the sum of (1 + failure risk) over them; its predicted run length in
-- verifier-seconds (``predicted_run``, the fair order's too: the median of its newest finished candidate runs, a run
-- of named checks counted with its children's seconds together; NULL when none finished), with how many runs those
-- were and how many candidates left the queue meanwhile (a batch's run clears several); how long ago the newest of
-- them finished (0 while a run of the lane runs); its speculation window; its last admission state and refusals.
-- And, the same on every row, the most verify runs of any repository that were going at one instant over the last
-- ``window`` seconds: the verifiers' measured capacity.
WITH runs AS (
    SELECT started_at AS s, finished_at AS f FROM verify_jobs
    WHERE finished_at > now() - make_interval(secs => %(window)s) AND NOT is_group AND started_at IS NOT NULL
    UNION ALL
    SELECT started_at, now() FROM verify_jobs WHERE status = 'running' AND NOT is_group AND started_at IS NOT NULL
), level AS (
    -- +1 at each start, -1 at each end (an end before a start at the same instant): the running sum is how many
    -- runs were going then
    SELECT sum(e.d) OVER (ORDER BY e.t, e.d ROWS UNBOUNDED PRECEDING) AS n
    FROM (SELECT s AS t, 1 AS d FROM runs UNION ALL SELECT f, -1 FROM runs) e
), capacity AS (
    SELECT coalesce(max(n), 0)::int AS slots FROM level
)
SELECT r.name AS repo, coalesce(r.speculation_window, 0) AS speculation_window,
       coalesce(a.admitting, true) AS admitting, coalesce(a.refusals, 0)::bigint AS refusals,
       live.candidates, live.weight, CASE WHEN run.runs > 0 THEN run.seconds END AS run_seconds, run.runs,
       gone.cleared, capacity.slots,
       CASE WHEN EXISTS (SELECT 1 FROM verify_jobs j WHERE j.status = 'running' AND j.repo = r.name AND NOT j.is_group)
            THEN 0::float8
            ELSE extract(epoch FROM now() - run.last_finished)::float8 END AS last_run_age
FROM repos r
CROSS JOIN capacity
LEFT JOIN admission_lanes a ON a.repo = r.name
CROSS JOIN LATERAL (
    SELECT count(*)::int AS candidates, coalesce(sum(1 + coalesce(c.failure_risk, 0)), 0)::float8 AS weight
    FROM candidates c WHERE c.repo = r.name AND c.status IN ('queued', 'verifying', 'landing')
) live
CROSS JOIN LATERAL predicted_run(r.name) run
CROSS JOIN LATERAL (
    -- the candidates that left the queue (landed or rejected) since the first of those runs started: with batches,
    -- one run clears several
    SELECT count(*)::int AS cleared FROM candidates c
    WHERE run.since IS NOT NULL AND c.finished_at >= run.since AND c.repo = r.name
      AND c.status IN ('landed', 'rejected')
) gone
ORDER BY r.name;

-- name: admission_flip
-- A lane's admission state, written only when it changes (its first decision writes the row): every replica
-- reads the same state. Returns the row when it changed.
INSERT INTO admission_lanes AS a (repo, admitting, backlog_seconds, threshold_seconds)
VALUES (%(repo)s, %(admitting)s, %(backlog)s, %(threshold)s)
ON CONFLICT (repo) DO UPDATE SET admitting = EXCLUDED.admitting, changed_at = now(),
                                 backlog_seconds = EXCLUDED.backlog_seconds,
                                 threshold_seconds = EXCLUDED.threshold_seconds
WHERE a.admitting IS DISTINCT FROM EXCLUDED.admitting
RETURNING repo, admitting;

-- name: admission_refused
-- One claim refused for want of capacity in the lane (the counter of /metrics).
INSERT INTO admission_lanes AS a (repo, admitting, refusals) VALUES (%(repo)s, false, 1)
ON CONFLICT (repo) DO UPDATE SET refusals = a.refusals + 1
RETURNING refusals;

-- name: wip_refused
-- One claim refused for its agent's cap on work in progress (the counter of /metrics).
INSERT INTO metric_totals AS t (name, n) VALUES ('wip_refusals', 1)
ON CONFLICT (name) DO UPDATE SET n = t.n + 1
RETURNING n;

-- name: wip_refusals
SELECT coalesce((SELECT n FROM metric_totals WHERE name = 'wip_refusals'), 0)::bigint AS n;

-- name: agent_holds
-- What an agent holds: the subtasks it owns, running (claimed) or submitted, with their live candidates.
SELECT s.id, s.title, s.status::text AS status, s.idempotency_key AS key, s.claim_version,
       ARRAY(SELECT c.id FROM candidates c
             WHERE c.subtask_id = s.id
               AND c.status IN ('queued', 'verifying', 'landing', 'parked', 'awaiting_approval')
             ORDER BY c.id) AS candidates
FROM subtasks s
WHERE s.owner_id = %(agent_id)s AND s.status IN ('running', 'submitted')
ORDER BY s.id LIMIT %(limit)s;

-- name: subtasks_ready_count
SELECT count(*)::int AS n FROM subtasks WHERE status = 'ready';

-- name: admission_refusals
SELECT repo, refusals, admitting, changed_at FROM admission_lanes ORDER BY repo;
