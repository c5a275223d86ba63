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
