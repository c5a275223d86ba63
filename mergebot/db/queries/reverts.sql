-- A red main's mending (mergebot/db/reverts.py): suspects, the bot's reverts, held dependents.
-- Named queries under "-- name: NAME" headers, loaded with every file of this folder (mergebot.db.queries).

-- name: dependents_hold
-- A reverted subtask's dependents that have not landed: their waiting candidates wait for it to land again
-- (``candidate_next`` holds them) and say so, and each dependent gets the bot's note saying why (its owner reads
-- it with its notes). Their subtask ids.
WITH deps AS (
    SELECT s.id, s.claim_version FROM subtask_deps d JOIN subtasks s ON s.id = d.subtask_id
    WHERE d.depends_on_id = %(id)s AND s.status <> 'landed'
), held AS (
    UPDATE candidates c SET reason = %(reason)s
    WHERE c.subtask_id IN (SELECT id FROM deps) AND c.status IN ('queued', 'parked', 'awaiting_approval')
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

-- name: repo_mend_given_up
UPDATE repos SET mend_given_up = %(sha)s WHERE name = %(name)s;
