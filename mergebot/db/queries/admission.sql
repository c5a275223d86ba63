-- Admission control at claim time and the caps on work in progress (``mergebot.db.admission``).

-- name: admission_measure
-- Admission control's measurements (``mergebot.landing.intake.admission``), one row per repository (a lane): its
-- queued and in-flight candidates with the sum of (1 + failure risk) over them; its predicted run length in
-- verifier-seconds (``predicted_run``, the fair order's too: the median of its newest finished candidate runs, a run
-- of named checks counted with its children's seconds together; NULL when none finished), with how many runs those
-- were and how many candidates left the queue meanwhile (a batch's run clears several); how long ago the newest of
-- them finished (0 while a run of the lane runs); its speculation window; its last admission state and refusals;
-- its claims in flight (running subtasks claimed for it or for no lane named) and the mean time from a claim to
-- its push over its newest candidates (rule 8).
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
       coalesce(a.admitting, true) AS admitting, a.changed_at, coalesce(a.refusals, 0)::bigint AS refusals,
       live.candidates, live.weight, CASE WHEN run.runs > 0 THEN run.seconds END AS run_seconds, run.runs,
       gone.cleared, capacity.slots, coalesce(a.admitted, 0)::bigint AS admitted, freed.n AS freed,
       flight.n AS in_flight, push.seconds AS push_seconds,
       extract(epoch FROM now() - run.since)::float8 AS cleared_over,
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
CROSS JOIN LATERAL (
    -- while the lane refuses: the candidates that left its queue since it began to (each frees a slot for a claim)
    SELECT count(*)::bigint AS n FROM candidates c
    WHERE a.admitting IS FALSE AND c.finished_at >= a.changed_at AND c.repo = r.name
) freed
CROSS JOIN LATERAL (
    -- rule 8: the claims still out for this lane, or for none named: running subtasks with no live candidate
    SELECT count(*)::int AS n FROM subtasks s LEFT JOIN admission_claims ac ON ac.subtask_id = s.id
    WHERE s.status = 'running' AND (ac.repo IS NULL OR ac.repo = r.name)
      AND NOT EXISTS (SELECT 1 FROM candidates c WHERE c.subtask_id = s.id
                      AND c.status IN ('queued', 'verifying', 'landing', 'parked', 'awaiting_approval'))
) flight
CROSS JOIN LATERAL (
    -- rule 8: how long a claim takes to come back as work: the mean from claim to push of the lane's newest
    -- candidates (pushed under the claim their subtask holds now) queued within the window. The mean, as Little's
    -- law asks: a median of skewed think times held the cap at the claims already out
    SELECT avg(x.t)::float8 AS seconds FROM (
        SELECT extract(epoch FROM coalesce(c.pushed_at, c.queued_at) - s.claimed_at)::float8 AS t
        FROM candidates c JOIN subtasks s ON s.id = c.subtask_id
        WHERE c.repo = r.name AND c.queued_at > now() - make_interval(secs => %(window)s)
          AND c.claim_version = s.claim_version AND coalesce(c.pushed_at, c.queued_at) >= s.claimed_at
        ORDER BY c.id DESC LIMIT 50
    ) x
) push
ORDER BY r.name;

-- name: admission_flip
-- A lane's admission state, written only when it changes (its first decision writes the row): every replica
-- reads the same state. Returns the row when it changed.
INSERT INTO admission_lanes AS a (repo, admitting, backlog_seconds, threshold_seconds)
VALUES (%(repo)s, %(admitting)s, %(backlog)s, %(threshold)s)
ON CONFLICT (repo) DO UPDATE SET admitting = EXCLUDED.admitting, changed_at = now(), admitted = 0,
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

-- name: admission_standing
-- An agent's standing among the agents waiting for a slot in a full lane: the claims it was let make, what it was
-- served (migration 0044: the verifier-seconds of the runs started for its candidates, ``charged``, and each claim
-- admission let in that no run has charged yet, still its own and running or submitted, as ``d`` seconds: one run
-- of the lane asked about), its place in the line (the waiting agents other than it that were served less, or as
-- much and have waited longer), and the least any other agent waiting was served; agents that stopped asking
-- (their wait ran out) are no line.
WITH line AS (
    SELECT a.agent_id, a.claims, a.waiting_since, a.waiting_until,
           a.charged + %(d)s::float8 * (
               SELECT count(*) FROM admission_claims ac JOIN subtasks s ON s.id = ac.subtask_id
               WHERE ac.agent_id = a.agent_id AND NOT ac.settled AND s.owner_id = a.agent_id
                 AND s.status IN ('running', 'submitted')) AS served
    FROM admission_agents a
    WHERE a.agent_id = %(agent_id)s OR a.waiting_until > now()
), me AS (
    SELECT coalesce(max(claims), 0) AS claims, coalesce(max(served), 0) AS served,
           coalesce(max(waiting_since) FILTER (WHERE waiting_until > now()), now()) AS since
    FROM line WHERE agent_id = %(agent_id)s
)
SELECT me.claims, me.served,
       (SELECT count(*) FROM line w
        WHERE w.agent_id <> %(agent_id)s AND w.waiting_until > now()
          AND (w.served < me.served OR (w.served = me.served AND w.waiting_since < me.since)))::bigint AS ahead,
       (SELECT min(w.served) FROM line w WHERE w.agent_id <> %(agent_id)s AND w.waiting_until > now()) AS least
FROM me;

-- name: admission_take
-- One slot of a full lane taken for a claim: only while the lane still refuses (as measured) and fewer claims were
-- let in since it began to than candidates left its queue (``freed``). Returns the row when it was taken.
UPDATE admission_lanes SET admitted = admitted + 1
WHERE repo = %(repo)s AND NOT admitting AND changed_at = %(since)s AND admitted < %(freed)s
RETURNING repo, admitted;

-- name: admission_write_off
-- A refusing lane whose backlog is over its threshold: the slots its departures freed so far are written off.
UPDATE admission_lanes SET admitted = greatest(admitted, %(freed)s)
WHERE repo = %(repo)s AND NOT admitting AND changed_at = %(since)s AND admitted < %(freed)s
RETURNING repo;

-- name: admission_claimed
-- A claim admission let an agent make: one more to its account (it no longer waits), and the lane it was made for,
-- its claimer and, until a run charges its work, counted as one run of that lane (migration 0044)
-- (NULL: none named; a name no repository has counts as none): its subtask counts against that lane's claims in
-- flight until its work is pushed (rule 8). One round trip on the claim path.
WITH lane AS (
    INSERT INTO admission_claims AS c (subtask_id, repo, agent_id)
    VALUES (%(subtask_id)s, (SELECT name FROM repos WHERE name = %(repo)s), %(agent_id)s)
    ON CONFLICT (subtask_id) DO UPDATE SET repo = EXCLUDED.repo, agent_id = EXCLUDED.agent_id, settled = false
)
INSERT INTO admission_agents AS a (agent_id, claims) VALUES (%(agent_id)s, 1)
ON CONFLICT (agent_id) DO UPDATE SET claims = a.claims + 1, waiting_since = NULL, waiting_until = NULL
RETURNING claims;

-- name: admission_waits
-- A claim refused for want of a slot: its agent waits in line (since its first refusal of this wait) until a little
-- after the time it was told to claim again.
INSERT INTO admission_agents AS a (agent_id, waiting_since, waiting_until)
VALUES (%(agent_id)s, now(), now() + make_interval(secs => %(hold)s))
ON CONFLICT (agent_id) DO UPDATE
SET waiting_since = CASE WHEN a.waiting_until > now() THEN a.waiting_since ELSE now() END,
    waiting_until = EXCLUDED.waiting_until
RETURNING waiting_since;
