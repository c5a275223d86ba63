-- Check runs on GitHub (issue 33): for a repository that authenticates as a GitHub App, every candidate gets a check
-- run on its head commit (the pull request's), kept as the candidate moves. The outbox holds one row per
-- candidate: each change of the candidate bumps ``version``, and the sender sends the newest state when
-- ``sent_version`` is behind, so changes made between two sends go out as one update (coalesced).
CREATE TABLE forge_check_runs (
    candidate_id  bigint PRIMARY KEY REFERENCES candidates (id),
    repo          text NOT NULL REFERENCES repos (name),
    head_sha      text NOT NULL CHECK (head_sha ~ '^[0-9a-f]{40}([0-9a-f]{24})?$'),
    check_run_id  bigint,
    version       integer NOT NULL DEFAULT 1,
    sent_version  integer NOT NULL DEFAULT 0,
    next_at       timestamptz NOT NULL DEFAULT now(),
    attempts      integer NOT NULL DEFAULT 0,
    last_error    text,
    given_up_at   timestamptz,
    updated_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX forge_check_runs_due ON forge_check_runs (next_at) WHERE sent_version < version AND given_up_at IS NULL;

CREATE FUNCTION candidates_check_run() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.status IS NOT DISTINCT FROM OLD.status THEN
        RETURN NULL;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM repos r WHERE r.name = NEW.repo AND r.forge = 'github'
                                            AND r.github_app_id IS NOT NULL) THEN
        RETURN NULL;
    END IF;
    INSERT INTO forge_check_runs (candidate_id, repo, head_sha) VALUES (NEW.id, NEW.repo, NEW.sha)
    ON CONFLICT (candidate_id) DO UPDATE
        SET version = forge_check_runs.version + 1, next_at = now(), given_up_at = NULL, attempts = 0,
            updated_at = now();
    PERFORM pg_notify('mergebot_forge', NEW.repo);
    RETURN NULL;
END $$;

CREATE TRIGGER candidates_check_run AFTER INSERT OR UPDATE OF status ON candidates
    FOR EACH ROW EXECUTE FUNCTION candidates_check_run();
