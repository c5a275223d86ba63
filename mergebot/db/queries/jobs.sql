-- Verify jobs (mergebot/db/jobs.py): claimed by workers, fenced by claim_version like subtasks.
-- Named queries under "-- name: NAME" headers, loaded with every file of this folder (mergebot.db.queries).

-- name: job_insert
-- A job; a group's parent (``is_group``: no worker claims it) or one of its children (``parent_id``, the check's
-- name, whether it must pass) for named checks.
INSERT INTO verify_jobs (repo, commit_sha, command, timeout_s, purpose, candidate_id, landed_id, cache,
                         window_width, sandbox, is_group, parent_id, check_name, required, covers)
VALUES (%(repo)s, %(commit_sha)s, %(command)s, %(timeout_s)s, %(purpose)s, %(candidate_id)s, %(landed_id)s,
        %(cache)s, %(window_width)s, %(sandbox)s, %(is_group)s, %(parent_id)s, %(check_name)s, %(required)s,
        %(covers)s)
RETURNING *;

-- name: job_insert_kept
-- A group's child that keeps another run's result (a retry re-runs only the checks that failed): done at once with
-- that job's outcome, result and tree, never started (no worker, no start: the charts and the cost count no run).
INSERT INTO verify_jobs (repo, commit_sha, command, timeout_s, purpose, candidate_id, landed_id, cache,
                         window_width, sandbox, is_group, parent_id, check_name, required, covers,
                         status, outcome, result, tree_sha, finished_at)
SELECT %(repo)s, %(commit_sha)s, %(command)s, %(timeout_s)s, %(purpose)s, %(candidate_id)s, %(landed_id)s,
       %(cache)s, %(window_width)s, %(sandbox)s, %(is_group)s, %(parent_id)s, %(check_name)s, %(required)s,
       %(covers)s, 'done', k.outcome, k.result, k.tree_sha, now()
FROM verify_jobs k WHERE k.id = %(kept)s AND k.status = 'done' AND k.result IS NOT NULL
RETURNING *;

-- name: job_claim
-- Candidate runs first: they move main. Then the runs that judge a candidate that failed (its retry, main's
-- base check), which only decide that candidate's verdict; while a speculation window refills they would take
-- a worker from it. Then the checks of what already landed (post-land, manual reruns). Oldest first within each.
WITH pick AS (
    SELECT id FROM verify_jobs WHERE status = 'queued' AND NOT is_group
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
                          WHERE n.candidate_id = e.candidate_id AND n.purpose = e.purpose AND n.parent_id IS NULL
                            AND n.id > coalesce(e.parent_id, e.id)))
           AS obsolete
    FROM verify_jobs e
    WHERE e.status = 'running' AND e.lease_expires_at < now() - make_interval(secs => %(grace_seconds)s)
    ORDER BY e.id LIMIT 1000 FOR UPDATE OF e SKIP LOCKED
) expired
WHERE j.id = expired.id
RETURNING j.id, j.status, j.claim_version, j.parent_id;

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
  AND purpose NOT IN ('held_out', 'acceptance', 'old_tests', 'reverify')
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
-- Every job of the candidate: a group's parent and its children alike.
UPDATE verify_jobs SET status = 'cancelled', finished_at = now(), lease_expires_at = NULL
WHERE candidate_id = %(candidate_id)s AND status IN ('queued', 'running')
RETURNING id;

-- name: job_cancel_older_post_land
-- Main moved on before these post-land checks started: the newest head's check (or the run that landed it)
-- covers main now. Landed rows of one repository are numbered in the order main moved.
UPDATE verify_jobs SET status = 'cancelled', finished_at = now(), lease_expires_at = NULL
WHERE repo = %(repo)s AND purpose = 'post_land' AND status = 'queued' AND landed_id < %(newer_landed)s
  AND parent_id IS NULL
  AND NOT EXISTS (SELECT 1 FROM verify_jobs c WHERE c.parent_id = verify_jobs.id AND c.status <> 'queued')
RETURNING id;

-- name: job_list
SELECT * FROM verify_jobs
WHERE (%(status)s::job_status IS NULL OR status = %(status)s::job_status)
  AND (%(candidate_id)s::bigint IS NULL OR candidate_id = %(candidate_id)s::bigint)
ORDER BY id DESC LIMIT %(limit)s;

-- name: jobs_remote_workers
-- The verifier workers on other machines (``mergebot verifier worker --server``: a token of their own) that ran a
-- check lately or run one now: the queue's window counts them as slots of its own.
SELECT count(DISTINCT worker_name) AS n FROM verify_jobs
WHERE worker_id IS NOT NULL AND (status = 'running' OR finished_at > now() - make_interval(secs => %(seconds)s));

-- name: job_group_lock
-- A group's parent, locked: its children's finishing writers settle it one at a time.
SELECT id, status::text AS status, commit_sha, command FROM verify_jobs WHERE id = %(id)s AND is_group FOR UPDATE;

-- name: job_groups_unsettled
-- Groups still queued though each of their children has ended: the settle of their last child's writer was cut
-- off (a crash between recovering a child and settling its group). The recovery pass settles them.
SELECT p.id FROM verify_jobs p
WHERE p.is_group AND p.status = 'queued'
  AND EXISTS (SELECT 1 FROM verify_jobs c WHERE c.parent_id = p.id)
  AND NOT EXISTS (SELECT 1 FROM verify_jobs c WHERE c.parent_id = p.id AND c.status IN ('queued', 'running'))
ORDER BY p.id LIMIT 1000;

-- name: job_children
-- A group's children in the declared order of their checks (the order they were queued).
SELECT * FROM verify_jobs WHERE parent_id = %(id)s ORDER BY id;

-- name: job_settle
-- A group's parent finishes with its children's combined result (``verifier.checks.combine``); its tree is the one
-- the result vouches for, as ``job_finish`` records it. It never starts (no worker ran it): the charts, the timeline,
-- the metrics and the cost count its children's runs, each once.
UPDATE verify_jobs
SET status = 'done', outcome = %(outcome)s, result = %(result)s, finished_at = now(),
    tree_sha = CASE WHEN coalesce(nullif(%(result)s::jsonb -> 'own' ->> 'tree_sha', ''), %(result)s::jsonb ->> 'tree_sha')
                         ~ '^[0-9a-f]{40}([0-9a-f]{24})?$'
                    THEN coalesce(nullif(%(result)s::jsonb -> 'own' ->> 'tree_sha', ''), %(result)s::jsonb ->> 'tree_sha')
               END
WHERE id = %(id)s AND is_group AND status = 'queued'
RETURNING id;

-- name: job_cancel_orphans
-- The children of a cancelled group are cancelled with it.
UPDATE verify_jobs c SET status = 'cancelled', finished_at = now(), lease_expires_at = NULL
FROM verify_jobs p
WHERE c.parent_id = p.id AND p.status = 'cancelled' AND c.status IN ('queued', 'running')
RETURNING c.id;

-- name: job_reverify_latest
-- A landed row's newest re-verification run (``mergebot reverify``): the group's parent for named checks.
SELECT * FROM verify_jobs
WHERE landed_id = %(landed_id)s AND purpose = 'reverify' AND parent_id IS NULL
ORDER BY id DESC LIMIT 1;

-- name: job_reverify_held_out
-- The held-out run started with the re-verification run ``after`` of the same landed row (the next one after it).
SELECT * FROM verify_jobs
WHERE landed_id = %(landed_id)s AND purpose = 'held_out' AND id > %(after)s
ORDER BY id LIMIT 1;

-- name: job_reverify_unsigned
-- Re-verification runs over whose statement was never made (the server stopped while they ran), oldest first.
SELECT * FROM verify_jobs j
WHERE j.purpose = 'reverify' AND j.parent_id IS NULL AND j.status IN ('done', 'cancelled') AND j.landed_id IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM attestations a WHERE a.job_id = j.id)
ORDER BY j.id LIMIT 20;

-- name: job_known_flaky
-- The repository's memory of flaky tests: the tests reports of runs that did not pass on a commit where a later
-- run of the same commit passed (a candidate's retry; main's check confirmed once more, purpose bisect, after a
-- post-land failure): a flaky run, newest first. Held-out runs are not among them (their test names are no agent's to see).
SELECT f.result -> 'tests' AS tests
FROM verify_jobs r
JOIN verify_jobs f ON f.repo = r.repo AND f.commit_sha = r.commit_sha AND f.id < r.id AND f.parent_id IS NULL
                  AND f.status = 'done' AND f.outcome <> 'pass' AND f.purpose NOT IN ('held_out', 'reverify')
WHERE r.repo = %(repo)s AND r.purpose IN ('retry', 'bisect') AND r.status = 'done' AND r.outcome = 'pass'
  AND r.parent_id IS NULL
ORDER BY f.id DESC LIMIT %(limit)s;
