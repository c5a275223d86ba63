-- Forges (mergebot/db/forge.py): login links, webhook deliveries, the status and check-run outboxes, pull
-- requests' comments.
-- Named queries under "-- name: NAME" headers, loaded with every file of this folder (mergebot.db.queries).

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
    named_runs = %(named_runs)s::jsonb || named_runs,
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
WHERE c.subtask_id IN (SELECT id FROM s) AND c.status IN ('queued', 'parked', 'awaiting_approval')
RETURNING c.id;

-- name: candidate_withdraw
-- Its owner takes a waiting candidate out of the queue (one being verified or landing is past that).
UPDATE candidates SET status = 'cancelled', reason = %(reason)s, finished_at = now()
WHERE id = %(id)s AND status IN ('queued', 'parked', 'awaiting_approval')
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
