-- Read views for the CLI (mergebot status, landed, queue, tree) and their JSON API (mergebot/db/views.py). Named
-- queries, as in every file of this folder.
-- Every view is bounded (LIMIT, or a depth and a LIMIT) and reads through indexes the write path already has:
-- subtasks_owner for holders, candidates_queue and candidates_active for the queue, the primary keys for the
-- newest events and landed rows, subtasks_parent for the tree.

-- name: view_landed
-- What landed, newest first, by repository, owner, subtask and time; keyset paging with before_id.
SELECT l.*, a.name AS owner
FROM landed l JOIN agents a ON a.id = l.owner_id
WHERE (%(repo)s::text IS NULL OR l.repo = %(repo)s::text)
  AND (%(subtask_id)s::bigint IS NULL OR l.subtask_id = %(subtask_id)s::bigint)
  AND (%(owner)s::text IS NULL OR a.name = %(owner)s::text)
  AND (%(since)s::timestamptz IS NULL OR l.landed_at >= %(since)s::timestamptz)
  AND (%(before_id)s::bigint IS NULL OR l.id < %(before_id)s::bigint)
ORDER BY l.id DESC
LIMIT %(limit)s;

-- name: view_landed_totals
SELECT count(*) AS total,
       count(*) FILTER (WHERE landed_at > now() - interval '1 hour') AS last_hour
FROM landed;

-- name: view_holders
-- Agents holding claims, busiest first, with the first few subtasks each holds and its nearest lease expiry.
SELECT a.name AS agent, a.role::text AS role, count(*) AS holding,
       (array_agg(s.id ORDER BY s.id))[1:10] AS subtasks,
       min(s.lease_expires_at) AS next_lease_expiry,
       count(*) OVER () AS agents_total,
       sum(count(*)) OVER ()::bigint AS claims_total
FROM subtasks s JOIN agents a ON a.id = s.owner_id
WHERE s.owner_id IS NOT NULL
GROUP BY a.id, a.name, a.role
ORDER BY holding DESC, a.name
LIMIT %(limit)s;

-- name: view_queue_depth
-- The merge queue's depth per repository (every repository, so an empty queue shows as zeros).
SELECT r.name AS repo,
       count(c.id) FILTER (WHERE c.status = 'queued') AS queued,
       count(c.id) FILTER (WHERE c.status = 'verifying') AS verifying,
       count(c.id) FILTER (WHERE c.status = 'landing') AS landing,
       count(c.id) FILTER (WHERE c.status = 'parked') AS parked,
       count(c.id) FILTER (WHERE c.status = 'awaiting_approval') AS awaiting_approval
FROM repos r
LEFT JOIN candidates c ON c.repo = r.name
                       AND c.status IN ('queued', 'verifying', 'landing', 'parked', 'awaiting_approval')
WHERE (%(repo)s::text IS NULL OR r.name = %(repo)s::text)
GROUP BY r.name
ORDER BY r.name;

-- name: view_queue_repos
SELECT name, target_branch, paused, paused_reason, red_since, forge, forge_repo
FROM repos
WHERE (%(repo)s::text IS NULL OR name = %(repo)s::text)
ORDER BY name;

-- name: view_queue_active
-- What is being verified (or landed) now, with the newest verify job of each candidate.
SELECT c.id, c.repo, c.subtask_id, c.claim_version, a.name AS owner, c.sha, c.status::text AS status,
       c.reason, c.queued_at, c.started_at, s.title,
       j.id AS job_id, j.purpose AS job_purpose, j.status::text AS job_status, j.worker_name,
       j.started_at AS job_started_at
FROM candidates c
JOIN agents a ON a.id = c.owner_id
JOIN subtasks s ON s.id = c.subtask_id
LEFT JOIN LATERAL (
    SELECT v.id, v.purpose, v.status, v.worker_name, v.started_at
    FROM verify_jobs v WHERE v.candidate_id = c.id ORDER BY v.id DESC LIMIT 1
) j ON true
WHERE c.status IN ('verifying', 'landing')
  AND (%(repo)s::text IS NULL OR c.repo = %(repo)s::text)
ORDER BY c.repo, c.started_at, c.id
LIMIT %(limit)s;

-- name: view_queue_waiting
-- What waits, in the order the queue takes it (candidate_next: priority, then in fair turns among their owners,
-- the least served first within a turn, then how many blocked subtasks its landing releases, then arrival: a
-- projection, as the estimates and the aging may still reorder); the ones waiting for an approval (their checks
-- passed) after the queued ones, then parked candidates (main is red).
SELECT w.id, w.repo, w.subtask_id, w.claim_version, w.owner, w.sha, w.status, w.priority, w.reason, w.queued_at,
       w.title, w.unblocks
FROM (
    SELECT v.*, row_number() OVER (PARTITION BY v.repo, v.status, v.owner_id, v.priority
                                   ORDER BY v.unblocks DESC, v.id) AS turn
    FROM (
        SELECT c.id, c.repo, c.subtask_id, c.claim_version, c.owner_id, a.name AS owner, c.sha,
               c.status::text AS status, c.priority, c.reason, c.queued_at, s.title,
               (SELECT count(*) FROM subtask_deps d JOIN subtasks b ON b.id = d.subtask_id
                WHERE d.depends_on_id = c.subtask_id AND b.status = 'blocked') AS unblocks,
               coalesce(c.fair_start, greatest(coalesce(fc.vtime, 0), coalesce(fa.served, 0))) AS tag
        FROM candidates c
        JOIN agents a ON a.id = c.owner_id
        JOIN subtasks s ON s.id = c.subtask_id
        LEFT JOIN fair_accounts fa ON fa.repo = c.repo AND fa.owner_id = c.owner_id
        LEFT JOIN fair_clocks fc ON fc.repo = c.repo
        WHERE c.status IN ('queued', 'parked', 'awaiting_approval')
          AND (%(repo)s::text IS NULL OR c.repo = %(repo)s::text)
    ) v
) w
ORDER BY w.repo, w.status = 'parked', w.status = 'awaiting_approval', w.priority DESC, w.turn, w.tag, w.unblocks DESC,
         w.id
LIMIT %(limit)s;

-- name: view_verify_jobs
-- Verify jobs waiting for a worker and running now (both read through their partial indexes).
SELECT (SELECT count(*) FROM verify_jobs WHERE status = 'queued') AS queued,
       (SELECT count(*) FROM verify_jobs WHERE status = 'running') AS running;

-- name: view_refusals
-- The newest refusals with their reasons: pushes refused at push time (the rule's code), candidates the queue
-- rejected (the reason's kind), and forge pushes that were ignored. Read newest first along events' key.
SELECT e.id, e.at, e.kind, coalesce(e.subtask_id, (e.detail->>'subtask_id')::bigint) AS subtask_id,
       e.claim_version, act.name AS actor,
       coalesce(e.detail->>'repo', c.repo) AS repo,
       coalesce(e.detail->>'sha', c.sha) AS sha,
       refusal_reason(e.kind, e.detail) AS reason,
       coalesce(e.detail->>'message', e.detail->>'reason', e.detail->>'why', '') AS message
FROM events e
LEFT JOIN agents act ON act.id = e.actor_id
LEFT JOIN candidates c ON e.kind = 'candidate_rejected' AND c.id = (e.detail->>'candidate')::bigint
WHERE e.kind IN ('push_refused', 'candidate_rejected', 'push_ignored')
  AND (%(repo)s::text IS NULL OR coalesce(e.detail->>'repo', c.repo) = %(repo)s::text)
ORDER BY e.id DESC
LIMIT %(limit)s;

-- name: view_tree
-- The task tree from the roots (or from one subtask) down to a depth, depth first, at most LIMIT nodes. Each
-- shown node carries its children count, its whole subtree's size and how much of it landed (so a cut tree
-- still says what is below), its dependencies (depends_on, all of them) and waits_on: those that have not landed
-- yet, leaving out its own children (a parent is their integration step; the subtree counts say how far they are).
WITH RECURSIVE shown AS (
    SELECT s.id, 0 AS depth, ARRAY[s.id] AS path
    FROM subtasks s
    WHERE CASE WHEN %(root)s::bigint IS NULL THEN s.parent_id IS NULL ELSE s.id = %(root)s::bigint END
  UNION ALL
    SELECT c.id, p.depth + 1, p.path || c.id
    FROM shown p JOIN subtasks c ON c.parent_id = p.id
    WHERE p.depth < %(depth)s
), page AS (
    SELECT id, depth, path FROM shown ORDER BY path LIMIT %(limit)s
), below AS (
    SELECT p.id AS top, c.id, c.status FROM page p JOIN subtasks c ON c.parent_id = p.id
  UNION ALL
    SELECT b.top, c.id, c.status FROM below b JOIN subtasks c ON c.parent_id = b.id
), rollup AS (
    SELECT top, count(*) AS descendants, count(*) FILTER (WHERE status = 'landed') AS descendants_landed
    FROM below GROUP BY top
)
SELECT s.id, s.parent_id, p.depth, s.title, s.status::text AS status, s.priority, o.name AS owner,
       s.group_name, s.claim_version,
       (SELECT count(*) FROM subtasks k WHERE k.parent_id = s.id) AS children,
       coalesce(r.descendants, 0) AS descendants, coalesce(r.descendants_landed, 0) AS descendants_landed,
       coalesce((SELECT array_agg(d.depends_on_id ORDER BY d.depends_on_id)
                 FROM subtask_deps d WHERE d.subtask_id = s.id), '{}') AS depends_on,
       coalesce((SELECT array_agg(d.depends_on_id ORDER BY d.depends_on_id)
                 FROM subtask_deps d JOIN subtasks x ON x.id = d.depends_on_id
                 WHERE d.subtask_id = s.id AND x.status <> 'landed' AND x.parent_id IS DISTINCT FROM s.id),
                '{}') AS waits_on,
       (SELECT count(*) FROM shown) AS total
FROM page p
JOIN subtasks s ON s.id = p.id
LEFT JOIN agents o ON o.id = s.owner_id
LEFT JOIN rollup r ON r.top = p.id
ORDER BY p.path;

-- name: view_cost_runs
-- What each verify run that finished in the window cost, and where it is charged (``mergebot.cost``; the charges
-- are the view ``run_charges``, migration 0015): one row per run, or per member of the batch a run landed, each
-- with its share of the run's seconds. Seconds are the run's wall time from its start by a worker to its end; a
-- run cancelled before any worker took it cost nothing. Every run's seconds are counted once, so the charges add
-- up to the window's total.
SELECT ch.run_id, ch.repo, ch.purpose, ch.status, ch.charge, ch.landed_id,
       ch.seconds / count(*) OVER (PARTITION BY ch.run_id) AS seconds,
       coalesce(la.name, pa.name) AS agent, l.subtask_id, ch.check_name
FROM run_charges ch
LEFT JOIN landed l ON l.id = ch.landed_id
LEFT JOIN agents la ON la.id = l.owner_id
LEFT JOIN agents pa ON pa.id = ch.pusher_id
WHERE ch.finished_at >= %(since)s AND ch.finished_at < %(until)s AND (%(repo)s::text IS NULL OR ch.repo = %(repo)s::text)
ORDER BY ch.run_id
LIMIT 200000;

-- name: view_cost_pushes
-- The pushes (candidates) queued in the window, by subtask and agent, with how each ended: what a landing took
-- on the way, and each agent's rework.
SELECT c.id, c.subtask_id, c.repo, a.name AS agent, c.status::text AS status,
       CASE WHEN c.status = 'rejected' THEN coalesce(c.verdict ->> 'kind', 'rejected') END AS rejected_as
FROM candidates c JOIN agents a ON a.id = c.owner_id
WHERE c.queued_at >= %(since)s AND c.queued_at < %(until)s
  AND (%(repo)s::text IS NULL OR c.repo = %(repo)s::text)
ORDER BY c.id
LIMIT 200000;

-- name: view_cost_landed
-- The landings in the window (the rows the cost view reports on).
SELECT l.id, l.subtask_id, l.repo, l.kind, a.name AS agent, l.landed_at, l.merged_sha
FROM landed l JOIN agents a ON a.id = l.owner_id
WHERE l.landed_at >= %(since)s AND l.landed_at < %(until)s
  AND (%(repo)s::text IS NULL OR l.repo = %(repo)s::text)
ORDER BY l.id
LIMIT 200000;

-- name: view_stages
-- Where the time of each landing in the window went, stage by stage, as medians and 95th percentiles in seconds
-- (``mergebot cost --stages``): the push reaching the bot (``pushed_at``) to the candidate queued, queued to its last
-- merge, merged to its run created, created to a worker claiming it, the worker's setup before the check, the
-- check itself (its ``duration_ms``), the worker's end after it, and the run's end to the landed row. The run is
-- the one that landed it (``landed.run_id``, a batch's shared one); reverts and landings without the queue are
-- left out.
WITH s AS (
    SELECT c.pushed_at, c.queued_at, c.merged_at, j.created_at, j.started_at, j.finished_at, l.landed_at,
           (j.result->>'duration_ms')::float8 / 1000 AS check_s
    FROM landed l
    JOIN candidates c ON c.subtask_id = l.subtask_id AND c.claim_version = l.claim_version
                     AND c.sha = l.candidate_sha AND c.status = 'landed'
    JOIN verify_jobs j ON j.id = l.run_id
    WHERE l.landed_at >= %(since)s AND l.landed_at < %(until)s AND l.kind = 'land'
      AND (%(repo)s::text IS NULL OR l.repo = %(repo)s::text)
    ORDER BY l.id DESC
    LIMIT 20000
)
SELECT v.ord, v.stage, count(v.seconds) AS n,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY v.seconds) AS p50,
       percentile_cont(0.95) WITHIN GROUP (ORDER BY v.seconds) AS p95
FROM s, LATERAL (VALUES
    (1, 'pushed → queued', extract(epoch FROM s.queued_at - s.pushed_at)),
    (2, 'queued → merged', extract(epoch FROM s.merged_at - s.queued_at)),
    (3, 'merged → run created', extract(epoch FROM s.created_at - s.merged_at)),
    (4, 'run created → started', extract(epoch FROM s.started_at - s.created_at)),
    (5, 'run setup', extract(epoch FROM s.finished_at - s.started_at) - s.check_s),
    (6, 'the check', s.check_s),
    (7, 'run finished → landed', extract(epoch FROM s.landed_at - s.finished_at)),
    (8, 'pushed → landed', extract(epoch FROM s.landed_at - coalesce(s.pushed_at, s.queued_at))),
    (9, 'beyond the check', extract(epoch FROM s.landed_at - coalesce(s.pushed_at, s.queued_at)) - s.check_s)
) AS v(ord, stage, seconds)
WHERE v.seconds IS NOT NULL
GROUP BY v.ord, v.stage
ORDER BY v.ord;
