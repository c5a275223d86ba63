-- What every store shares (mergebot/db/base.py): the event log's append.
-- Named queries under "-- name: NAME" headers, loaded with every file of this folder (mergebot.db.queries).

-- name: event_insert
INSERT INTO events (actor_id, kind, subtask_id, claim_version, detail)
VALUES (%(actor_id)s, %(kind)s, %(subtask_id)s, %(claim_version)s, %(detail)s);
