-- Re-verification of a landed record (issue 44, `mergebot reverify LANDED`): the landed run's exact check run again
-- on the same commit, as a verify job of its own purpose (it never writes a cache generation, and is never main's
-- baseline), and its signed statement kept with the landing's, naming the job it compared (one statement a job).
ALTER TABLE verify_jobs DROP CONSTRAINT verify_jobs_purpose_check;
ALTER TABLE verify_jobs ADD CONSTRAINT verify_jobs_purpose_check
    CHECK (purpose IN ('candidate', 'retry', 'base', 'post_land', 'manual', 'bisect', 'baseline', 'acceptance',
                       'held_out', 'old_tests', 'reverify'));
CREATE INDEX verify_jobs_landed ON verify_jobs (landed_id, id) WHERE landed_id IS NOT NULL;
CREATE INDEX verify_jobs_reverify ON verify_jobs (id) WHERE purpose = 'reverify' AND parent_id IS NULL;

ALTER TABLE attestations ADD COLUMN job_id bigint REFERENCES verify_jobs (id);
CREATE UNIQUE INDEX attestations_reverify_job ON attestations (job_id) WHERE job_id IS NOT NULL;
