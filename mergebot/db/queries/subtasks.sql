-- Subtasks (mergebot/db/subtasks.py): creation, claims, fenced owner writes, notes, announcements, events.
-- Owner writes are fenced: they match id, owner, claim_version and status, and zero rows changed means
-- the claim is gone.
-- Named queries under "-- name: NAME" headers, loaded with every file of this folder (mergebot.db.queries).

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

-- name: subtask_allow
-- A lead's or admin's permission on a subtask (NULL leaves it as it is).
UPDATE subtasks SET allow_test_removal = coalesce(%(test_removal)s, allow_test_removal),
    allow_check_changes = coalesce(%(check_changes)s, allow_check_changes),
    allow_behaviour_change = coalesce(%(behaviour_change)s, allow_behaviour_change), updated_by = %(actor_id)s
WHERE id = %(id)s
RETURNING *;

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

-- name: subtasks_judging
-- What judging a run of these subtasks' candidates reads of them, in one round trip (``judge.step.prepare``, once
-- per run the window starts, for every member of its prefix): what a lead allowed each to change, and the paths of
-- its acceptance tests.
SELECT s.id, s.allow_behaviour_change, s.allow_test_removal, s.allow_check_changes,
       coalesce((SELECT array_agg(a.path ORDER BY a.path) FROM acceptance_tests a WHERE a.subtask_id = s.id),
                '{}') AS acceptance
FROM subtasks s WHERE s.id = ANY(%(ids)s::bigint[]);

-- name: acceptance_probe_set
UPDATE subtasks SET acceptance_probe = %(job_id)s, updated_by = %(actor_id)s WHERE id = %(subtask_id)s
RETURNING id;

-- name: subtask_lock
-- The subtask's row, locked for the lead's move that follows in the same transaction (``SubtaskStore.cancel``). A
-- landing's intent is written with its members' subtasks locked FOR SHARE (``subtasks_lock_members``), so the move
-- comes before the intent (whose fence then refuses the candidate) or after it, its next statement seeing the
-- candidate ``landing`` (READ COMMITTED: a new snapshot per statement, never one older than the lock).
SELECT id FROM subtasks WHERE id = %(id)s FOR UPDATE;

-- name: subtask_cancel
-- Never while a candidate of it is being landed: main is about to move to it, and a cancelled subtask would leave
-- main with a commit no landed row names (the protocol model's cancel finding, docs/protocol.md). Run after
-- ``subtask_lock``.
UPDATE subtasks s
SET status = 'cancelled', previous_owner_id = coalesce(owner_id, previous_owner_id), owner_id = NULL,
    lease_expires_at = NULL, status_reason = %(reason)s, updated_by = %(actor_id)s
WHERE s.id = %(id)s AND s.status NOT IN ('landed', 'cancelled')
  AND NOT EXISTS (SELECT 1 FROM candidates c WHERE c.subtask_id = s.id AND c.status = 'landing')
RETURNING *;

-- name: candidate_landing_of
-- The subtask's candidate being landed (its intent written), if any.
SELECT id FROM candidates WHERE subtask_id = %(subtask_id)s AND status = 'landing' ORDER BY id DESC LIMIT 1;

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
-- The board (no subtask named) leaves out the keepers' notes, as page_notes does; a subtask's notes keep them.
SELECT n.id, n.subtask_id, n.group_name, a.name AS author, n.claim_version, n.body, n.created_at
FROM notes n JOIN agents a ON a.id = n.author_id
WHERE (%(subtask_id)s::bigint IS NULL OR n.subtask_id = %(subtask_id)s::bigint)
  AND (%(subtask_id)s::bigint IS NOT NULL OR NOT starts_with(n.body, '[keeper] '))
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
