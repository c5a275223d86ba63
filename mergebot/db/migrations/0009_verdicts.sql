-- Typed verdicts and waiting for work (issue 17).
-- A candidate's verdict as a record: its kind (conflict, check_failed, ...) and facts (paths, conflict hunks,
-- failing tests), written with its status; the API adds what depends on the subtask now (final, next, branch).
ALTER TABLE candidates ADD COLUMN verdict jsonb;

-- The commit status a forge shows names the verdict's kind, so an agent reading it knows what to do.
CREATE OR REPLACE FUNCTION candidates_forge_status() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    st text;
    msg text;
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

-- Work became ready: a claim waiting for work (POST /api/v1/subtasks/claim with wait) is told at once.
CREATE FUNCTION subtasks_notify_ready() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('mergebot_ready', NEW.id::text);
    RETURN NULL;
END $$;

CREATE TRIGGER subtasks_ready_inserted AFTER INSERT ON subtasks
    FOR EACH ROW WHEN (NEW.status = 'ready') EXECUTE FUNCTION subtasks_notify_ready();
CREATE TRIGGER subtasks_ready_updated AFTER UPDATE OF status ON subtasks
    FOR EACH ROW WHEN (NEW.status = 'ready' AND OLD.status IS DISTINCT FROM 'ready')
    EXECUTE FUNCTION subtasks_notify_ready();
