-- The waiter's channels (mergebot/db/waiter.py): LISTEN statements, on its own connection.
-- Named queries under "-- name: NAME" headers, loaded with every file of this folder (mergebot.db.queries).

-- name: listen_finished
-- The waiter's channels (mergebot.db.waiter): a subtask landed, failed or was cancelled (payload: its id).
LISTEN mergebot_finished;

-- name: listen_candidate
-- A candidate's status changed (payload: "id:status", migration 0007).
LISTEN mergebot_candidate;

-- name: listen_job
-- A verify job finished or was cancelled (payload: its id).
LISTEN mergebot_job;

-- name: listen_ready
-- A subtask became ready (payload: its id, migration 0009): claims waiting for work try again.
LISTEN mergebot_ready;

-- name: listen_push
-- A subtask's candidate was made or changed status (payload: "subtask:candidate:status", migration 0035): a wait
-- keyed on (subtask, head commit) reads again.
LISTEN mergebot_push;
