-- Every query Mergebot runs, under "-- name: NAME" headers. Python asks for them by name (mergebot.db.queries)
-- and never builds SQL strings. Owner writes are fenced: they match id, owner, claim_version and status, and
-- zero rows changed means the claim is gone.

-- name: commits_waiting
-- This database's sessions (those this role may see) whose commit waits for a synchronous standby, and how long
-- the oldest has run: a standby that is gone holds every commit until it is back or synchronous_standby_names is
-- cleared, while reads like this one still answer.
SELECT count(*) AS n, coalesce(extract(epoch FROM max(now() - query_start)), 0)::float8 AS longest_s
FROM pg_stat_activity WHERE datname = current_database() AND wait_event = 'SyncRep';

-- name: agent_create
INSERT INTO agents (name, role, token_hash)
VALUES (%(name)s, %(role)s, %(token_hash)s)
RETURNING id, name, role, created_at, revoked_at;

-- name: agent_by_token
SELECT id, name, role, token_hash
FROM agents
WHERE token_hash = %(token_hash)s AND revoked_at IS NULL;

-- name: agent_by_name
SELECT id, name, role, created_at, revoked_at FROM agents WHERE name = %(name)s;

-- name: agent_rotate_token
UPDATE agents SET token_hash = %(token_hash)s, revoked_at = NULL
WHERE name = %(name)s
RETURNING id, name, role, created_at, revoked_at;

-- name: agent_revoke
UPDATE agents SET revoked_at = now()
WHERE name = %(name)s AND revoked_at IS NULL
RETURNING id, name, role, created_at, revoked_at;

-- name: agent_list
SELECT a.id, a.name, a.role, a.created_at, a.revoked_at, g.group_name, g.group_role,
       (SELECT count(*) FROM subtasks s WHERE s.owner_id = a.id) AS holding
FROM agents a LEFT JOIN assignments g ON g.agent_id = a.id
ORDER BY a.id;

-- name: event_insert
INSERT INTO events (actor_id, kind, subtask_id, claim_version, detail)
VALUES (%(actor_id)s, %(kind)s, %(subtask_id)s, %(claim_version)s, %(detail)s);

-- name: group_upsert
-- A NULL description leaves an existing one alone.
INSERT INTO groups (name, description) VALUES (%(name)s, coalesce(%(description)s, ''))
ON CONFLICT (name) DO UPDATE SET description = coalesce(%(description)s, groups.description)
RETURNING name, open, description, created_at;

-- name: group_set_open
UPDATE groups SET open = %(open)s WHERE name = %(name)s
RETURNING name, open, description, created_at;

-- name: group_list
SELECT g.name, g.open, g.description, g.created_at,
       (SELECT count(*) FROM assignments a WHERE a.group_name = g.name) AS members
FROM groups g ORDER BY g.name;

-- name: assignment_set
-- Moving an agent changes only where its next claim looks first; a claim in flight is untouched.
INSERT INTO assignments (agent_id, group_name, group_role, assigned_by)
VALUES (%(agent_id)s, %(group_name)s, %(group_role)s, %(assigned_by)s)
ON CONFLICT (agent_id) DO UPDATE
    SET group_name = EXCLUDED.group_name, group_role = EXCLUDED.group_role,
        assigned_by = EXCLUDED.assigned_by, assigned_at = now()
RETURNING agent_id, group_name, group_role, assigned_by, assigned_at;

-- name: assignment_list
SELECT a.agent_id, ag.name AS agent, a.group_name, a.group_role, a.assigned_at
FROM assignments a JOIN agents ag ON ag.id = a.agent_id
ORDER BY a.group_name, ag.name;

-- name: subtask_create
-- Dependencies are locked FOR SHARE so none of them can land between reading its status and our commit;
-- a landing that waits on that lock then sees our edge and releases us. A repeated idempotency key inserts
-- nothing and returns no row (the caller reads the existing subtask).
WITH deps AS (
    SELECT id, status FROM subtasks WHERE id = ANY(%(depends_on)s::bigint[]) FOR SHARE
), ins AS (
    INSERT INTO subtasks (parent_id, group_name, title, description, status, priority, max_attempts,
                          idempotency_key, created_by, updated_by, paths)
    SELECT %(parent_id)s, %(group_name)s, %(title)s, %(description)s,
           CASE WHEN EXISTS (SELECT 1 FROM deps WHERE status <> 'landed')
                THEN 'blocked' ELSE 'ready' END::subtask_status,
           %(priority)s, %(max_attempts)s, %(idempotency_key)s, %(actor_id)s, %(actor_id)s, %(paths)s::text[]
    WHERE (SELECT count(*) FROM deps) = cardinality(%(depends_on)s::bigint[])
    ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING *
), edges AS (
    INSERT INTO subtask_deps (subtask_id, depends_on_id)
    SELECT ins.id, deps.id FROM ins CROSS JOIN deps
)
SELECT * FROM ins;

-- name: subtasks_open_texts
-- The texts of the subtasks still open (not landed, failed or cancelled) or landed in the last ``landed_days``
-- days (with their latest landed record), newest first, that may be a twin of a new one: a title of about the
-- same length sharing one of its words (``mergebot.similar`` judges the rest).
SELECT s.id, s.title, left(s.description, 1000) AS description, s.status::text AS status,
       l.id AS landed_id, l.landed_at
FROM subtasks s
LEFT JOIN LATERAL (SELECT id, landed_at FROM landed
                   WHERE subtask_id = s.id AND kind = 'land' ORDER BY id DESC LIMIT 1) l ON s.status = 'landed'
WHERE (s.status NOT IN ('landed', 'failed', 'cancelled')
       OR (s.status = 'landed' AND l.landed_at > now() - make_interval(days => %(landed_days)s)))
  AND length(s.title) BETWEEN %(shortest)s AND %(longest)s
  AND regexp_split_to_array(lower(s.title), '[^[:alnum:]]+') && %(words)s::text[]
ORDER BY s.id DESC LIMIT %(limit)s;

-- name: subtasks_by_keys
SELECT idempotency_key FROM subtasks WHERE idempotency_key = ANY(%(keys)s::text[]);

-- name: subtask_dep_guard
-- Before adding dependencies to an existing subtask: its status, and how many of the new ones have not landed.
SELECT s.status::text AS status,
       (SELECT count(*) FROM subtasks d WHERE d.id = ANY(%(depends_on)s::bigint[]) AND d.status <> 'landed')
           AS unlanded
FROM subtasks s WHERE s.id = %(id)s
FOR UPDATE OF s;

-- name: subtask_add_deps
-- Adds edges to a subtask that exists already (a tree's parent waits for its children); a ready subtask
-- with an unlanded new dependency goes back to blocked. The acyclicity trigger guards every edge.
WITH deps AS (
    SELECT id, status FROM subtasks WHERE id = ANY(%(depends_on)s::bigint[]) FOR SHARE
), edges AS (
    INSERT INTO subtask_deps (subtask_id, depends_on_id)
    SELECT %(id)s, deps.id FROM deps
    ON CONFLICT DO NOTHING
)
UPDATE subtasks SET status = 'blocked', updated_by = %(actor_id)s
WHERE id = %(id)s AND status = 'ready' AND EXISTS (SELECT 1 FROM deps WHERE status <> 'landed')
RETURNING id;

-- name: subtask_by_idempotency_key
SELECT * FROM subtasks WHERE idempotency_key = %(idempotency_key)s;

-- name: subtasks_existing
SELECT id FROM subtasks WHERE id = ANY(%(ids)s::bigint[]);

-- name: subtask_claim
-- One statement, River-style. Optionally completes (submits) the caller's current subtask first, fenced,
-- and claims only if that completion held: the fused cycle costs one round trip and one commit.
-- The claim prefers ready subtasks of the caller's group; outside it, ungrouped subtasks, or any subtask
-- once the lead opened the group (an agent without a group roams freely).
-- Footprints: ``claim_free`` (migration 0010, a function so that its plans are cached and this statement's
-- planning stays small) returns, while some subtask in flight has a footprint, a ready subtask of the top
-- priority whose footprint overlaps none of theirs, locked; NULL when there is none (or nobody uses footprints,
-- read from a partial index that is then empty), and the claim goes on as it always did.
WITH done AS (
    UPDATE subtasks SET status = 'submitted', candidate_sha = %(done_sha)s, lease_expires_at = NULL,
                        status_reason = NULL, updated_by = %(agent_id)s
    WHERE id = %(done_id)s AND owner_id = %(agent_id)s AND claim_version = %(done_version)s
      AND status = 'running'
    RETURNING id
), go AS (
    SELECT %(done_id)s::bigint IS NULL OR EXISTS (SELECT 1 FROM done) AS ok
), me AS (
    SELECT a.group_name, coalesce(g.open, true) AS roam
    FROM (SELECT 1) one
    LEFT JOIN assignments a ON a.agent_id = %(agent_id)s
    LEFT JOIN groups g ON g.name = a.group_name
), free AS (
    -- footprints: a ready subtask whose footprint overlaps none in flight, among equals (``claim_free``)
    SELECT claim_free(me.group_name, me.roam) AS id FROM me, go WHERE go.ok
), own AS (
    SELECT s.id FROM subtasks s, me, go
    WHERE s.status = 'ready' AND s.group_name = me.group_name AND go.ok AND (SELECT id FROM free) IS NULL
    ORDER BY s.priority DESC, s.id
    LIMIT 1 FOR UPDATE OF s SKIP LOCKED
), other AS (
    SELECT s.id FROM subtasks s, me, go
    WHERE s.status = 'ready' AND go.ok AND NOT EXISTS (SELECT 1 FROM own) AND (SELECT id FROM free) IS NULL
      AND (me.roam OR s.group_name IS NULL)
    ORDER BY s.priority DESC, s.id
    LIMIT 1 FOR UPDATE OF s SKIP LOCKED
), pick AS (
    SELECT id FROM free WHERE id IS NOT NULL UNION ALL SELECT id FROM own UNION ALL SELECT id FROM other LIMIT 1
), claimed AS (
    UPDATE subtasks t
    SET status = 'running', owner_id = %(agent_id)s, claim_version = t.claim_version + 1,
        claimed_at = now(), heartbeat_at = now(),
        lease_expires_at = now() + make_interval(secs => %(lease_seconds)s),
        attempts = t.attempts + 1, updated_by = %(agent_id)s  -- status_reason stays: it is the handoff's
    FROM pick WHERE t.id = pick.id
    RETURNING t.*
)
SELECT (SELECT id FROM done) AS done_id, (SELECT ok FROM go) AS done_ok, claimed.*
FROM (SELECT 1) one LEFT JOIN claimed ON true;

-- name: subtasks_overlapping
-- The subtasks in flight whose footprints may overlap ``paths`` (``footprints_overlap``), with their owners.
SELECT s.id, s.title, s.status::text AS status, a.name AS owner, s.claim_version, s.paths
FROM subtasks s JOIN agents a ON a.id = s.owner_id
WHERE s.owner_id IS NOT NULL AND s.id <> %(id)s AND s.paths <> '{}' AND footprints_overlap(s.paths, %(paths)s::text[])
ORDER BY s.id LIMIT 50;

-- name: subtask_touch
-- The claimer's own estimate of what it will touch, added to the footprint (fenced).
UPDATE subtasks
SET paths = (SELECT array_agg(DISTINCT p ORDER BY p) FROM unnest(paths || %(paths)s::text[]) p),
    updated_by = %(agent_id)s
WHERE id = %(id)s AND owner_id = %(agent_id)s AND claim_version = %(claim_version)s
  AND status IN ('running', 'submitted')
  AND (SELECT count(DISTINCT p) FROM unnest(paths || %(paths)s::text[]) p) <= 100
RETURNING *;

-- name: subtask_heartbeat
-- The one write that does not wait for its WAL flush (synchronous_commit off for this transaction only): a
-- heartbeat lost in a crash costs at most one heartbeat interval of lease, and every agent sends one every few
-- seconds, so under load waiting for the disk was most of their latency (`python -m bench.load`). Claims, submits and
-- releases still wait: losing one after its answer could hand one claim version to two agents.
WITH relaxed AS (SELECT set_config('synchronous_commit', 'off', true) AS v)
UPDATE subtasks
SET heartbeat_at = now(),
    lease_expires_at = CASE WHEN status = 'running'
                            THEN now() + make_interval(secs => %(lease_seconds)s) END,
    updated_by = %(agent_id)s
WHERE id = %(id)s AND owner_id = %(agent_id)s AND claim_version = %(claim_version)s
  AND status IN ('running', 'submitted') AND (SELECT v FROM relaxed) = 'off'
RETURNING *;

-- name: subtask_release
-- A voluntary release is a clean handoff, not a failed attempt: the attempt is given back.
UPDATE subtasks
SET status = 'ready', previous_owner_id = owner_id, owner_id = NULL, lease_expires_at = NULL,
    attempts = greatest(attempts - 1, 0), status_reason = %(reason)s, updated_by = %(agent_id)s
WHERE id = %(id)s AND owner_id = %(agent_id)s AND claim_version = %(claim_version)s
  AND status = 'running'
RETURNING *;

-- name: subtask_submit
UPDATE subtasks
SET status = 'submitted', candidate_sha = %(sha)s, lease_expires_at = NULL, status_reason = NULL,
    updated_by = %(agent_id)s
WHERE id = %(id)s AND owner_id = %(agent_id)s AND claim_version = %(claim_version)s
  AND status = 'running'
RETURNING *;

-- name: subtask_fence_state
-- Why a fenced write at %(claim_version)s changed nothing: the subtask now, who holds it, and when that claim
-- lost its lease (the recovery loop's move of it from running back to ready or failed), if it did.
SELECT s.id, s.status::text AS status, s.owner_id, s.claim_version, o.name AS owner,
       (SELECT max(e.at) FROM events e
        WHERE e.subtask_id = s.id AND e.kind = 'status' AND e.from_status = 'running'
          AND e.to_status IN ('ready', 'failed') AND e.actor_id IS NULL
          AND e.claim_version = %(claim_version)s) AS lapsed_at
FROM subtasks s LEFT JOIN agents o ON o.id = s.owner_id
WHERE s.id = %(id)s;

-- name: subtask_get
SELECT s.*, o.name AS owner, p.name AS previous_owner,
       coalesce((SELECT array_agg(d.depends_on_id ORDER BY d.depends_on_id)
                 FROM subtask_deps d WHERE d.subtask_id = s.id), '{}') AS depends_on
FROM subtasks s
LEFT JOIN agents o ON o.id = s.owner_id
LEFT JOIN agents p ON p.id = s.previous_owner_id
WHERE s.id = %(id)s;

-- name: subtask_list
SELECT s.id, s.parent_id, s.group_name, s.title, s.status, s.priority, s.claim_version, s.attempts,
       o.name AS owner, s.lease_expires_at, s.updated_at
FROM subtasks s LEFT JOIN agents o ON o.id = s.owner_id
WHERE (%(status)s::subtask_status IS NULL OR s.status = %(status)s::subtask_status)
  AND (%(group_name)s::text IS NULL OR s.group_name = %(group_name)s::text)
  AND (%(owner_id)s::bigint IS NULL OR s.owner_id = %(owner_id)s::bigint)
  AND s.id > %(after_id)s
ORDER BY s.id
LIMIT %(limit)s;

-- name: subtask_counts
SELECT status, count(*) AS n FROM subtasks GROUP BY status ORDER BY status;

-- name: subtask_statuses
SELECT id, status FROM subtasks WHERE id = ANY(%(ids)s::bigint[]);

-- name: subtask_recover_expired
-- A missed lease is uncertainty, not death: only after lease + grace does the subtask go back to ready
-- (or to failed once its attempts are spent). The next claim bumps the version, fencing the old owner out.
UPDATE subtasks t
SET status = CASE WHEN t.attempts >= t.max_attempts THEN 'failed' ELSE 'ready' END::subtask_status,
    status_reason = CASE WHEN t.attempts >= t.max_attempts
                         THEN 'poison pill: lease lost on each of ' || t.attempts || ' attempts'
                         ELSE 'lease expired' END,
    previous_owner_id = t.owner_id, owner_id = NULL, lease_expires_at = NULL, updated_by = NULL
FROM (
    SELECT id FROM subtasks
    WHERE status = 'running' AND lease_expires_at < now() - make_interval(secs => %(grace_seconds)s)
    ORDER BY lease_expires_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
) expired
WHERE t.id = expired.id
RETURNING t.id, t.status, t.claim_version, t.previous_owner_id;

-- name: subtask_reject
-- The landing path refused the candidate (conflict, failed check): back to running for the same owner and
-- claim version, with a fresh lease and the reason.
UPDATE subtasks
SET status = 'running', status_reason = left(%(reason)s, 2000), heartbeat_at = now(),
    lease_expires_at = now() + make_interval(secs => %(lease_seconds)s), updated_by = %(actor_id)s
WHERE id = %(id)s AND claim_version = %(claim_version)s AND status = 'submitted'
  AND (%(sha)s::text IS NULL OR candidate_sha = %(sha)s::text)  -- a newer push is not bounced for an old one
RETURNING *;

-- name: subtask_land
-- Marks the subtask landed and writes its landed row, in one statement, fenced by owner and claim version.
-- Not by sha: main already holds this verified candidate of the current claim; a newer push that raced the
-- landing is superseded by it, never the other way round (main and the landed rows must agree).
WITH land AS (
    UPDATE subtasks
    SET status = 'landed', previous_owner_id = owner_id, owner_id = NULL, status_reason = NULL,
        candidate_sha = %(candidate_sha)s, updated_by = %(actor_id)s
    WHERE id = %(id)s AND owner_id = %(owner_id)s AND claim_version = %(claim_version)s
      AND status = 'submitted'
    RETURNING id, claim_version, previous_owner_id AS owner_id
)
INSERT INTO landed (subtask_id, claim_version, owner_id, repo, target_ref, candidate_sha, base_sha,
                    merged_sha, tree_sha, verifier_command, verifier_result, duration_ms, log_digest,
                    main_sha, batch_size, verifier_cache, batch_id, run_id, kind, reverts, verifier_sandbox,
                    verifier_limits, acceptance, tests_changed, policy)
SELECT land.id, land.claim_version, land.owner_id, %(repo)s, %(target_ref)s, %(candidate_sha)s,
       %(base_sha)s, %(merged_sha)s, %(tree_sha)s, %(verifier_command)s, %(verifier_result)s,
       %(duration_ms)s, %(log_digest)s, coalesce(%(main_sha)s, %(merged_sha)s), %(batch_size)s,
       %(verifier_cache)s::jsonb, i.id,
       -- the run: the last one that passed on exactly the commit main moved to (or on that commit with main's tests,
       -- the one the deciding run names), for the landing's own candidate
       (SELECT j.id FROM verify_jobs j
        WHERE j.candidate_id = i.candidate_id AND j.status = 'done' AND j.outcome = 'pass'
          AND j.purpose IN ('candidate', 'retry')
          AND j.commit_sha IN (i.new_sha, coalesce(i.evidence -> 'verifier' ->> 'commit_sha', i.new_sha))
        ORDER BY j.id DESC LIMIT 1),
       CASE WHEN c.reverts IS NULL THEN 'land' ELSE 'revert' END, c.reverts, %(verifier_sandbox)s,
       %(verifier_limits)s,
       (SELECT array_agg(a.path ORDER BY a.path) FROM acceptance_tests a WHERE a.subtask_id = land.id),
       %(tests_changed)s::text[], %(policy)s
FROM land LEFT JOIN landing_intents i ON i.id = %(intent_id)s::bigint
          LEFT JOIN candidates c ON c.id = %(candidate_id)s::bigint
RETURNING *;

-- name: subtask_send_back
-- A revert of a landing has landed: the reverted subtask goes back to the owner who landed it, running at a new
-- claim version (its next landing is another row), with the revert's evidence as the reason.
WITH culprit AS (SELECT subtask_id, claim_version, owner_id FROM landed WHERE id = %(reverts)s)
UPDATE subtasks s
SET status = 'running', owner_id = culprit.owner_id, previous_owner_id = culprit.owner_id,
    claim_version = s.claim_version + 1, claimed_at = now(), heartbeat_at = now(),
    lease_expires_at = now() + make_interval(secs => %(lease_seconds)s), candidate_sha = NULL,
    status_reason = left(%(reason)s, 2000), updated_by = NULL
FROM culprit
WHERE s.id = culprit.subtask_id AND s.status = 'landed' AND s.claim_version = culprit.claim_version
RETURNING s.id, s.claim_version, s.owner_id;

-- name: dependents_hold
-- A reverted subtask's dependents that have not landed: their waiting candidates wait for it to land again
-- (``candidate_next`` holds them) and say so, and each dependent gets the bot's note saying why (its owner reads
-- it with its notes). Their subtask ids.
WITH deps AS (
    SELECT s.id, s.claim_version FROM subtask_deps d JOIN subtasks s ON s.id = d.subtask_id
    WHERE d.depends_on_id = %(id)s AND s.status <> 'landed'
), held AS (
    UPDATE candidates c SET reason = %(reason)s
    WHERE c.subtask_id IN (SELECT id FROM deps) AND c.status IN ('queued', 'parked')
    RETURNING c.id
), noted AS (
    INSERT INTO notes (subtask_id, author_id, claim_version, body)
    SELECT deps.id, %(bot_id)s, deps.claim_version, %(reason)s FROM deps
    RETURNING subtask_id
)
SELECT id FROM deps ORDER BY id;

-- name: subtask_unlanded_dependencies
-- The dependencies of a subtask that are not landed (a landing reverted since it was released), lowest id first.
SELECT dep.id FROM subtask_deps d JOIN subtasks dep ON dep.id = d.depends_on_id
WHERE d.subtask_id = %(id)s AND dep.status <> 'landed'
ORDER BY dep.id;

-- name: revert_subtask_create
-- The bot's own subtask for a revert, submitted by the bot at once (no agent can claim it): one per culprit.
INSERT INTO subtasks (parent_id, title, description, status, priority, owner_id, claim_version, candidate_sha,
                      idempotency_key)
SELECT s.parent_id, %(title)s, %(description)s, 'submitted', 1000000, %(bot_id)s, 1, %(sha)s,
       'mergebot/revert/' || %(reverts)s::text
FROM landed l JOIN subtasks s ON s.id = l.subtask_id WHERE l.id = %(reverts)s
ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
RETURNING *;

-- name: revert_candidate_insert
INSERT INTO candidates (repo, subtask_id, claim_version, owner_id, sha, ref, priority, reverts)
VALUES (%(repo)s, %(subtask_id)s, 1, %(bot_id)s, %(sha)s, %(ref)s, 1000000, %(reverts)s)
RETURNING *;

-- name: reverts_queued
SELECT 1 AS queued FROM candidates WHERE reverts = ANY(%(ids)s::bigint[]) LIMIT 1;

-- name: revert_candidate_of
SELECT * FROM candidates WHERE reverts = %(reverts)s ORDER BY id DESC LIMIT 1;

-- name: landed_since_green
-- The landings main's check has not passed since (the suspects of a red main), oldest first: every row after
-- the newest one whose post-land check passed (or was flaky), up to ``upto``.
SELECT l.*, a.name AS owner FROM landed l JOIN agents a ON a.id = l.owner_id
WHERE l.repo = %(repo)s AND l.id <= %(upto)s
  AND l.id > coalesce((SELECT max(g.id) FROM landed g WHERE g.repo = %(repo)s AND g.id < %(upto)s
                       AND g.main_status IN ('pass', 'flaky')), 0)
ORDER BY l.id
LIMIT 64;

-- name: dependents_lock
-- Lock the blocked dependents before deciding whether they are free: two dependencies landing at once then
-- take turns, and the second sees the first one committed (READ COMMITTED: a new snapshot per statement).
SELECT s.id FROM subtask_deps d JOIN subtasks s ON s.id = d.subtask_id
WHERE d.depends_on_id = %(id)s AND s.status = 'blocked'
ORDER BY s.id
FOR UPDATE OF s;

-- name: dependents_release
UPDATE subtasks s SET status = 'ready', updated_by = %(actor_id)s
WHERE s.id = ANY(%(ids)s::bigint[]) AND s.status = 'blocked'
  AND NOT EXISTS (
      SELECT 1 FROM subtask_deps d JOIN subtasks x ON x.id = d.depends_on_id
      WHERE d.subtask_id = s.id AND x.status <> 'landed'
  )
RETURNING s.id;

-- name: subtask_allow
-- A lead's or admin's permission on a subtask (NULL leaves it as it is).
UPDATE subtasks SET allow_test_removal = coalesce(%(test_removal)s, allow_test_removal),
    allow_check_changes = coalesce(%(check_changes)s, allow_check_changes),
    allow_behaviour_change = coalesce(%(behaviour_change)s, allow_behaviour_change), updated_by = %(actor_id)s
WHERE id = %(id)s
RETURNING *;

-- name: held_out_clear
DELETE FROM held_out_files WHERE repo = %(repo)s;

-- name: held_out_insert
INSERT INTO held_out_files (repo, path, content) VALUES (%(repo)s, %(path)s, %(content)s);

-- name: held_out_get
SELECT path, content FROM held_out_files WHERE repo = %(repo)s ORDER BY path;

-- name: held_out_count
SELECT count(*) AS n FROM held_out_files WHERE repo = %(repo)s;

-- name: acceptance_clear
DELETE FROM acceptance_tests WHERE subtask_id = %(subtask_id)s;

-- name: acceptance_insert
INSERT INTO acceptance_tests (subtask_id, path, content, added_by)
VALUES (%(subtask_id)s, %(path)s, %(content)s, %(actor_id)s);

-- name: acceptance_get
SELECT path, content FROM acceptance_tests WHERE subtask_id = %(subtask_id)s ORDER BY path;

-- name: acceptance_paths
SELECT subtask_id, array_agg(path ORDER BY path) AS paths FROM acceptance_tests
WHERE subtask_id = ANY(%(ids)s::bigint[]) GROUP BY subtask_id;

-- name: acceptance_probe_set
UPDATE subtasks SET acceptance_probe = %(job_id)s, updated_by = %(actor_id)s WHERE id = %(subtask_id)s
RETURNING id;

-- name: subtask_cancel
UPDATE subtasks
SET status = 'cancelled', previous_owner_id = coalesce(owner_id, previous_owner_id), owner_id = NULL,
    lease_expires_at = NULL, status_reason = %(reason)s, updated_by = %(actor_id)s
WHERE id = %(id)s AND status NOT IN ('landed', 'cancelled')
RETURNING *;

-- name: subtask_retry
-- An operator gives a failed subtask another round: ready, or blocked if a dependency has not landed.
UPDATE subtasks s
SET status = CASE WHEN EXISTS (
                 SELECT 1 FROM subtask_deps d JOIN subtasks x ON x.id = d.depends_on_id
                 WHERE d.subtask_id = s.id AND x.status <> 'landed')
             THEN 'blocked' ELSE 'ready' END::subtask_status,
    attempts = 0, status_reason = %(reason)s, updated_by = %(actor_id)s
WHERE s.id = %(id)s AND s.status = 'failed'
RETURNING *;

-- name: note_insert
INSERT INTO notes (subtask_id, group_name, author_id, claim_version, body)
VALUES (%(subtask_id)s, %(group_name)s, %(author_id)s, %(claim_version)s, %(body)s)
RETURNING id, subtask_id, group_name, author_id, claim_version, body, created_at;

-- name: note_insert_fenced
-- An owner's note on its subtask holds while the claim does, or after it ended with nobody claiming since (the
-- owner's subtask landed, or went back to ready or failed: a last word for the next owner, at that version).
INSERT INTO notes (subtask_id, author_id, claim_version, body)
SELECT s.id, %(author_id)s, s.claim_version, %(body)s
FROM subtasks s
WHERE s.id = %(subtask_id)s AND s.claim_version = %(claim_version)s
  AND ((s.owner_id = %(author_id)s AND s.status IN ('running', 'submitted'))
       OR (s.owner_id IS NULL AND s.previous_owner_id = %(author_id)s AND s.status IN ('landed', 'ready', 'failed')))
RETURNING id, subtask_id, group_name, author_id, claim_version, body, created_at;

-- name: note_list
SELECT n.id, n.subtask_id, n.group_name, a.name AS author, n.claim_version, n.body, n.created_at
FROM notes n JOIN agents a ON a.id = n.author_id
WHERE (%(subtask_id)s::bigint IS NULL OR n.subtask_id = %(subtask_id)s::bigint)
  AND (%(group_name)s::text IS NULL OR n.group_name = %(group_name)s::text)
  AND n.id > %(after_id)s
ORDER BY n.id
LIMIT %(limit)s;

-- name: announcement_insert
-- A NULL author is Mergebot itself (a red main, for instance).
INSERT INTO announcements (author_id, group_name, body)
VALUES (%(author_id)s, %(group_name)s, %(body)s)
RETURNING id, author_id, group_name, body, created_at;

-- name: announcement_list
SELECT n.id, coalesce(a.name, 'mergebot') AS author, n.group_name, n.body, n.created_at
FROM announcements n LEFT JOIN agents a ON a.id = n.author_id
WHERE n.id > %(after_id)s
ORDER BY n.id
LIMIT %(limit)s;

-- name: landed_get
SELECT l.*, a.name AS owner FROM landed l JOIN agents a ON a.id = l.owner_id WHERE l.id = %(id)s;

-- name: landed_list
SELECT l.*, a.name AS owner
FROM landed l JOIN agents a ON a.id = l.owner_id
WHERE (%(repo)s::text IS NULL OR l.repo = %(repo)s::text)
  AND (%(subtask_id)s::bigint IS NULL OR l.subtask_id = %(subtask_id)s::bigint)
  AND (%(owner)s::text IS NULL OR a.name = %(owner)s::text)
  AND (%(before_id)s::bigint IS NULL OR l.id < %(before_id)s::bigint)
ORDER BY l.id DESC
LIMIT %(limit)s;

-- name: event_list
-- The status trigger records owners by id; readers get their names.
SELECT e.id, e.at, a.name AS actor, e.kind, e.subtask_id, e.from_status, e.to_status, e.claim_version,
       CASE WHEN e.kind = 'status'
            THEN e.detail - 'owner' - 'previous_owner'
                 || jsonb_strip_nulls(jsonb_build_object('owner', o.name, 'previous_owner', p.name))
            ELSE e.detail END AS detail
FROM events e LEFT JOIN agents a ON a.id = e.actor_id
LEFT JOIN agents o ON o.id = CASE WHEN jsonb_typeof(e.detail->'owner') = 'number'
                                  THEN (e.detail->>'owner')::bigint END
LEFT JOIN agents p ON p.id = CASE WHEN jsonb_typeof(e.detail->'previous_owner') = 'number'
                                  THEN (e.detail->>'previous_owner')::bigint END
WHERE (%(subtask_id)s::bigint IS NULL OR e.subtask_id = %(subtask_id)s::bigint)
  AND e.id > %(after_id)s
ORDER BY e.id
LIMIT %(limit)s;

-- ---------------------------------------------------------------------------------------------------------
-- The landing path: repositories, candidates, intents.

-- name: repo_create
INSERT INTO repos (name, target_branch, verifier_command, verifier_timeout_s, protected_paths, max_push_bytes,
                   max_file_bytes, root_sha, forge, forge_repo, forge_api_url, forge_git_url, webhook_secret_env,
                   forge_token_env, footprint_refuse, cache_paths, cache_key, setup_command, setup_network,
                   post_land_command, sandbox_paths, disk_limit_mb, memory_limit_mb, report, check_config,
                   github_app_id, github_app_key_env, github_installation_id)
VALUES (%(name)s, %(target_branch)s, %(verifier_command)s, %(verifier_timeout_s)s, %(protected_paths)s,
        %(max_push_bytes)s, %(max_file_bytes)s, %(root_sha)s, %(forge)s, %(forge_repo)s, %(forge_api_url)s,
        %(forge_git_url)s, %(webhook_secret_env)s, %(forge_token_env)s, %(footprint_refuse)s, %(cache_paths)s,
        %(cache_key)s, %(setup_command)s, %(setup_network)s, %(post_land_command)s, %(sandbox_paths)s,
        %(disk_limit_mb)s, %(memory_limit_mb)s, %(report)s,
        coalesce(%(check_config)s::text[], '{conftest.py,pytest.ini,tox.ini,noxfile.py}'),
        %(github_app_id)s, %(github_app_key_env)s, %(github_installation_id)s)
RETURNING *;

-- name: repo_update
-- Change a repository's landing rules; a NULL leaves that rule as it is (``clear_setup`` removes the setup).
UPDATE repos SET
    verifier_command = coalesce(%(verifier_command)s, verifier_command),
    verifier_timeout_s = coalesce(%(verifier_timeout_s)s, verifier_timeout_s),
    protected_paths = coalesce(%(protected_paths)s::text[], protected_paths),
    cache_paths = coalesce(%(cache_paths)s::text[], cache_paths),
    cache_key = coalesce(%(cache_key)s::text[], cache_key),
    setup_command = CASE WHEN %(clear_setup)s THEN NULL ELSE coalesce(%(setup_command)s, setup_command) END,
    setup_network = coalesce(%(setup_network)s, setup_network),
    footprint_refuse = coalesce(%(footprint_refuse)s, footprint_refuse),
    post_land_command = CASE WHEN %(post_land_command)s = '' THEN NULL
                             ELSE coalesce(%(post_land_command)s, post_land_command) END,
    sandbox_paths = coalesce(%(sandbox_paths)s::text[], sandbox_paths),
    disk_limit_mb = coalesce(%(disk_limit_mb)s::integer, disk_limit_mb),
    memory_limit_mb = coalesce(%(memory_limit_mb)s::integer, memory_limit_mb),
    report = coalesce(%(report)s::text, report),
    check_config = coalesce(%(check_config)s::text[], check_config),
    held_out_command = coalesce(%(held_out_command)s::text, held_out_command),
    old_tests = coalesce(%(old_tests)s::text, old_tests),
    risk_aware = coalesce(%(risk_aware)s::boolean, risk_aware),
    test_paths = coalesce(%(test_paths)s::text[], test_paths),
    suspicious = coalesce(%(suspicious)s::text, suspicious)
WHERE name = %(name)s
RETURNING *;

-- name: repo_get
SELECT * FROM repos WHERE name = %(name)s;

-- name: repo_list
SELECT * FROM repos ORDER BY name;

-- name: subtask_owner_facts
SELECT s.id AS subtask_id, s.status::text AS status, s.owner_id, s.claim_version, s.paths, s.allow_check_changes,
       EXISTS (SELECT 1 FROM candidates c WHERE c.subtask_id = s.id AND c.status = 'landing') AS landing
FROM subtasks s WHERE s.id = ANY(%(ids)s::bigint[]);

-- name: candidate_twin
-- The same change (patch id) under another subtask: landed first, else the newest live candidate that its
-- subtask still waits on (a cancelled or reclaimed subtask's leftover candidate will never land: no twin).
SELECT c.id AS candidate_id, c.subtask_id, c.status::text AS status, c.sha, a.name AS owner,
       l.merged_sha AS landed_sha
FROM candidates c
JOIN agents a ON a.id = c.owner_id
JOIN subtasks s ON s.id = c.subtask_id
LEFT JOIN landed l ON l.subtask_id = c.subtask_id AND c.status = 'landed'
WHERE c.repo = %(repo)s AND c.patch_id = %(patch_id)s AND c.subtask_id <> %(subtask_id)s
  AND (c.status = 'landed'
       OR (c.status IN ('queued', 'verifying', 'landing', 'parked') AND s.status = 'submitted'
           AND s.claim_version = c.claim_version AND s.candidate_sha = c.sha))
ORDER BY (c.status = 'landed') DESC, c.id DESC
LIMIT 1;

-- name: subtask_submit_push
-- An accepted push submits the subtask (or replaces the candidate of an already submitted one), fenced.
UPDATE subtasks
SET status = 'submitted', candidate_sha = %(sha)s, lease_expires_at = NULL, status_reason = NULL,
    updated_by = %(owner_id)s
WHERE id = %(id)s AND owner_id = %(owner_id)s AND claim_version = %(claim_version)s
  AND status IN ('running', 'submitted')
RETURNING id;

-- name: candidates_supersede
-- A newer push for the same subtask replaces the older candidates still waiting.
UPDATE candidates SET status = 'superseded', reason = %(reason)s, finished_at = now()
WHERE subtask_id = %(subtask_id)s AND status = 'queued'
RETURNING id;

-- name: candidate_insert
INSERT INTO candidates (repo, subtask_id, claim_version, owner_id, sha, ref, priority, patch_id, outside_footprint,
                        paths, failure_risk, risk_facts, pushed_at, suspicious)
SELECT %(repo)s, s.id, s.claim_version, s.owner_id, %(sha)s, %(ref)s, s.priority, %(patch_id)s,
       %(outside_footprint)s::text[], %(paths)s::text[], %(failure_risk)s, %(risk_facts)s::jsonb,
       coalesce(to_timestamp(%(pushed_at)s::float8), now()), %(suspicious)s::jsonb
FROM subtasks s WHERE s.id = %(subtask_id)s
RETURNING *;

-- name: subtask_push_lock
-- Serializes the acceptance of pushes for one subtask (a forge's push and pull-request events for one commit
-- may arrive at the same moment); released at commit.
SELECT pg_advisory_xact_lock(7243503, hashint8(%(subtask_id)s::bigint));

-- name: candidate_same_push
-- A live (or landed) candidate for exactly this push; a rejected or superseded one does not count: pushing that
-- commit again is a new attempt.
SELECT * FROM candidates
WHERE subtask_id = %(subtask_id)s AND claim_version = %(claim_version)s AND sha = %(sha)s
  AND status IN ('queued', 'verifying', 'landing', 'landed', 'parked')
ORDER BY id DESC LIMIT 1;

-- name: branch_tips_unaccounted
-- Subtask branch tips (subtask, claim version, sha) that no candidate accounts for, and whether a refusal of that
-- push is on record: accepted pushes whose post-receive step never ran, for the reconciler's sweep.
SELECT t.subtask_id, t.claim_version, t.sha,
       EXISTS (SELECT 1 FROM events e
               WHERE e.subtask_id = t.subtask_id AND e.kind = 'push_refused' AND e.claim_version = t.claim_version
                 AND e.detail->>'sha' = t.sha) AS refused
FROM unnest(%(subtask_ids)s::bigint[], %(versions)s::bigint[], %(shas)s::text[]) AS t(subtask_id, claim_version, sha)
WHERE NOT EXISTS (SELECT 1 FROM candidates c
                  WHERE c.subtask_id = t.subtask_id AND c.claim_version = t.claim_version AND c.sha = t.sha);

-- name: candidate_next
-- The queue leader takes the next candidate that still holds its fence: its subtask still waits on exactly it (the
-- same owner and claim version, submitted, with this sha). In the same statement every candidate the queue could
-- take that no longer holds its fence is superseded with the reason why (the sentences are parameters:
-- ``gone``, ``reclaimed`` with ``{claim_version}``, ``status`` with ``{status}``, ``replaced``), so taking reads
-- and writes once, never a fence read in Python and a write after it.
-- Of the fenced ones: highest priority; then one that safer candidates have passed over ``max_passes`` times (the
-- oldest such first, so none is passed over more than that); then the one whose landing unblocks the most subtasks
-- (its blocked dependents); then the redo of a subtask that lost the most conflicts (its earlier pushes rejected
-- because another landing changed the same lines first: without this, a redo queued behind fresher pushes on the
-- same file lost again and again); then, where the repository's queue is risk-aware, the one least likely to fail
-- its check (``failure_risk``; unknown counts as the middle); then arrival. Every older fenced queued candidate of
-- the same priority it goes before counts one more pass. ``exclude``: candidates the window re-plans later
-- (lanes). A candidate whose subtask depends on one that is not landed (a reverted landing) is not taken.
-- A waiting reason ("waits for the candidates ahead of it") ends here: it is being verified now.
WITH eligible AS (
    SELECT q.id, r.risk_aware,
           CASE WHEN s.id IS NULL THEN %(gone)s::text
                WHEN s.claim_version <> q.claim_version OR s.owner_id IS DISTINCT FROM q.owner_id
                    THEN replace(%(reclaimed)s::text, '{claim_version}', s.claim_version::text)
                WHEN s.status <> 'submitted' THEN replace(%(status)s::text, '{status}', s.status::text)
                WHEN s.candidate_sha IS DISTINCT FROM q.sha THEN %(replaced)s::text
           END AS unfenced
    FROM candidates q JOIN repos r ON r.name = q.repo LEFT JOIN subtasks s ON s.id = q.subtask_id
    WHERE q.repo = %(repo)s AND q.status = 'queued' AND NOT (q.id = ANY(%(exclude)s::bigint[]))
      -- a dependency that is no longer landed (its landing was reverted): wait until it lands again
      AND NOT EXISTS (SELECT 1 FROM subtask_deps d JOIN subtasks dep ON dep.id = d.depends_on_id
                      WHERE d.subtask_id = q.subtask_id AND dep.status <> 'landed')
), superseded AS (
    UPDATE candidates c SET status = 'superseded', reason = e.unfenced, verdict = NULL, finished_at = now()
    FROM eligible e
    WHERE c.id = e.id AND e.unfenced IS NOT NULL AND c.status = 'queued'
    RETURNING c.id
), pick AS (
    SELECT q.id, q.priority FROM candidates q JOIN eligible e ON e.id = q.id
    WHERE e.unfenced IS NULL
    ORDER BY q.priority DESC,
             q.passed_over >= %(max_passes)s DESC,
             CASE WHEN q.passed_over >= %(max_passes)s THEN q.id END,
             (SELECT count(*) FROM subtask_deps d JOIN subtasks b ON b.id = d.subtask_id
              WHERE d.depends_on_id = q.subtask_id AND b.status = 'blocked') DESC,
             (SELECT count(*) FROM candidates x
              WHERE x.subtask_id = q.subtask_id AND x.id < q.id AND x.status = 'rejected'
                AND x.verdict->>'kind' = 'conflict') DESC,
             CASE WHEN e.risk_aware THEN coalesce(q.failure_risk, 0.5) END,
             q.id
    LIMIT 1
    FOR UPDATE OF q SKIP LOCKED
), passed AS (
    UPDATE candidates o SET passed_over = o.passed_over + 1
    FROM pick
    WHERE o.repo = %(repo)s AND o.status = 'queued' AND o.id < pick.id AND o.priority = pick.priority
      AND NOT (o.id = ANY(%(exclude)s::bigint[]))
      AND NOT EXISTS (SELECT 1 FROM eligible e WHERE e.id = o.id AND e.unfenced IS NOT NULL)
)
UPDATE candidates c SET status = 'verifying', started_at = now(), reason = NULL
FROM pick WHERE c.id = pick.id
RETURNING c.*;

-- name: candidates_waiting
-- Queued candidates, in the queue's order, that the window has not yet tried on the current main (``exclude``).
SELECT c.* FROM candidates c
WHERE c.repo = %(repo)s AND c.status = 'queued' AND NOT (c.id = ANY(%(exclude)s::bigint[]))
ORDER BY c.priority DESC, c.id
LIMIT %(limit)s;

-- name: candidate_merged
UPDATE candidates SET merged_at = clock_timestamp() WHERE id = %(id)s;

-- name: candidate_take
-- One queued candidate taken out of turn (it conflicts with main: judged at once); None if it moved meanwhile.
UPDATE candidates SET status = 'verifying', started_at = now(), reason = NULL
WHERE id = %(id)s AND status = 'queued'
RETURNING *;

-- name: candidates_touching
-- The live candidates of other subtasks that change any of ``paths``, in the queue's order, with their owners.
SELECT c.id, c.subtask_id, c.claim_version, c.sha, c.status::text AS status, a.name AS owner,
       ARRAY(SELECT unnest(c.paths) INTERSECT SELECT unnest(%(paths)s::text[]) ORDER BY 1) AS shared
FROM candidates c JOIN agents a ON a.id = c.owner_id
WHERE c.repo = %(repo)s AND c.subtask_id <> %(subtask_id)s AND c.paths && %(paths)s::text[]
  AND c.status IN ('queued', 'verifying', 'landing', 'parked')
ORDER BY c.status = 'queued', c.priority DESC, c.id
LIMIT 20;

-- name: candidate_fence
-- Are the candidates still what their subtasks wait on? (same owner, claim version and sha, submitted) One query
-- for a whole speculation window.
SELECT s.id AS subtask_id, s.status::text AS status, s.owner_id, s.claim_version, s.candidate_sha, s.title
FROM subtasks s WHERE s.id = ANY(%(subtask_ids)s::bigint[]);

-- name: candidate_finish
-- ``verdict``: the verdict's kind and facts; a new status without one keeps no stale one (NULL), except that a
-- candidate put back in the queue keeps what it was told before (a flaky requeue, said once).
UPDATE candidates
SET status = %(status)s::candidate_status, reason = %(reason)s, base_sha = coalesce(%(base_sha)s, base_sha),
    merged_sha = coalesce(%(merged_sha)s, merged_sha), verifier = coalesce(%(verifier)s, verifier),
    verdict = CASE WHEN %(verdict)s::jsonb IS NOT NULL THEN %(verdict)s::jsonb
                   WHEN %(status)s IN ('queued', 'verifying') THEN verdict END,
    finished_at = CASE WHEN %(status)s IN ('queued', 'verifying', 'landing', 'parked') THEN NULL ELSE now() END
WHERE id = %(id)s
RETURNING *;

-- name: candidate_list
SELECT c.*, a.name AS owner FROM candidates c JOIN agents a ON a.id = c.owner_id
WHERE (%(repo)s::text IS NULL OR c.repo = %(repo)s::text)
  AND (%(subtask_id)s::bigint IS NULL OR c.subtask_id = %(subtask_id)s::bigint)
ORDER BY c.id DESC
LIMIT %(limit)s;

-- name: candidate_get
SELECT * FROM candidates WHERE id = %(id)s;

-- name: candidates_requeue_stuck
-- After a crash: candidates caught mid-verification (no intent written) go back to the queue, and the runs they
-- had are cancelled with them: the queue verifies them again under new jobs, so a killed server's old jobs,
-- re-queued after their lease, would be runs for nobody ahead of live work.
WITH requeued AS (
    UPDATE candidates c SET status = 'queued', started_at = NULL
    WHERE c.repo = %(repo)s AND c.status IN ('verifying', 'landing')
      AND NOT EXISTS (SELECT 1 FROM landing_intents i WHERE i.candidate_id = c.id AND i.status = 'pending')
    RETURNING c.id
), cancelled AS (
    UPDATE verify_jobs j SET status = 'cancelled', finished_at = now(), lease_expires_at = NULL
    WHERE j.candidate_id IN (SELECT id FROM requeued) AND j.status IN ('queued', 'running')
    RETURNING j.id
)
SELECT id, (SELECT count(*) FROM cancelled) AS jobs_cancelled FROM requeued;

-- name: intent_insert
INSERT INTO landing_intents (candidate_id, repo, target_ref, old_sha, new_sha, tree_sha, evidence)
VALUES (%(candidate_id)s, %(repo)s, %(target_ref)s, %(old_sha)s, %(new_sha)s, %(tree_sha)s, %(evidence)s)
RETURNING *;

-- name: intent_pending
SELECT * FROM landing_intents WHERE repo = %(repo)s AND status = 'pending' ORDER BY id;

-- name: intent_resolve
UPDATE landing_intents SET status = %(status)s::intent_status, resolved_at = now()
WHERE id = %(id)s AND status = 'pending'
RETURNING id;

-- name: landed_chain
-- Every landed row of a repository, for walking main's history back to its root.
SELECT merged_sha, base_sha, subtask_id, id FROM landed WHERE repo = %(repo)s;

-- name: finding_insert
INSERT INTO reconcile_findings (repo, kind, detail) VALUES (%(repo)s, %(kind)s, %(detail)s)
RETURNING id;

-- name: finding_list
SELECT * FROM reconcile_findings WHERE (%(repo)s::text IS NULL OR repo = %(repo)s::text)
ORDER BY id DESC LIMIT %(limit)s;

-- ---------------------------------------------------------------------------------------------------------
-- Verify jobs: claimed by workers, fenced by claim_version like subtasks.

-- name: job_insert
INSERT INTO verify_jobs (repo, commit_sha, command, timeout_s, purpose, candidate_id, landed_id, cache,
                         window_width, sandbox)
VALUES (%(repo)s, %(commit_sha)s, %(command)s, %(timeout_s)s, %(purpose)s, %(candidate_id)s, %(landed_id)s,
        %(cache)s, %(window_width)s, %(sandbox)s)
RETURNING *;

-- name: job_claim
-- Candidate runs first: they move main. Then the runs that judge a candidate that failed (its retry, main's
-- base check), which only decide that candidate's verdict; while a speculation window refills they would take
-- a worker from it. Then the checks of what already landed (post-land, manual reruns). Oldest first within each.
WITH pick AS (
    SELECT id FROM verify_jobs WHERE status = 'queued'
    ORDER BY CASE purpose WHEN 'candidate' THEN 0 WHEN 'retry' THEN 1 WHEN 'base' THEN 1 WHEN 'bisect' THEN 1
                          WHEN 'baseline' THEN 1 WHEN 'acceptance' THEN 1 WHEN 'held_out' THEN 0
                          WHEN 'old_tests' THEN 0 ELSE 2 END, id
    LIMIT 1 FOR UPDATE SKIP LOCKED
)
UPDATE verify_jobs j
SET status = 'running', worker_id = %(worker_id)s, worker_name = %(worker_name)s,
    claim_version = j.claim_version + 1, attempts = j.attempts + 1, started_at = now(),
    lease_expires_at = now() + make_interval(secs => %(lease_seconds)s)
FROM pick WHERE j.id = pick.id
RETURNING j.*;

-- name: job_heartbeat
UPDATE verify_jobs SET lease_expires_at = now() + make_interval(secs => %(lease_seconds)s)
WHERE id = %(id)s AND worker_id IS NOT DISTINCT FROM %(worker_id)s::bigint AND claim_version = %(claim_version)s
  AND status = 'running'
RETURNING id;

-- name: job_finish
-- Only the holder of the current claim may report; each job finishes once. Its tree is the one whose whole suite its
-- outcomes describe: the merged commit's when the candidate's own tests ran after main's (``judge.compare.suite``).
UPDATE verify_jobs
SET status = 'done', outcome = %(outcome)s, result = %(result)s, finished_at = now(), lease_expires_at = NULL,
    tree_sha = CASE WHEN coalesce(nullif(%(result)s::jsonb -> 'own' ->> 'tree_sha', ''), %(result)s::jsonb ->> 'tree_sha')
                         ~ '^[0-9a-f]{40}([0-9a-f]{24})?$'
                    THEN coalesce(nullif(%(result)s::jsonb -> 'own' ->> 'tree_sha', ''), %(result)s::jsonb ->> 'tree_sha')
               END
WHERE id = %(id)s AND worker_id IS NOT DISTINCT FROM %(worker_id)s::bigint AND claim_version = %(claim_version)s
  AND status = 'running'
RETURNING *;

-- name: job_recover_expired
-- A worker that went silent loses the job: it goes back to the queue (or ends in error once its attempts are
-- spent), and the next claim bumps the version so the silent worker's late result is refused. A candidate's job
-- that nobody waits for any more is cancelled instead: its candidate is no longer being verified (requeued,
-- landed, refused), or a newer job of the same purpose verifies it now.
UPDATE verify_jobs j
SET status = CASE WHEN expired.obsolete THEN 'cancelled'
                  WHEN j.attempts >= j.max_attempts THEN 'done' ELSE 'queued' END::job_status,
    outcome = CASE WHEN NOT expired.obsolete AND j.attempts >= j.max_attempts THEN 'error' END,
    result = CASE WHEN NOT expired.obsolete AND j.attempts >= j.max_attempts
                  THEN jsonb_build_object('error', 'every worker that took this job lost its lease') END,
    finished_at = CASE WHEN expired.obsolete OR j.attempts >= j.max_attempts THEN now() END,
    lease_expires_at = NULL,
    leases_lost = j.leases_lost + 1
FROM (
    SELECT e.id, e.candidate_id IS NOT NULL AND (
               NOT EXISTS (SELECT 1 FROM candidates c
                           WHERE c.id = e.candidate_id AND c.status IN ('verifying', 'landing'))
               OR EXISTS (SELECT 1 FROM verify_jobs n
                          WHERE n.candidate_id = e.candidate_id AND n.purpose = e.purpose AND n.id > e.id))
           AS obsolete
    FROM verify_jobs e
    WHERE e.status = 'running' AND e.lease_expires_at < now() - make_interval(secs => %(grace_seconds)s)
    ORDER BY e.id LIMIT 1000 FOR UPDATE OF e SKIP LOCKED
) expired
WHERE j.id = expired.id
RETURNING j.id, j.status, j.claim_version;

-- name: jobs_open_on
-- For each of these commits that any job names: whether one of its jobs is still queued or running.
SELECT commit_sha, bool_or(status IN ('queued', 'running')) AS open
FROM verify_jobs WHERE repo = %(repo)s AND commit_sha = ANY(%(shas)s::text[])
GROUP BY commit_sha;

-- name: job_get
SELECT * FROM verify_jobs WHERE id = %(id)s;

-- name: job_fence_state
SELECT id, status::text AS status, worker_id, claim_version FROM verify_jobs WHERE id = %(id)s;

-- name: job_newest_on_main
-- The newest run of this check on main's own code that recorded the plugins it loaded (what a judging run names).
SELECT * FROM verify_jobs
WHERE repo = %(repo)s AND command = %(command)s AND status = 'done' AND purpose = ANY(%(purposes)s::text[])
  AND result -> 'tests' -> 'plugins' IS NOT NULL
ORDER BY id DESC LIMIT 1;

-- name: job_passed_on
-- Whether this exact check already passed on this commit, or on its tree (a judged job whose own tests ran covers
-- the merged tree): main is then known green, and a candidate's failure on top of it cannot be pre-existing.
SELECT id FROM verify_jobs
WHERE repo = %(repo)s AND (commit_sha = %(sha)s OR tree_sha = %(tree)s) AND command = %(command)s
  AND status = 'done' AND outcome IN ('pass', 'flaky')
LIMIT 1;

-- name: job_baseline
-- The outcomes of this check on this tree: the newest finished run that has them, a run that ran to its end (pass
-- or fail) before one cut short. NULL result when none has them (the caller then runs one, purpose baseline).
SELECT * FROM verify_jobs
WHERE repo = %(repo)s AND tree_sha = %(tree_sha)s AND command = %(command)s AND status = 'done'
  AND purpose NOT IN ('held_out', 'acceptance', 'old_tests')
ORDER BY coalesce(result -> 'tests' ->> 'source', '') <> '' DESC, outcome IN ('pass', 'fail') DESC, id DESC
LIMIT 1;

-- name: job_held_out
-- A held-out run's checks, for the worker holding it under this claim (nobody else: not even another verifier).
SELECT h.path, h.content FROM verify_jobs j JOIN held_out_files h ON h.repo = j.repo
WHERE j.id = %(id)s AND j.worker_id IS NOT DISTINCT FROM %(worker_id)s::bigint AND j.claim_version = %(claim_version)s
  AND j.status = 'running' AND j.purpose = 'held_out'
ORDER BY h.path;

-- name: job_many
SELECT * FROM verify_jobs WHERE id = ANY(%(ids)s::bigint[]);

-- name: job_statuses
SELECT id, status::text AS status FROM verify_jobs WHERE id = ANY(%(ids)s::bigint[]);

-- name: job_cancel_for_candidate
UPDATE verify_jobs SET status = 'cancelled', finished_at = now(), lease_expires_at = NULL
WHERE candidate_id = %(candidate_id)s AND status IN ('queued', 'running')
RETURNING id;

-- name: job_cancel_older_post_land
-- Main moved on before these post-land checks started: the newest head's check (or the run that landed it)
-- covers main now. Landed rows of one repository are numbered in the order main moved.
UPDATE verify_jobs SET status = 'cancelled', finished_at = now(), lease_expires_at = NULL
WHERE repo = %(repo)s AND purpose = 'post_land' AND status = 'queued' AND landed_id < %(newer_landed)s
RETURNING id;

-- name: job_list
SELECT * FROM verify_jobs
WHERE (%(status)s::job_status IS NULL OR status = %(status)s::job_status)
  AND (%(candidate_id)s::bigint IS NULL OR candidate_id = %(candidate_id)s::bigint)
ORDER BY id DESC LIMIT %(limit)s;

-- name: landed_set_main_status
-- The post-land check on the commit main moved to covers every row of that landing (all of a batch).
UPDATE landed SET main_status = %(main_status)s
WHERE repo = (SELECT repo FROM landed WHERE id = %(id)s)
  AND main_sha = (SELECT main_sha FROM landed WHERE id = %(id)s)
RETURNING id;

-- name: repo_set_paused
-- An admin's resume also ends a given-up mend's wait: it is tried again.
UPDATE repos SET paused = %(paused)s, paused_reason = %(reason)s,
                 mend_given_up = CASE WHEN %(paused)s THEN mend_given_up END
WHERE name = %(name)s RETURNING *;

-- name: repo_mend_given_up
UPDATE repos SET mend_given_up = %(sha)s WHERE name = %(name)s;

-- name: repo_set_red
UPDATE repos SET red_since = %(sha)s, paused_reason = %(reason)s WHERE name = %(name)s RETURNING *;

-- name: candidates_unpark
UPDATE candidates SET status = 'queued', reason = NULL, started_at = NULL
WHERE repo = %(repo)s AND status = 'parked'
RETURNING id;

-- Forges (mergebot/forge/store.py) ------------------------------------------------------------------------

-- name: forge_repos
SELECT * FROM repos WHERE forge = ANY(%(forges)s::text[]) ORDER BY name;

-- name: forge_link
INSERT INTO forge_links (forge, login, agent_id) VALUES (%(forge)s, lower(%(login)s), %(agent_id)s)
ON CONFLICT (forge, login) DO UPDATE SET agent_id = EXCLUDED.agent_id, created_at = now()
RETURNING *;

-- name: forge_unlink
DELETE FROM forge_links WHERE forge = %(forge)s AND login = lower(%(login)s) RETURNING *;

-- name: forge_links
SELECT l.forge, l.login, a.name AS agent, l.created_at
FROM forge_links l JOIN agents a ON a.id = l.agent_id ORDER BY l.forge, l.login;

-- name: forge_agent
-- The agent a forge login acts as: only through an explicit link, and never a revoked agent.
SELECT a.* FROM forge_links l JOIN agents a ON a.id = l.agent_id
WHERE l.forge = %(forge)s AND l.login = lower(%(login)s) AND a.revoked_at IS NULL;

-- name: delivery_insert
INSERT INTO webhook_deliveries (forge, delivery_id, event, body_sha256, status)
VALUES (%(forge)s, %(delivery_id)s, %(event)s, %(body_sha256)s, 'processing')
ON CONFLICT (forge, delivery_id) DO NOTHING
RETURNING *;

-- name: delivery_get
SELECT * FROM webhook_deliveries WHERE forge = %(forge)s AND delivery_id = %(delivery_id)s;

-- name: delivery_retake
-- A redelivery of a failed delivery (or of one whose processing died long ago) is processed again, once.
UPDATE webhook_deliveries
SET status = 'processing', attempts = attempts + 1, updated_at = now(), http_status = NULL, outcome = NULL
WHERE forge = %(forge)s AND delivery_id = %(delivery_id)s AND body_sha256 = %(body_sha256)s
  AND (status = 'failed' OR (status = 'processing' AND updated_at < now() - make_interval(secs => %(stale_s)s)))
RETURNING *;

-- name: delivery_finish
UPDATE webhook_deliveries
SET status = %(status)s, http_status = %(http_status)s, outcome = %(outcome)s, repo = %(repo)s, updated_at = now()
WHERE forge = %(forge)s AND delivery_id = %(delivery_id)s AND attempts = %(attempt)s
RETURNING *;

-- name: delivery_list
SELECT * FROM webhook_deliveries ORDER BY received_at DESC LIMIT %(limit)s;

-- name: forge_status_insert
INSERT INTO forge_statuses (repo, sha, state, description) VALUES (%(repo)s, %(sha)s, %(state)s, %(description)s)
RETURNING *;

-- name: forge_status_take
-- Due statuses, leased for a minute. Only the newest status of a commit is ever sent: older unsent ones are
-- dropped first, so a late retry can never overwrite a newer verdict on the forge.
WITH stale AS (
    UPDATE forge_statuses f SET given_up_at = now(), last_error = 'superseded by a newer status'
    WHERE f.sent_at IS NULL AND f.given_up_at IS NULL
      AND EXISTS (SELECT 1 FROM forge_statuses n WHERE n.repo = f.repo AND n.sha = f.sha AND n.id > f.id)
    RETURNING f.id
), due AS (
    SELECT f.id FROM forge_statuses f
    WHERE f.sent_at IS NULL AND f.given_up_at IS NULL AND f.next_at <= now()
      AND f.id NOT IN (SELECT id FROM stale)
      AND NOT EXISTS (SELECT 1 FROM forge_statuses n WHERE n.repo = f.repo AND n.sha = f.sha AND n.id > f.id)
    ORDER BY f.next_at, f.id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE forge_statuses f SET next_at = now() + interval '60 seconds', attempts = f.attempts + 1
FROM due WHERE f.id = due.id
RETURNING f.*;

-- name: forge_status_sent
UPDATE forge_statuses SET sent_at = now(), last_error = NULL WHERE id = %(id)s;

-- name: forge_status_failed
UPDATE forge_statuses
SET last_error = %(error)s,
    next_at = now() + make_interval(secs => %(delay_s)s),
    given_up_at = CASE WHEN %(give_up)s THEN now() END
WHERE id = %(id)s;

-- name: check_runs_take
-- Check runs whose candidate moved since they were last sent, leased for a minute. Each is sent as its candidate
-- is now, so the moves between two sends go out as one update.
UPDATE forge_check_runs f SET next_at = now() + interval '60 seconds', attempts = f.attempts + 1
WHERE f.id IN (
    SELECT id FROM forge_check_runs
    WHERE sent_version < version AND given_up_at IS NULL AND next_at <= now()
    ORDER BY next_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED)
RETURNING f.*;

-- name: check_run_sent
-- Sent as of ``version`` (a move after the take stays due: the next pass sends it).
UPDATE forge_check_runs
SET sent_version = greatest(sent_version, %(version)s), check_run_id = coalesce(check_run_id, %(check_run_id)s),
    attempts = 0, last_error = NULL, next_at = now(), updated_at = now()
WHERE id = %(id)s;

-- name: check_run_failed
UPDATE forge_check_runs
SET last_error = %(error)s, next_at = now() + make_interval(secs => %(delay_s)s),
    given_up_at = CASE WHEN %(give_up)s THEN now() END, updated_at = now()
WHERE id = %(id)s;

-- name: pull_seen
-- A pull request's event: remember it (its head branch may have moved to another subtask branch) and have its
-- comment brought up to date.
INSERT INTO forge_pulls (repo, number, head_ref) VALUES (%(repo)s, %(number)s, %(head_ref)s)
ON CONFLICT (repo, number) DO UPDATE
    SET head_ref = EXCLUDED.head_ref, version = forge_pulls.version + 1, next_at = now(), given_up_at = NULL,
        attempts = 0, updated_at = now()
RETURNING *;

-- name: pull_get
SELECT * FROM forge_pulls WHERE repo = %(repo)s AND number = %(number)s;

-- name: pull_answer
-- A command given on the pull request was answered: the comment says so (and, for "why", shows the whole verdict).
UPDATE forge_pulls
SET answer = %(answer)s, full_verdict = full_verdict OR %(full)s, version = version + 1, next_at = now(),
    given_up_at = NULL, attempts = 0, updated_at = now()
WHERE repo = %(repo)s AND number = %(number)s
RETURNING *;

-- name: subtask_set_priority
-- A lead's or admin's priority for a subtask, and for its candidates that still wait: the queue takes higher first.
WITH s AS (UPDATE subtasks SET priority = %(priority)s WHERE id = %(id)s RETURNING id)
UPDATE candidates c SET priority = %(priority)s
WHERE c.subtask_id IN (SELECT id FROM s) AND c.status IN ('queued', 'parked')
RETURNING c.id;

-- name: candidate_withdraw
-- Its owner takes a waiting candidate out of the queue (one being verified or landing is past that).
UPDATE candidates SET status = 'cancelled', reason = %(reason)s, finished_at = now()
WHERE id = %(id)s AND status IN ('queued', 'parked')
RETURNING *;

-- name: pulls_take
-- Pull requests whose comment is behind, leased for a minute.
UPDATE forge_pulls f SET next_at = now() + interval '60 seconds', attempts = f.attempts + 1
WHERE (f.repo, f.number) IN (
    SELECT repo, number FROM forge_pulls
    WHERE sent_version < version AND given_up_at IS NULL AND next_at <= now()
    ORDER BY next_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED)
RETURNING f.*;

-- name: pull_comment_sent
UPDATE forge_pulls
SET sent_version = greatest(sent_version, %(version)s), comment_id = coalesce(comment_id, %(comment_id)s),
    sent_digest = %(digest)s, attempts = 0, last_error = NULL, next_at = now(), updated_at = now()
WHERE repo = %(repo)s AND number = %(number)s;

-- name: pull_comment_failed
UPDATE forge_pulls
SET last_error = %(error)s, next_at = now() + make_interval(secs => %(delay_s)s),
    given_up_at = CASE WHEN %(give_up)s THEN now() END, updated_at = now()
WHERE repo = %(repo)s AND number = %(number)s;

-- name: pulls_of
SELECT * FROM forge_pulls WHERE repo = %(repo)s ORDER BY number;

-- name: candidates_on_ref
-- A pull request's candidates (its head branch's), oldest first.
SELECT * FROM candidates WHERE repo = %(repo)s AND ref = %(ref)s ORDER BY id LIMIT 50;

-- name: check_runs_of
SELECT * FROM forge_check_runs WHERE repo = %(repo)s ORDER BY id;

-- name: forge_status_list
SELECT * FROM forge_statuses WHERE repo = %(repo)s AND (%(sha)s::text IS NULL OR sha = %(sha)s)
ORDER BY id;

-- name: listen_finished
-- The waiter's channels (mergebot.db.waiter): a subtask landed, failed or was cancelled (payload: its id).
LISTEN mergebot_finished;

-- name: listen_candidate
-- A candidate's status changed (payload: "id:status", migration 0007).
LISTEN mergebot_candidate;

-- name: listen_job
-- A verify job finished or was cancelled (payload: its id).
LISTEN mergebot_job;

-- name: queue_lock_try
-- Leadership of one repository's merge queue (mergebot.landing.leader): a session-level advisory lock in its
-- own class (7243502; migrations use 7243500), held on a dedicated connection for as long as it lives.
SELECT pg_try_advisory_lock(7243502, hashtext(%(repo)s)) AS locked;

-- name: listen_ready
-- A subtask became ready (payload: its id, migration 0009): claims waiting for work try again.
LISTEN mergebot_ready;

-- name: candidate_risk_facts
-- What a push's failure estimate rests on (``mergebot.landing.risk.Facts``), read before it is queued: among the
-- repository's last 2,000 candidates, the ones that ran their check to a verdict (landed, or rejected for a failure
-- of their own: ``own`` names those kinds): the agent's last 50 and the repository's last 300 of them, the last 500
-- that touch any of ``paths``, and the last 300 that came right after a failure of their own subtask (how often a
-- fix fails here); and the subtask's earlier pushes (but those superseded or rejected for a conflict: they say
-- nothing of its check, and counted they sent an agent redoing a conflict behind fresher pushes, to lose the
-- next conflict too) with whether the newest of them failed its check. The agent's
-- record and the paths' leave out this subtask's own candidates: its last failure is the after-failure fact, and
-- counted again there it would make every fix look like the riskiest push of all.
WITH recent AS (
    SELECT c.id, c.owner_id, c.subtask_id, c.paths, c.status,
           c.status = 'rejected' AND c.verdict->>'kind' = ANY(%(own)s::text[]) AS failed,
           c.status = 'landed' OR c.verdict->>'kind' = ANY(%(own)s::text[]) AS judged,
           coalesce(lag(c.status = 'rejected' AND c.verdict->>'kind' = ANY(%(own)s::text[]))
                    OVER (PARTITION BY c.subtask_id ORDER BY c.id), false) AS after
    FROM (SELECT * FROM candidates WHERE repo = %(repo)s ORDER BY id DESC LIMIT 2000) c
), judged AS (
    SELECT * FROM recent WHERE judged AND status IN ('landed', 'rejected')
), agent AS (
    SELECT failed FROM judged WHERE owner_id = %(owner_id)s AND subtask_id <> %(subtask_id)s ORDER BY id DESC LIMIT 50
), repo AS (
    SELECT failed FROM judged ORDER BY id DESC LIMIT 300
), near AS (
    SELECT failed, paths FROM judged WHERE subtask_id <> %(subtask_id)s ORDER BY id DESC LIMIT 500
), fixes AS (
    SELECT failed FROM judged WHERE after ORDER BY id DESC LIMIT 300
), pushes AS (
    SELECT c.status, c.verdict->>'kind' AS kind FROM candidates c WHERE c.subtask_id = %(subtask_id)s
    ORDER BY c.id DESC
)
SELECT (SELECT count(*) FROM agent) AS agent_finished,
       (SELECT count(*) FILTER (WHERE failed) FROM agent) AS agent_failed,
       (SELECT count(*) FROM repo) AS repo_finished,
       (SELECT count(*) FILTER (WHERE failed) FROM repo) AS repo_failed,
       (SELECT count(*) FROM pushes WHERE status <> 'superseded' AND kind IS DISTINCT FROM 'conflict') + 1
           AS attempt,
       coalesce((SELECT p.status = 'rejected' AND p.kind = ANY(%(own)s::text[]) FROM pushes p LIMIT 1), false)
           AS after_failure,
       (SELECT count(*) FROM near WHERE near.paths && %(paths)s::text[]) AS path_finished,
       (SELECT count(*) FILTER (WHERE failed) FROM near WHERE near.paths && %(paths)s::text[]) AS path_failed,
       (SELECT count(*) FROM fixes) AS fix_finished,
       (SELECT count(*) FILTER (WHERE failed) FROM fixes) AS fix_failed;

-- name: jobs_remote_workers
-- The verifier workers on other machines (``mergebot verifier worker --server``: a token of their own) that ran a
-- check lately or run one now: the queue's window counts them as slots of its own.
SELECT count(DISTINCT worker_name) AS n FROM verify_jobs
WHERE worker_id IS NOT NULL AND (status = 'running' OR finished_at > now() - make_interval(secs => %(seconds)s));
