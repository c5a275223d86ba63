-- One prediction of how long a check of a repository runs (issue 45), for admission control's backlog
-- (``admission_measure``) and the fair order's charge (``candidate_next``) alike; ``mergebot.landing.window.fair``'s
-- ``predicted_seconds`` is the same rule in Python. The runs are the repository's newest 20 candidate runs (by id,
-- the order they were queued) that finished ``done`` (a cancelled run says nothing of the check's length). A run
-- counts its verifier-seconds: a single run its own time; a run of named checks (a group, whose parent never starts)
-- the sum of its children's that ran, since each of them held a verifier that long, side by side or not. The
-- prediction is the median of those runs, or 60 seconds with none (admission never uses that default: a lane with
-- no finished run is stale and admits). With it: how many runs it was made of, when the first of their work started
-- (the candidates that left the queue since are what those runs cleared) and when the newest finished. One
-- SELECT in a STABLE SQL function returning a table: the planner inlines it into the statement that reads it, so
-- ``candidate_next`` on the landing's hot path makes no call of its own.
CREATE FUNCTION predicted_run(for_repo text)
    RETURNS TABLE (seconds float8, runs integer, since timestamptz, last_finished timestamptz)
    LANGUAGE sql STABLE AS $$
    SELECT coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY r.secs), 60.0)::float8, count(*)::integer,
           min(r.started), max(r.finished)
    FROM (
        SELECT j.finished_at AS finished,
               CASE WHEN j.is_group THEN k.secs
                    ELSE extract(epoch FROM j.finished_at - j.started_at)::float8 END AS secs,
               CASE WHEN j.is_group THEN k.started ELSE j.started_at END AS started
        FROM (SELECT v.id, v.is_group, v.started_at, v.finished_at FROM verify_jobs v
              WHERE v.repo = for_repo AND v.purpose = 'candidate' AND v.parent_id IS NULL AND v.finished_at IS NOT NULL
                AND v.status = 'done' AND (v.is_group OR v.started_at IS NOT NULL)
              ORDER BY v.id DESC LIMIT 20) j
        LEFT JOIN LATERAL (
            SELECT sum(extract(epoch FROM c.finished_at - c.started_at))::float8 AS secs, min(c.started_at) AS started
            FROM verify_jobs c
            WHERE j.is_group AND c.parent_id = j.id AND c.started_at IS NOT NULL AND c.finished_at IS NOT NULL
        ) k ON true
    ) r
    WHERE r.secs IS NOT NULL
$$;
-- Its runs, newest first, are read by the index 0038 made for the fair order's own median (verify_jobs_candidate_runs).
-- The one 0037 made for admission's (by finish time, without the groups' parents) serves nothing now: the
-- verifiers' capacity reads the runs of the last minutes by when they finished, across every repository
-- (verify_jobs_finished), and a lane's last run is its prediction's newest.
DROP INDEX verify_jobs_repo_finished;
