-- Approvals (issue 43): a repository may require a person's (a lead's or a reviewer's) approval before a change
-- lands: every change (an empty list) or changes touching some paths (globs). A candidate that passed its checks
-- then waits as awaiting_approval until an approval for its exact commit is recorded; the landed row names who
-- approved.
--
-- The new enum value is only added here: PostgreSQL refuses to use a value in the transaction that added it, and
-- each migration is one transaction (mergebot.db.migrate), so nothing below compares with it outside a plpgsql
-- body (which is read when it runs, not now).
ALTER TYPE candidate_status ADD VALUE 'awaiting_approval';

ALTER TABLE repos ADD COLUMN require_approval text[] CHECK (cardinality(require_approval) <= 100);

ALTER TABLE landed ADD COLUMN approved_by text[];

CREATE TABLE approvals (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    candidate_id  bigint NOT NULL REFERENCES candidates (id),
    subtask_id    bigint NOT NULL REFERENCES subtasks (id),
    sha           text NOT NULL CHECK (sha ~ '^[0-9a-f]{40}([0-9a-f]{24})?$'),
    approver_id   bigint NOT NULL REFERENCES agents (id),
    forge_login   text CHECK (length(forge_login) <= 200),
    via           text NOT NULL CHECK (via IN ('api', 'comment', 'review')),
    created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX approvals_commit ON approvals (subtask_id, sha);
CREATE INDEX approvals_candidate ON approvals (candidate_id);

-- A candidate waiting for an approval is pending on the forge, saying so.
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
        WHEN 'awaiting_approval' THEN st := 'pending';
            msg := '[awaiting_approval] ' || coalesce(NEW.reason, 'passed; waits for an approval');
        ELSE st := 'error'; msg := NEW.status::text || ': ' || coalesce(NEW.reason, '');
    END CASE;
    INSERT INTO forge_statuses (repo, sha, state, description, candidate_id)
    VALUES (NEW.repo, NEW.sha, st, left(msg, 2000), NEW.id);
    PERFORM pg_notify('mergebot_forge', NEW.repo);
    RETURN NULL;
END $$;
