-- Check runs on GitHub (issue 33): for a repository that authenticates as a GitHub App, every candidate gets a check
-- run on its head commit (the pull request's), kept as the candidate moves. The outbox holds one row per
-- candidate: each change of the candidate bumps ``version``, and the sender sends the newest state when
-- ``sent_version`` is behind, so changes made between two sends go out as one update (coalesced).
CREATE TABLE forge_check_runs (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind          text NOT NULL DEFAULT 'candidate' CHECK (kind IN ('candidate', 'main')),
    candidate_id  bigint UNIQUE REFERENCES candidates (id),
    repo          text NOT NULL REFERENCES repos (name),
    head_sha      text NOT NULL CHECK (head_sha ~ '^[0-9a-f]{40}([0-9a-f]{24})?$'),
    check_run_id  bigint,
    version       integer NOT NULL DEFAULT 1,
    sent_version  integer NOT NULL DEFAULT 0,
    next_at       timestamptz NOT NULL DEFAULT now(),
    attempts      integer NOT NULL DEFAULT 0,
    last_error    text,
    given_up_at   timestamptz,
    updated_at    timestamptz NOT NULL DEFAULT now(),
    CHECK ((kind = 'candidate') = (candidate_id IS NOT NULL))
);
CREATE UNIQUE INDEX forge_check_runs_main ON forge_check_runs (repo, head_sha) WHERE kind = 'main';
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

-- main's new commit after a landing gets a check run of its own, kept as main's check on it goes (main_status).
CREATE FUNCTION landed_check_run() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.main_status IS NOT DISTINCT FROM OLD.main_status THEN
        RETURN NULL;
    END IF;
    IF NEW.main_sha IS NULL OR NOT EXISTS (SELECT 1 FROM repos r WHERE r.name = NEW.repo AND r.forge = 'github'
                                                                   AND r.github_app_id IS NOT NULL) THEN
        RETURN NULL;
    END IF;
    INSERT INTO forge_check_runs (kind, repo, head_sha) VALUES ('main', NEW.repo, NEW.main_sha)
    ON CONFLICT (repo, head_sha) WHERE kind = 'main' DO UPDATE
        SET version = forge_check_runs.version + 1, next_at = now(), given_up_at = NULL, attempts = 0,
            updated_at = now();
    PERFORM pg_notify('mergebot_forge', NEW.repo);
    RETURN NULL;
END $$;

CREATE TRIGGER landed_check_run AFTER INSERT OR UPDATE OF main_status ON landed
    FOR EACH ROW EXECUTE FUNCTION landed_check_run();
