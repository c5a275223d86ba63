-- The web pages' read model (reviewers and operators; mergebot/db/pages.py). Named queries, as in every file of this
-- folder; every name starts with "page_". Agents drive how big these tables grow, so every query is bounded: a
-- LIMIT, keyset paging on an indexed column, or a window over the newest rows ("recent" means within the last few
-- thousand ids).

-- name: page_repos
SELECT name, target_branch, verifier_command, paused, paused_reason, red_since, forge, forge_repo
FROM repos ORDER BY name LIMIT 200;

-- ---------------------------------------------------------------------------------------------------------
-- Landed: every landed row, newest first, with the candidate that carried its evidence (sandbox, log).

-- name: page_landed
SELECT l.id, l.subtask_id, l.claim_version, l.repo, l.target_ref, l.candidate_sha, l.base_sha, l.merged_sha,
       l.tree_sha, l.verifier_command, l.verifier_result, l.duration_ms, l.log_digest, l.main_status, l.landed_at,
       a.name AS owner, s.title, c.id AS candidate_id,
       coalesce(l.verifier_sandbox, c.verifier ->> 'sandbox') AS sandbox, l.verifier_limits AS limits
FROM landed l
JOIN agents a ON a.id = l.owner_id
JOIN subtasks s ON s.id = l.subtask_id
LEFT JOIN LATERAL (
    SELECT c.id, c.verifier FROM candidates c
    WHERE c.subtask_id = l.subtask_id AND c.claim_version = l.claim_version AND c.sha = l.candidate_sha
      AND c.status = 'landed'
    ORDER BY c.id DESC LIMIT 1
) c ON true
WHERE (%(repo)s::text IS NULL OR l.repo = %(repo)s::text)
  AND (%(owner)s::text IS NULL OR a.name = %(owner)s::text)
  AND (%(subtask_id)s::bigint IS NULL OR l.subtask_id = %(subtask_id)s::bigint)
  AND (%(since)s::date IS NULL OR l.landed_at >= %(since)s::date)
  AND (%(until)s::date IS NULL OR l.landed_at < %(until)s::date + 1)
  AND (%(before_id)s::bigint IS NULL OR l.id < %(before_id)s::bigint)
ORDER BY l.id DESC
LIMIT %(limit)s;

-- name: page_landed_one
SELECT l.*, a.name AS owner, s.title, s.status AS subtask_status, s.created_at AS subtask_created_at,
       c.id AS candidate_id, c.verifier -> 'tests' AS tests,
       coalesce(l.verifier_sandbox, c.verifier ->> 'sandbox') AS sandbox, c.verifier ->> 'exit_code' AS exit_code,
       (c.verifier ->> 'log_size')::bigint AS log_size, c.ref,
       (SELECT j.id FROM verify_jobs j WHERE j.landed_id = l.id AND j.parent_id IS NULL
          AND j.purpose NOT IN ('reverify', 'held_out')
        ORDER BY j.id DESC LIMIT 1) AS post_land_job_id,
       (SELECT r.id FROM landed r WHERE r.reverts = l.id) AS reverted_by
FROM landed l
JOIN agents a ON a.id = l.owner_id
JOIN subtasks s ON s.id = l.subtask_id
LEFT JOIN LATERAL (
    SELECT c.id, c.verifier, c.ref FROM candidates c
    WHERE c.subtask_id = l.subtask_id AND c.claim_version = l.claim_version AND c.sha = l.candidate_sha
      AND c.status = 'landed'
    ORDER BY c.id DESC LIMIT 1
) c ON true
WHERE l.id = %(id)s;

-- name: page_candidate
-- One candidate and its verifier record (the bounded log: head, tail, size, digest; earlier runs under "runs").
SELECT c.*, a.name AS owner, s.title,
       (SELECT l.id FROM landed l WHERE l.subtask_id = c.subtask_id AND l.candidate_sha = c.sha
          AND l.claim_version = c.claim_version) AS landed_id
FROM candidates c
JOIN agents a ON a.id = c.owner_id
JOIN subtasks s ON s.id = c.subtask_id
WHERE c.id = %(id)s;

-- name: page_job
SELECT j.id, j.repo, j.commit_sha, j.command, j.purpose, j.status, j.outcome, j.result, j.worker_name,
       j.candidate_id, j.landed_id, j.attempts, j.created_at, j.started_at, j.finished_at
FROM verify_jobs j WHERE j.id = %(id)s;

-- ---------------------------------------------------------------------------------------------------------
-- The queue: what is being verified, what waits, what was refused. Partial indexes make the counts cheap.

-- name: page_queue_repos
-- With, for a forge repository, its outbox: the statuses, check runs and pull request comments waiting to be sent
-- (a newer status of the same commit replaces an older one, which is not counted), how long the oldest has waited,
-- the last error.
SELECT r.name, r.target_branch, r.paused, r.paused_reason, r.red_since, r.forge, r.unattested,
       (SELECT count(*) FROM candidates c WHERE c.repo = r.name AND c.status = 'queued') AS queued,
       (SELECT count(*) FROM candidates c WHERE c.repo = r.name AND c.status IN ('verifying', 'landing'))
           AS in_flight,
       o.waiting AS outbox_waiting, extract(epoch FROM now() - o.oldest)::float8 AS outbox_oldest_s,
       o.last_error AS outbox_error
FROM repos r
LEFT JOIN LATERAL (
    SELECT count(*) AS waiting, min(w.since) AS oldest,
           (array_agg(w.last_error ORDER BY w.since DESC) FILTER (WHERE w.last_error IS NOT NULL))[1] AS last_error
    FROM (SELECT f.created_at AS since, f.last_error FROM forge_statuses f
          WHERE f.repo = r.name AND f.sent_at IS NULL AND f.given_up_at IS NULL
            AND NOT EXISTS (SELECT 1 FROM forge_statuses n WHERE n.repo = f.repo AND n.sha = f.sha AND n.id > f.id)
          UNION ALL
          SELECT k.updated_at, k.last_error FROM forge_check_runs k
          WHERE k.repo = r.name AND k.sent_version < k.version AND k.given_up_at IS NULL
          UNION ALL
          SELECT u.updated_at, u.last_error FROM forge_pulls u
          WHERE u.repo = r.name AND u.sent_version < u.version AND u.given_up_at IS NULL) w
) o ON r.forge IS NOT NULL
ORDER BY r.name LIMIT 200;

-- name: page_queue_active
-- In flight (verifying or landing), with the verify job that runs now, if any.
SELECT c.id, c.repo, c.subtask_id, c.claim_version, c.sha, c.status, c.priority, c.base_sha, c.merged_sha,
       c.queued_at, c.started_at, a.name AS owner, s.title,
       j.id AS job_id, j.status AS job_status, j.purpose AS job_purpose, j.worker_name, j.started_at AS job_started_at
FROM candidates c
JOIN agents a ON a.id = c.owner_id
JOIN subtasks s ON s.id = c.subtask_id
LEFT JOIN LATERAL (
    SELECT j.id, j.status, j.purpose, j.worker_name, j.started_at FROM verify_jobs j
    WHERE j.candidate_id = c.id ORDER BY j.id DESC LIMIT 1
) j ON true
WHERE c.status IN ('verifying', 'landing')
ORDER BY c.repo, c.started_at NULLS LAST, c.id
LIMIT %(limit)s;

-- name: page_queue_waiting
-- Queued candidates in the order the queue takes them (priority, then how many blocked subtasks their landing
-- releases, then arrival), then parked ones (waiting for a red main to turn green).
SELECT w.* FROM (
    SELECT c.id, c.repo, c.subtask_id, c.claim_version, c.sha, c.status, c.priority, c.reason, c.queued_at,
           a.name AS owner, s.title,
           (SELECT count(*) FROM subtask_deps d JOIN subtasks b ON b.id = d.subtask_id
            WHERE d.depends_on_id = c.subtask_id AND b.status = 'blocked') AS unblocks
    FROM candidates c
    JOIN agents a ON a.id = c.owner_id
    JOIN subtasks s ON s.id = c.subtask_id
    WHERE c.status = 'queued'
      AND c.id IN (SELECT q.id FROM candidates q WHERE q.status = 'queued' ORDER BY q.id LIMIT 1000)
) w
ORDER BY w.repo, w.priority DESC, w.unblocks DESC, w.id
LIMIT %(limit)s;

-- name: page_queue_parked
-- What waits outside the queue's order: parked (main is red) and, their checks passed, waiting for an approval.
SELECT c.id, c.repo, c.subtask_id, c.claim_version, c.sha, c.status, c.priority, c.reason, c.queued_at,
       a.name AS owner, s.title
FROM candidates c
JOIN agents a ON a.id = c.owner_id
JOIN subtasks s ON s.id = c.subtask_id
WHERE c.status IN ('parked', 'awaiting_approval') AND c.id > (SELECT coalesce(max(id), 0) FROM candidates) - 20000
ORDER BY c.id
LIMIT %(limit)s;

-- name: page_queue_rejected
-- Candidates the queue refused (conflicts, failing checks), newest first, among the newest candidates.
SELECT c.id, c.repo, c.subtask_id, c.claim_version, c.sha, c.status, c.reason, c.finished_at,
       a.name AS owner, s.title, c.verifier IS NOT NULL AS has_log, c.verdict ->> 'kind' AS kind,
       c.verdict -> 'failing_tests' AS failing_tests
FROM candidates c
JOIN agents a ON a.id = c.owner_id
JOIN subtasks s ON s.id = c.subtask_id
WHERE c.status = 'rejected' AND c.id > (SELECT coalesce(max(id), 0) FROM candidates) - 5000
ORDER BY c.id DESC
LIMIT %(limit)s;

-- name: page_queue_push_refusals
-- Pushes refused at the door (pre-receive), newest first, among the newest events.
SELECT e.id, e.at, a.name AS actor, coalesce(e.subtask_id, (e.detail ->> 'subtask_id')::bigint) AS subtask_id,
       e.detail ->> 'repo' AS repo, e.detail ->> 'ref' AS ref,
       e.detail ->> 'code' AS code, e.detail ->> 'message' AS message
FROM events e LEFT JOIN agents a ON a.id = e.actor_id
WHERE e.kind = 'push_refused' AND e.id > (SELECT coalesce(max(id), 0) FROM events) - 20000
ORDER BY e.id DESC
LIMIT %(limit)s;

-- name: page_queue_landed_recent
SELECT l.id, l.repo, l.subtask_id, l.claim_version, l.merged_sha, l.verifier_result, l.main_status, l.landed_at,
       a.name AS owner, s.title
FROM landed l JOIN agents a ON a.id = l.owner_id JOIN subtasks s ON s.id = l.subtask_id
ORDER BY l.landed_at DESC, l.id DESC
LIMIT %(limit)s;

-- name: page_queue_fingerprint
-- What changes when the queue page would change; the live stream sends an update when this row does.
SELECT concat_ws(':',
    (SELECT coalesce(max(id), 0) FROM candidates),
    (SELECT count(*) FROM candidates WHERE status = 'queued'),
    (SELECT count(*) FROM candidates WHERE status IN ('verifying', 'landing')),
    (SELECT coalesce(max(id), 0) FROM verify_jobs),
    (SELECT count(*) FROM verify_jobs WHERE status = 'running'),
    (SELECT coalesce(max(id), 0) FROM landed),
    (SELECT coalesce(max(e.id), 0) FROM events e
     WHERE e.kind IN ('push_refused', 'candidate_rejected')
       AND e.id > (SELECT coalesce(max(id), 0) FROM events) - 5000),
    (SELECT md5(coalesce(string_agg(r.name || r.paused::text || coalesce(r.red_since, '')
                                    || coalesce(r.unattested ->> 'count', ''), ',' ORDER BY r.name), ''))
     FROM repos r)
) AS fingerprint;

-- ---------------------------------------------------------------------------------------------------------
-- Subtasks: the tree, a window at a time.

-- name: page_tree_roots
-- The top level (subtasks without a parent), keyset-paged by id.
SELECT s.id FROM subtasks s
WHERE s.parent_id IS NULL AND s.id > %(after_id)s
ORDER BY s.id LIMIT %(limit)s;

-- name: page_tree_children
SELECT s.id FROM subtasks s
WHERE s.parent_id = %(parent_id)s AND s.id > %(after_id)s
ORDER BY s.id LIMIT %(limit)s;

-- name: page_tree_window
-- The given first level and up to depth levels below it, at most fanout children per node and max_nodes in all.
-- A recursive query is evaluated level by level and only as far as the outer LIMIT reads, so the cost follows
-- the window, not the tree. Each node comes with its children's count (and how many landed), how many of its
-- dependencies are its own children, the others (the first 8 with their status, and their count) and how many
-- subtasks wait on it.
WITH RECURSIVE win AS (
    SELECT f.id, 1 AS depth, ARRAY[f.id] AS path
    FROM unnest(%(ids)s::bigint[]) AS f(id)
    UNION ALL
    SELECT c.id, w.depth + 1, w.path || c.id
    FROM win w
    CROSS JOIN LATERAL (
        SELECT s.id FROM subtasks s WHERE s.parent_id = w.id ORDER BY s.id LIMIT %(fanout)s
    ) c
    WHERE w.depth < %(depth)s
)
SELECT s.id, s.parent_id, s.title, s.status::text AS status, s.priority, s.claim_version, s.group_name,
       o.name AS owner, w.depth, w.path,
       ch.children, ch.children_landed,
       coalesce(dp.deps, '[]'::jsonb) AS deps, dc.other_deps, dc.child_deps,
       (SELECT count(*) FROM subtask_deps d WHERE d.depends_on_id = s.id) AS dependents
FROM (SELECT * FROM win LIMIT %(max_nodes)s) w
JOIN subtasks s ON s.id = w.id
LEFT JOIN agents o ON o.id = s.owner_id
CROSS JOIN LATERAL (
    SELECT count(*) AS children, count(*) FILTER (WHERE c.status = 'landed') AS children_landed
    FROM subtasks c WHERE c.parent_id = s.id
) ch
CROSS JOIN LATERAL (
    -- The dependency's parent by a scalar subquery: one primary-key probe per edge, whatever the statistics say
    -- (as a join, fresh tables without statistics were hash-joined against the whole table once per node).
    SELECT count(*) FILTER (WHERE e.parent_id IS DISTINCT FROM s.id) AS other_deps,
           count(*) FILTER (WHERE e.parent_id = s.id) AS child_deps
    FROM (SELECT (SELECT x.parent_id FROM subtasks x WHERE x.id = d.depends_on_id) AS parent_id
          FROM subtask_deps d WHERE d.subtask_id = s.id) e
) dc
LEFT JOIN LATERAL (
    SELECT jsonb_agg(jsonb_build_object('id', x.id, 'status', x.status) ORDER BY x.id) AS deps
    FROM (
        SELECT ds.id, ds.status::text AS status FROM subtask_deps d JOIN subtasks ds ON ds.id = d.depends_on_id
        WHERE d.subtask_id = s.id AND ds.parent_id IS DISTINCT FROM s.id
        ORDER BY ds.id LIMIT 8
    ) x
) dp ON true
ORDER BY w.path;

-- name: page_subtask_ancestors
WITH RECURSIVE up AS (
    SELECT s.id, s.parent_id, s.title, s.status::text AS status, 0 AS hops FROM subtasks s WHERE s.id = %(id)s
    UNION ALL
    SELECT p.id, p.parent_id, p.title, p.status::text, u.hops + 1
    FROM up u JOIN subtasks p ON p.id = u.parent_id
    WHERE u.hops < 64
)
SELECT id, parent_id, title, status, hops FROM up ORDER BY hops DESC;

-- name: page_subtree_counts
-- Status counts of a whole subtree (the node and everything under it), reading at most max_rows rows.
WITH RECURSIVE sub AS (
    SELECT s.id, s.status FROM subtasks s WHERE s.id = %(id)s
    UNION ALL
    SELECT c.id, c.status FROM sub JOIN subtasks c ON c.parent_id = sub.id
)
SELECT x.status::text AS status, count(*) AS n
FROM (SELECT * FROM sub LIMIT %(max_rows)s) x
GROUP BY x.status ORDER BY x.status;

-- name: page_subtasks_by_status
-- A flat list (poison pills, what runs now), keyset-paged by id.
SELECT s.id, s.parent_id, s.title, s.status::text AS status, s.priority, s.claim_version, s.attempts,
       s.max_attempts, s.status_reason, s.group_name, s.updated_at, o.name AS owner
FROM subtasks s LEFT JOIN agents o ON o.id = s.owner_id
WHERE s.status = %(status)s::subtask_status AND s.id > %(after_id)s
ORDER BY s.id LIMIT %(limit)s;

-- name: page_subtask_deps
SELECT ds.id, ds.title, ds.status::text AS status FROM subtask_deps d JOIN subtasks ds ON ds.id = d.depends_on_id
WHERE d.subtask_id = %(id)s ORDER BY ds.id LIMIT %(limit)s;

-- name: page_subtask_dependents
SELECT ds.id, ds.title, ds.status::text AS status FROM subtask_deps d JOIN subtasks ds ON ds.id = d.subtask_id
WHERE d.depends_on_id = %(id)s ORDER BY ds.id LIMIT %(limit)s;

-- name: page_subtask_events
SELECT e.id, e.at, a.name AS actor, e.kind, e.from_status::text AS from_status, e.to_status::text AS to_status,
       e.claim_version, e.detail
FROM events e LEFT JOIN agents a ON a.id = e.actor_id
WHERE e.subtask_id = %(id)s
ORDER BY e.id DESC LIMIT %(limit)s;

-- name: page_subtask_candidates
SELECT c.id, c.repo, c.claim_version, c.sha, c.status::text AS status, c.reason, c.verdict, c.queued_at,
       c.finished_at, a.name AS owner, c.verifier IS NOT NULL AS has_log
FROM candidates c JOIN agents a ON a.id = c.owner_id
WHERE c.subtask_id = %(id)s ORDER BY c.id DESC LIMIT %(limit)s;

-- name: page_subtask_landed
SELECT id FROM landed WHERE subtask_id = %(id)s;

-- ---------------------------------------------------------------------------------------------------------
-- Agents: who holds what, and their record. Counts are computed for one page of agents at a time.

-- name: page_agents
WITH page AS (
    SELECT a.id, a.name, a.role::text AS role, a.created_at, a.revoked_at
    FROM agents a WHERE a.id > %(after_id)s ORDER BY a.id LIMIT %(limit)s
), held AS (
    SELECT s.owner_id, count(*) AS holding, min(s.claimed_at) AS oldest_claim, max(s.heartbeat_at) AS last_heartbeat,
           (array_agg(s.id ORDER BY s.id))[1:5] AS held_ids
    FROM subtasks s WHERE s.owner_id IN (SELECT id FROM page) GROUP BY s.owner_id
), landed_n AS (
    SELECT l.owner_id, count(*) AS landed FROM landed l WHERE l.owner_id IN (SELECT id FROM page) GROUP BY l.owner_id
), rejected_n AS (
    SELECT c.owner_id, count(*) AS rejected FROM candidates c
    WHERE c.status = 'rejected' AND c.owner_id IN (SELECT id FROM page) GROUP BY c.owner_id
), refused_n AS (
    -- events grows with every write: count the pushes refused among the newest 100,000 events only
    SELECT e.actor_id, count(*) AS refused FROM events e
    WHERE e.kind = 'push_refused' AND e.actor_id IN (SELECT id FROM page)
      AND e.id > (SELECT coalesce(max(id), 0) FROM events) - 100000
    GROUP BY e.actor_id
)
SELECT p.*, g.group_name, g.group_role,
       coalesce(h.holding, 0) AS holding, h.oldest_claim, h.last_heartbeat, coalesce(h.held_ids, '{}') AS held_ids,
       coalesce(ln.landed, 0) AS landed, coalesce(rj.rejected, 0) AS rejected, coalesce(rf.refused, 0) AS refused
FROM page p
LEFT JOIN assignments g ON g.agent_id = p.id
LEFT JOIN held h ON h.owner_id = p.id
LEFT JOIN landed_n ln ON ln.owner_id = p.id
LEFT JOIN rejected_n rj ON rj.owner_id = p.id
LEFT JOIN refused_n rf ON rf.actor_id = p.id
ORDER BY p.id;

-- ---------------------------------------------------------------------------------------------------------
-- The board: announcements and notes, newest first.

-- name: page_announcements
SELECT n.id, coalesce(a.name, 'mergebot') AS author, n.group_name, n.body, n.created_at
FROM announcements n LEFT JOIN agents a ON a.id = n.author_id
WHERE (%(before_id)s::bigint IS NULL OR n.id < %(before_id)s::bigint)
ORDER BY n.id DESC LIMIT %(limit)s;

-- name: page_notes
-- The whole board leaves out the keepers' notes (why a keeper stopped: one per claim, the subtask's own business;
-- they start with messages.workdir.KEEPER_NOTE_PREFIX); a subtask's notes keep them, for its next owner.
SELECT n.id, n.subtask_id, n.group_name, a.name AS author, n.claim_version, n.body, n.created_at, s.title
FROM notes n JOIN agents a ON a.id = n.author_id LEFT JOIN subtasks s ON s.id = n.subtask_id
WHERE (%(subtask_id)s::bigint IS NULL OR n.subtask_id = %(subtask_id)s::bigint)
  AND (%(subtask_id)s::bigint IS NOT NULL OR NOT starts_with(n.body, '[keeper] '))
  AND (%(group_name)s::text IS NULL OR n.group_name = %(group_name)s::text)
  AND (%(before_id)s::bigint IS NULL OR n.id < %(before_id)s::bigint)
ORDER BY n.id DESC LIMIT %(limit)s;

-- ---------------------------------------------------------------------------------------------------------
-- Reconciliation: what does not add up.

-- name: page_findings
SELECT id, repo, kind, detail, found_at FROM reconcile_findings
WHERE (%(before_id)s::bigint IS NULL OR id < %(before_id)s::bigint)
ORDER BY id DESC LIMIT %(limit)s;

-- name: page_intents_pending
-- A landing intent still pending: main may or may not have moved; the reconciler finishes or rolls it back.
SELECT i.id, i.candidate_id, i.repo, i.target_ref, i.old_sha, i.new_sha, i.created_at FROM landing_intents i
WHERE i.status = 'pending' ORDER BY i.id LIMIT %(limit)s;

-- name: page_main_not_green
-- Landed changes whose post-land check on main did not pass (or has not reported for a long time).
SELECT l.id, l.repo, l.subtask_id, l.merged_sha, l.main_status, l.landed_at, s.title
FROM landed l JOIN subtasks s ON s.id = l.subtask_id
WHERE l.id > (SELECT coalesce(max(id), 0) FROM landed) - 20000
  AND (l.main_status NOT IN ('pass', 'flaky', 'pending', 'superseded')
       OR (l.main_status = 'pending' AND l.landed_at < now() - interval '15 minutes'))
ORDER BY l.id DESC LIMIT %(limit)s;

-- name: page_submitted_unqueued
-- Submitted subtasks with nothing in the queue for their claim: "done" without a way to "merged".
SELECT s.id, s.title, s.claim_version, s.candidate_sha, s.updated_at, o.name AS owner
FROM subtasks s LEFT JOIN agents o ON o.id = s.owner_id
WHERE s.status = 'submitted'
  AND NOT EXISTS (SELECT 1 FROM candidates c WHERE c.subtask_id = s.id AND c.claim_version = s.claim_version
                  AND c.status IN ('queued', 'verifying', 'landing', 'parked', 'awaiting_approval'))
ORDER BY s.id LIMIT %(limit)s;

-- name: page_landed_without_row
-- Subtasks marked landed that no landed row explains.
SELECT s.id, s.title, s.finished_at FROM subtasks s
WHERE s.status = 'landed' AND NOT EXISTS (SELECT 1 FROM landed l WHERE l.subtask_id = s.id)
ORDER BY s.id LIMIT %(limit)s;

-- name: page_chart_buckets
-- The charts page (``mergebot.web.charts``): one row per bucket of ``step`` from ``since`` to ``until``, every
-- bucket present (zeros included), read from the rows the landing path writes:
--   landings                        - landed rows in the bucket;
--   wait_p50_s, wait_p95_s          - push to landed of the candidates that landed in the bucket (queued_at to
--                                      finished_at);
--   runs, failures, flaky, pre_existing - verify runs that ended in the bucket (a worker had started them):
--                                      all of them; candidate and retry runs that failed or timed out; retries
--                                      that passed (a flaky pass); main's base checks that failed (a failure
--                                      main already has);
--   waiting, in_flight              - candidates at the bucket's end: pushed and not yet started (parked ones
--                                      are not waiting), and started and not yet finished;
--   window_width                    - the widest speculation window a candidate run was queued with in the
--                                      bucket (NULL when the window queued none).
-- Every part reads only the window's rows, through an index (migration 0015), so a long history costs nothing;
-- the queue depth is a sweep over the candidates' start and end times, not a count per bucket.
WITH buckets AS (
    SELECT t AS start, t + %(step)s::interval AS stop, (n - 1)::int AS k
    FROM generate_series(%(since)s::timestamptz, %(until)s::timestamptz - %(step)s::interval, %(step)s::interval)
         WITH ORDINALITY AS g(t, n)
), land_buckets AS (
    SELECT date_bin(%(step)s::interval, l.landed_at, %(since)s::timestamptz) AS start, count(*) AS landings
    FROM landed l
    WHERE l.landed_at >= %(since)s AND l.landed_at < %(until)s AND (%(repo)s::text IS NULL OR l.repo = %(repo)s::text)
    GROUP BY 1
), wait_buckets AS (
    SELECT date_bin(%(step)s::interval, c.finished_at, %(since)s::timestamptz) AS start,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM c.finished_at - c.queued_at)) AS wait_p50_s,
           percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM c.finished_at - c.queued_at)) AS wait_p95_s
    FROM candidates c
    WHERE c.status = 'landed' AND c.finished_at >= %(since)s AND c.finished_at < %(until)s
      AND (%(repo)s::text IS NULL OR c.repo = %(repo)s::text)
    GROUP BY 1
), run_buckets AS (
    SELECT date_bin(%(step)s::interval, j.finished_at, %(since)s::timestamptz) AS start, count(*) AS runs,
           count(*) FILTER (WHERE j.purpose IN ('candidate', 'retry')
                              AND j.outcome IN ('fail', 'timeout', 'disk_limit', 'memory_limit')) AS failures,
           count(*) FILTER (WHERE j.purpose = 'retry' AND j.outcome = 'pass') AS flaky,
           count(*) FILTER (WHERE j.purpose = 'base'
                              AND j.outcome IN ('fail', 'timeout', 'disk_limit', 'memory_limit')) AS pre_existing
    FROM verify_jobs j
    WHERE j.finished_at >= %(since)s AND j.finished_at < %(until)s AND j.started_at IS NOT NULL
      AND (%(repo)s::text IS NULL OR j.repo = %(repo)s::text)
    GROUP BY 1
), width_buckets AS (
    SELECT date_bin(%(step)s::interval, j.created_at, %(since)s::timestamptz) AS start,
           max(j.window_width) AS window_width
    FROM verify_jobs j
    WHERE j.window_width IS NOT NULL AND j.created_at >= %(since)s AND j.created_at < %(until)s
      AND (%(repo)s::text IS NULL OR j.repo = %(repo)s::text)
    GROUP BY 1
), spans AS (
    -- each candidate's time waiting and time in flight, as [a, b) (not finished: open-ended)
    SELECT c.queued_at AS a, least(coalesce(c.started_at, 'infinity'), coalesce(c.finished_at, 'infinity')) AS b,
           c.status <> 'parked' AS waiting, c.started_at, c.finished_at
    FROM candidates c
    WHERE c.queued_at < %(until)s AND (c.finished_at IS NULL OR c.finished_at >= %(since)s)
      AND (%(repo)s::text IS NULL OR c.repo = %(repo)s::text)
), edges AS (
    -- a span counts at every bucket end in [a, b): +1 from the first bucket end at or after a, -1 from the first
    -- at or after b (an end after the window's is not in it). The first bucket end at or after t is the end of
    -- the bucket holding the instant just before t.
    SELECT greatest(%(since)s::timestamptz,
                    date_bin(%(step)s::interval, e.t - interval '1 microsecond', %(since)s::timestamptz)) AS start,
           e.waiting, e.d
    FROM (SELECT a AS t, 1 AS d, true AS waiting FROM spans WHERE waiting AND a < b
          UNION ALL SELECT b, -1, true FROM spans WHERE waiting AND a < b
          UNION ALL SELECT started_at, 1, false FROM spans WHERE started_at < coalesce(finished_at, 'infinity')
          UNION ALL SELECT finished_at, -1, false FROM spans WHERE started_at < finished_at) e
    WHERE e.t <= %(until)s
), depth AS (
    SELECT start, coalesce(sum(d) FILTER (WHERE waiting), 0) AS waiting,
           coalesce(sum(d) FILTER (WHERE NOT waiting), 0) AS in_flight
    FROM edges GROUP BY start
)
SELECT b.start, coalesce(l.landings, 0) AS landings, w.wait_p50_s, w.wait_p95_s,
       coalesce(r.runs, 0) AS runs, coalesce(r.failures, 0) AS failures, coalesce(r.flaky, 0) AS flaky,
       coalesce(r.pre_existing, 0) AS pre_existing,
       (sum(coalesce(d.waiting, 0)) OVER (ORDER BY b.k))::bigint AS waiting,
       (sum(coalesce(d.in_flight, 0)) OVER (ORDER BY b.k))::bigint AS in_flight,
       ww.window_width
FROM buckets b
LEFT JOIN land_buckets l ON l.start = b.start
LEFT JOIN wait_buckets w ON w.start = b.start
LEFT JOIN width_buckets ww ON ww.start = b.start
LEFT JOIN run_buckets r ON r.start = b.start
LEFT JOIN depth d ON d.start = b.start
ORDER BY b.start;

-- name: page_timeline_runs
-- The run timeline (``mergebot.web.timeline``): verify runs a worker had started that overlap the window
-- (running ones end now): the latest ``limit`` to start, with when each was asked for and its candidate's stages
-- before that (pushed, queued, last merged).
SELECT j.id, j.worker_name, j.purpose, j.status::text AS status, j.outcome, j.candidate_id, j.started_at,
       coalesce(j.finished_at, now()) AS finished_at, j.created_at, c.pushed_at, c.queued_at, c.merged_at
FROM verify_jobs j LEFT JOIN candidates c ON c.id = j.candidate_id
WHERE j.started_at IS NOT NULL AND j.started_at < %(until)s
  AND (j.finished_at >= %(since)s OR (j.finished_at IS NULL AND j.status = 'running'))
  AND (%(repo)s::text IS NULL OR j.repo = %(repo)s::text)
ORDER BY j.started_at DESC, j.id DESC
LIMIT %(limit)s;

-- name: page_child_progress
-- A node's children (the first ``limit`` by id), each with its whole subtree's status counts (the child
-- included), reading at most max_rows rows: the "at a glance" bars of a subtask's page.
WITH RECURSIVE kids AS (
    SELECT c.id, c.title FROM subtasks c WHERE c.parent_id = %(id)s ORDER BY c.id LIMIT %(limit)s
), sub AS (
    SELECT k.id AS top, k.id, s.status FROM kids k JOIN subtasks s ON s.id = k.id
    UNION ALL
    SELECT sub.top, c.id, c.status FROM sub JOIN subtasks c ON c.parent_id = sub.id
), capped AS (SELECT * FROM sub LIMIT %(max_rows)s)
SELECT k.id, k.title, s.status::text AS own_status, x.status::text AS status, count(*) AS n
FROM kids k JOIN subtasks s ON s.id = k.id JOIN capped x ON x.top = k.id
GROUP BY k.id, k.title, s.status, x.status
ORDER BY k.id, x.status;

-- name: page_blocking_graph
-- What still blocks a node: the subtasks it depends on (children it integrates and other dependencies), and
-- theirs, that have not landed (nor been cancelled), found breadth first up to ``hops`` steps away; the
-- nearest ``limit`` of them (the node itself first), each with the ids of its own open dependencies.
WITH RECURSIVE walk AS (
    SELECT s.id, 0 AS hops FROM subtasks s WHERE s.id = %(id)s
    UNION
    SELECT d.depends_on_id, w.hops + 1
    FROM walk w
    JOIN subtask_deps d ON d.subtask_id = w.id
    JOIN subtasks s ON s.id = d.depends_on_id
    WHERE w.hops < %(hops)s AND s.status NOT IN ('landed', 'cancelled')
), near AS (
    SELECT id, min(hops) AS hops FROM walk GROUP BY id ORDER BY min(hops), id LIMIT %(limit)s
)
SELECT n.id, n.hops, s.title, s.status::text AS status,
       coalesce(array_agg(d.depends_on_id ORDER BY d.depends_on_id)
                FILTER (WHERE d.depends_on_id IS NOT NULL), '{}') AS blocked_by
FROM near n
JOIN subtasks s ON s.id = n.id
LEFT JOIN subtask_deps d ON d.subtask_id = n.id AND d.depends_on_id IN (SELECT id FROM near)
GROUP BY n.id, n.hops, s.title, s.status
ORDER BY n.hops, n.id;

-- name: page_candidate_stages
-- One candidate's stages (the candidate page): when its push reached the bot, was queued and last merged, and its
-- deciding run (the run that landed it, else its newest run) created, started and finished, with the check's own
-- time, and when it landed or was otherwise decided.
SELECT c.pushed_at, c.queued_at, c.merged_at, j.created_at AS run_created,
       coalesce(j.started_at, (SELECT min(k.started_at) FROM verify_jobs k WHERE k.parent_id = j.id)) AS run_started,
       j.finished_at AS run_finished, (j.result->>'duration_ms')::float8 / 1000 AS check_s,
       coalesce(l.landed_at, c.finished_at) AS decided_at, l.landed_at IS NOT NULL AS landed
FROM candidates c
LEFT JOIN landed l ON l.subtask_id = c.subtask_id AND l.claim_version = c.claim_version
                  AND l.candidate_sha = c.sha AND c.status = 'landed'
LEFT JOIN LATERAL (SELECT * FROM verify_jobs v
                   WHERE v.id = l.run_id OR (l.run_id IS NULL AND v.candidate_id = c.id AND v.parent_id IS NULL
                                             AND v.purpose IN ('candidate', 'retry'))
                   ORDER BY v.id DESC LIMIT 1) j ON true
WHERE c.id = %(id)s;
