-- The queue's leadership (mergebot/db/locks.py): an advisory lock on a dedicated connection.
-- Named queries under "-- name: NAME" headers, loaded with every file of this folder (mergebot.db.queries).

-- name: queue_lock_try
-- Leadership of one repository's merge queue (mergebot.landing.window.leader): a session-level advisory lock in its
-- own class (7243502; migrations use 7243500), held on a dedicated connection for as long as it lives.
SELECT pg_try_advisory_lock(7243502, hashtext(%(repo)s)) AS locked;
