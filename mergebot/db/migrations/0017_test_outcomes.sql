-- A verdict the candidate cannot write for itself (issue 32, the outcome comparison).
-- The tree a verify run was proven to be, from its result: a baseline (the outcomes of main's check) is found by
-- tree, whichever commit or purpose ran it.
ALTER TABLE verify_jobs ADD COLUMN tree_sha text CHECK (tree_sha ~ '^[0-9a-f]{40}([0-9a-f]{24})?$');
CREATE INDEX verify_jobs_tree ON verify_jobs (repo, tree_sha) WHERE tree_sha IS NOT NULL;
-- A run of the check on main for its outcomes alone, when no run there has them (an imported repository, a main
-- a person moved on the forge, a changed command).
ALTER TABLE verify_jobs DROP CONSTRAINT verify_jobs_purpose_check;
ALTER TABLE verify_jobs ADD CONSTRAINT verify_jobs_purpose_check
    CHECK (purpose IN ('candidate', 'retry', 'base', 'post_land', 'manual', 'bisect', 'baseline'));

-- Where a repository's tests report their outcomes: our pytest plugin, or a JUnit file the check leaves.
ALTER TABLE repos ADD COLUMN report text NOT NULL DEFAULT 'pytest'
    CHECK (report = 'pytest' OR report ~ '^junit:[^/].{0,998}$');

-- What a lead or admin allows a subtask, never its owner: to delete tests (a deleted test that passed on main is
-- then removed, not weakened), and to change what configures the check (its config files are otherwise refused).
ALTER TABLE subtasks ADD COLUMN allow_test_removal boolean NOT NULL DEFAULT false;
ALTER TABLE subtasks ADD COLUMN allow_check_changes boolean NOT NULL DEFAULT false;
-- ... and to change behaviour: its edits of existing tests are then expected (--old-tests refuse lets them land).
ALTER TABLE subtasks ADD COLUMN allow_behaviour_change boolean NOT NULL DEFAULT false;
-- What a candidate that edits existing test functions gets: flagged (named on its verdict and landed record),
-- refused (tests_changed), or run: main's version of each edited test file runs against the candidate's code.
ALTER TABLE repos ADD COLUMN old_tests text NOT NULL DEFAULT 'flag' CHECK (old_tests IN ('flag', 'refuse', 'run'));
ALTER TABLE landed ADD COLUMN tests_changed text[];

-- The files that configure a repository's check, as globs (a glob without "/" matches the name in any folder);
-- the pytest sections of setup.cfg and pyproject.toml and the files the check's command names are always added.
ALTER TABLE repos ADD COLUMN check_config text[] NOT NULL
    DEFAULT '{conftest.py,pytest.ini,tox.ini,noxfile.py}' CHECK (cardinality(check_config) <= 100);

-- Acceptance tests a lead attaches to a subtask (FAIL_TO_PASS): written into its merged commit at their paths
-- before the run, over whatever the candidate has there, so the tested tree is the landed tree.
CREATE TABLE acceptance_tests (
    subtask_id  bigint NOT NULL REFERENCES subtasks (id),
    path        text NOT NULL CHECK (length(path) BETWEEN 1 AND 1000 AND path !~ '^/' AND path !~ '(^|/)\.\.?(/|$)'
                                     AND path !~ '(^|/)\.git(/|$)'),
    content     bytea NOT NULL CHECK (octet_length(content) <= 1048576),
    added_by    bigint REFERENCES agents (id),
    added_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (subtask_id, path)
);
-- The run of a subtask's acceptance tests on main when they were attached: if they pass there, they test nothing new.
ALTER TABLE subtasks ADD COLUMN acceptance_probe bigint REFERENCES verify_jobs (id);
ALTER TABLE verify_jobs DROP CONSTRAINT verify_jobs_purpose_check;
ALTER TABLE verify_jobs ADD CONSTRAINT verify_jobs_purpose_check
    CHECK (purpose IN ('candidate', 'retry', 'base', 'post_land', 'manual', 'bisect', 'baseline', 'acceptance'));
-- The acceptance tests a landing carried, by path.
ALTER TABLE landed ADD COLUMN acceptance text[];

-- Held-out checks: a repository's tests that are never in the repository and never shown to an agent. A candidate
-- that passed its check runs them next, as a run of their own (purpose held_out), mounted read-only beside its
-- checkout; agents learn pass or fail and the failing test ids only.
CREATE TABLE held_out_files (
    repo        text NOT NULL REFERENCES repos (name),
    path        text NOT NULL CHECK (length(path) BETWEEN 1 AND 1000 AND path !~ '^/' AND path !~ '(^|/)\.\.?(/|$)'),
    content     bytea NOT NULL CHECK (octet_length(content) <= 1048576),
    PRIMARY KEY (repo, path)
);
ALTER TABLE repos ADD COLUMN held_out_command text NOT NULL
    DEFAULT 'python -m pytest -q -p no:cacheprovider "$VERIFIER_HELD_OUT"'
    CHECK (length(held_out_command) BETWEEN 1 AND 4000);
ALTER TABLE verify_jobs DROP CONSTRAINT verify_jobs_purpose_check;
ALTER TABLE verify_jobs ADD CONSTRAINT verify_jobs_purpose_check
    CHECK (purpose IN ('candidate', 'retry', 'base', 'post_land', 'manual', 'bisect', 'baseline', 'acceptance',
                       'held_out', 'old_tests'));

-- A forge's commit status for a landing names the existing tests its change edits (tests_changed), so a person
-- reading the pull request sees them without opening the landed record.
CREATE OR REPLACE FUNCTION candidates_forge_status() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    st text;
    msg text;
    edited text;
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.status IS NOT DISTINCT FROM OLD.status THEN
        RETURN NULL;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM repos r WHERE r.name = NEW.repo AND r.forge IS NOT NULL) THEN
        RETURN NULL;
    END IF;
    CASE NEW.status
        WHEN 'queued' THEN st := 'pending'; msg := 'queued for landing';
        WHEN 'verifying' THEN st := 'pending'; msg := 'verifying the merged commit';
        WHEN 'landing' THEN st := 'pending'; msg := 'verified; landing';
        WHEN 'landed' THEN st := 'success'; msg := 'landed as ' || left(coalesce(NEW.merged_sha, ''), 12);
            SELECT string_agg(t, ', ') INTO edited
            FROM jsonb_array_elements_text(CASE WHEN jsonb_typeof(NEW.verifier #> '{tests,comparison,changed}') = 'array'
                                                THEN NEW.verifier #> '{tests,comparison,changed}' END) AS t;
            IF edited IS NOT NULL THEN
                msg := msg || '; edits existing tests: ' || edited;
            END IF;
        WHEN 'rejected' THEN st := 'failure';
            msg := '[' || coalesce(NEW.verdict->>'kind', 'rejected') || '] ' || coalesce(NEW.reason, 'rejected');
        WHEN 'parked' THEN st := 'pending';
            msg := '[pre_existing] ' || coalesce(NEW.reason, 'parked: the target branch is red');
        ELSE st := 'error'; msg := NEW.status::text || ': ' || coalesce(NEW.reason, '');
    END CASE;
    INSERT INTO forge_statuses (repo, sha, state, description, candidate_id)
    VALUES (NEW.repo, NEW.sha, st, left(msg, 2000), NEW.id);
    PERFORM pg_notify('mergebot_forge', NEW.repo);
    RETURN NULL;
END $$;
