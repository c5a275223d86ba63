-- What the Database itself asks of the server (mergebot/db/database.py): the commits waiting for a
-- synchronous standby, for /healthz.
-- Named queries under "-- name: NAME" headers, loaded with every file of this folder (mergebot.db.queries).

-- name: commits_waiting
-- This database's sessions (those this role may see) whose commit waits for a synchronous standby, and how long
-- the oldest has run: a standby that is gone holds every commit until it is back or synchronous_standby_names is
-- cleared, while reads like this one still answer.
SELECT count(*) AS n, coalesce(extract(epoch FROM max(now() - query_start)), 0)::float8 AS longest_s
FROM pg_stat_activity WHERE datname = current_database() AND wait_event = 'SyncRep';
