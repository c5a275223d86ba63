-- Named checks (issue 43): a repository's checks, each {name, command, required, timeout_s}, run in parallel on
-- one merged commit ('[]': the verifier command is the check). A run of them is a group job: a parent no worker
-- claims, and one child job per check; the parent finishes with their combined result when every child has ended.
ALTER TABLE repos ADD COLUMN checks jsonb NOT NULL DEFAULT '[]'
    CHECK (jsonb_typeof(checks) = 'array' AND jsonb_array_length(checks) <= 10);
ALTER TABLE verify_jobs ADD COLUMN is_group boolean NOT NULL DEFAULT false;
ALTER TABLE verify_jobs ADD COLUMN parent_id bigint REFERENCES verify_jobs (id);
ALTER TABLE verify_jobs ADD COLUMN check_name text CHECK (check_name ~ '^[a-z0-9][a-z0-9_.-]{0,39}$');
ALTER TABLE verify_jobs ADD COLUMN required boolean;
ALTER TABLE verify_jobs ADD CONSTRAINT check_of_group CHECK ((parent_id IS NULL) = (check_name IS NULL)
                                                             AND (parent_id IS NULL) = (required IS NULL)
                                                             AND NOT (is_group AND parent_id IS NOT NULL));
CREATE INDEX verify_jobs_parent ON verify_jobs (parent_id) WHERE parent_id IS NOT NULL;
-- A GitHub App's repository gets one check run per named check beside the candidate's own (``mergebot / NAME``),
-- once its checks have run: their ids by check name.
ALTER TABLE forge_check_runs ADD COLUMN named_runs jsonb NOT NULL DEFAULT '{}';
-- A named check's run is charged as its group's (the landed row names the group as its run), and says its check.
CREATE OR REPLACE VIEW run_charges AS
SELECT j.id AS run_id, j.repo, j.purpose, j.status::text AS status, j.finished_at,
       greatest(0, extract(epoch FROM j.finished_at - j.started_at))::float8 AS seconds,
       c.owner_id AS pusher_id, coalesce(ml.id, rl.id, sl.id) AS landed_id,
       CASE WHEN ml.id IS NOT NULL THEN 'main_check' WHEN rl.id IS NOT NULL THEN 'landing_run'
            WHEN sl.id IS NOT NULL THEN 'rework' WHEN c.id IS NOT NULL THEN 'thrown_away'
            ELSE 'other' END AS charge,
       j.check_name
FROM verify_jobs j
LEFT JOIN landed ml ON ml.id = j.landed_id
LEFT JOIN candidates c ON c.id = j.candidate_id
-- a named check's run is its group's: the landed row names the group (0031)
LEFT JOIN landed rl ON j.landed_id IS NULL AND rl.run_id = coalesce(j.parent_id, j.id)
LEFT JOIN LATERAL (
    SELECT l.id FROM landed l
    WHERE c.id IS NOT NULL AND l.subtask_id = c.subtask_id AND l.kind = 'land'
      AND NOT EXISTS (SELECT 1 FROM landed rv WHERE rv.reverts = l.id)
    ORDER BY l.id DESC LIMIT 1
) sl ON j.landed_id IS NULL AND rl.id IS NULL
WHERE j.started_at IS NOT NULL AND j.finished_at IS NOT NULL;
