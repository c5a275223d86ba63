-- The queue's leadership (mergebot/db/locks.py): an advisory lock on a dedicated connection.
-- Named queries under "-- name: NAME" headers, loaded with every file of this folder (mergebot.db.queries).

-- name: queue_lock_try
-- Leadership of one repository's merge queue (mergebot.landing.window.leader): a session-level advisory lock in its
-- own class (7243502; migrations use 7243500), held on a dedicated connection for as long as it lives.
SELECT pg_try_advisory_lock(7243502, hashtext(%(repo)s)) AS locked;

-- name: queue_locks_held
-- How many queue locks this session still holds. Run on the lock's own connection: one the server ended (a pooler's
-- or an idle timeout, pg_terminate_backend, a broken network) is found only by a query on it failing.
SELECT count(*) AS held FROM pg_locks
WHERE pid = pg_backend_pid() AND locktype = 'advisory' AND classid = 7243502 AND granted;
