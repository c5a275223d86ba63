-- 0003: verify jobs, claimed by verifier workers on any machine with the same SKIP LOCKED + lease + fencing
-- pattern as subtasks; parked candidates (their check fails on main too, so main is red, not them).
--
-- A job is (repository, exact commit, command, time limit) and a purpose: the candidate's merged commit, a
-- retry of it, its base (is the failure pre-existing?), the post-land check of main's new head, or a manual
-- run. A worker's claim bumps claim_version; its heartbeats and its result must name that version, so a
-- worker that lost its lease cannot report, and each job finishes at most once.

ALTER TYPE candidate_status ADD VALUE 'parked';

CREATE TYPE job_status AS ENUM ('queued', 'running', 'done', 'cancelled');

CREATE TABLE verify_jobs (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    repo             text NOT NULL REFERENCES repos (name),
    commit_sha       text NOT NULL CHECK (commit_sha ~ '^[0-9a-f]{40}([0-9a-f]{24})?$'),
    command          text NOT NULL,
    timeout_s        integer NOT NULL CHECK (timeout_s > 0),
    purpose          text NOT NULL CHECK (purpose IN ('candidate', 'retry', 'base', 'post_land', 'manual')),
    candidate_id     bigint REFERENCES candidates (id),
    landed_id        bigint REFERENCES landed (id),
    status           job_status NOT NULL DEFAULT 'queued',
    worker_id        bigint REFERENCES agents (id),
    worker_name      text CHECK (length(worker_name) <= 200),
    claim_version    bigint NOT NULL DEFAULT 0,
    lease_expires_at timestamptz,
    attempts         integer NOT NULL DEFAULT 0,
    max_attempts     integer NOT NULL DEFAULT 3,
    outcome          text,
    result           jsonb,
    created_at       timestamptz NOT NULL DEFAULT now(),
    started_at       timestamptz,
    finished_at      timestamptz,
    CONSTRAINT lease_iff_running CHECK ((status = 'running') = (lease_expires_at IS NOT NULL))
);
CREATE INDEX verify_jobs_queue ON verify_jobs (id) WHERE status = 'queued';
CREATE INDEX verify_jobs_lease ON verify_jobs (lease_expires_at) WHERE status = 'running';
CREATE INDEX verify_jobs_candidate ON verify_jobs (candidate_id);

-- Every finished job is announced, so whoever waits on it wakes at once.
CREATE FUNCTION verify_jobs_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status IN ('done', 'cancelled') AND NEW.status IS DISTINCT FROM OLD.status THEN
        PERFORM pg_notify('mergebot_job', NEW.id::text);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER verify_jobs_notify AFTER UPDATE ON verify_jobs
    FOR EACH ROW EXECUTE FUNCTION verify_jobs_notify();

-- Mergebot itself announces (a red main): such announcements have no author agent.
ALTER TABLE announcements ALTER COLUMN author_id DROP NOT NULL;

-- A red main (its check fails) is not an operator's pause: landing goes on, but only a candidate that passes
-- (a fix) lands; the others are parked until main is green again or an admin resumes.
ALTER TABLE repos ADD COLUMN red_since text;
