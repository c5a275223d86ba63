-- 0004: a cheaper claim path, measured with bench/claims.py.
--
-- Fenced owner writes (match id, owner, claim version, status) were planned on subtasks_owner (owner_id):
-- with statistics from when nothing was owned, the planner scanned every row the agent owned. Covering
-- (owner_id, id) makes that lookup one index probe whichever index the planner picks; the lease index becomes
-- partial on the lease itself, which recovery's "lease_expires_at < x" implies.
DROP INDEX subtasks_owner;
CREATE INDEX subtasks_owner ON subtasks (owner_id, id) WHERE owner_id IS NOT NULL;
DROP INDEX subtasks_lease;
CREATE INDEX subtasks_lease ON subtasks (lease_expires_at) WHERE lease_expires_at IS NOT NULL;

-- Every status change writes a new row version into every index whose key is not NULL-free by predicate:
-- the parent and idempotency-key indexes now hold only the rows that have one, and the events table keeps
-- only the indexes something reads.
DROP INDEX subtasks_parent;
CREATE INDEX subtasks_parent ON subtasks (parent_id) WHERE parent_id IS NOT NULL;
ALTER TABLE subtasks DROP CONSTRAINT subtasks_idempotency_key_key;
CREATE UNIQUE INDEX subtasks_idempotency_key ON subtasks (idempotency_key) WHERE idempotency_key IS NOT NULL;
DROP INDEX events_kind;

-- One trigger call per update instead of two: the transition check, the timestamps, the event row and the
-- notification happen in a single BEFORE UPDATE trigger (the row exists, so its event can reference it).
-- Creation keeps an AFTER INSERT trigger: an event must not reference a row that is not there yet.
DROP TRIGGER subtasks_guard ON subtasks;
DROP TRIGGER subtasks_log ON subtasks;
DROP FUNCTION subtasks_guard();
DROP FUNCTION subtasks_log();

CREATE FUNCTION subtasks_on_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status IS DISTINCT FROM OLD.status THEN
        IF NOT EXISTS (
            SELECT 1 FROM subtask_transitions t WHERE t.from_status = OLD.status AND t.to_status = NEW.status
        ) THEN
            RAISE EXCEPTION 'subtask % cannot go from % to %', OLD.id, OLD.status, NEW.status
                USING ERRCODE = 'MB001';
        END IF;
        IF NEW.status IN ('landed', 'failed', 'cancelled') THEN
            NEW.finished_at := now();
            PERFORM pg_notify('mergebot_finished', NEW.id::text || ':' || NEW.status::text);
        END IF;
    END IF;
    NEW.updated_at := now();
    IF NEW.status IS DISTINCT FROM OLD.status
       OR NEW.claim_version IS DISTINCT FROM OLD.claim_version
       OR NEW.owner_id IS DISTINCT FROM OLD.owner_id
       OR NEW.candidate_sha IS DISTINCT FROM OLD.candidate_sha THEN
        INSERT INTO events (actor_id, kind, subtask_id, from_status, to_status, claim_version, detail)
        VALUES (NEW.updated_by, 'status', NEW.id, OLD.status, NEW.status, NEW.claim_version,
                jsonb_strip_nulls(jsonb_build_object(
                    'owner', NEW.owner_id, 'previous_owner', OLD.owner_id,
                    'reason', NEW.status_reason, 'sha', NEW.candidate_sha)));
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER subtasks_on_update BEFORE UPDATE ON subtasks
    FOR EACH ROW EXECUTE FUNCTION subtasks_on_update();

CREATE FUNCTION subtasks_on_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO events (actor_id, kind, subtask_id, to_status, claim_version)
    VALUES (NEW.created_by, 'created', NEW.id, NEW.status, NEW.claim_version);
    RETURN NULL;
END $$;

CREATE TRIGGER subtasks_on_insert AFTER INSERT ON subtasks
    FOR EACH ROW EXECUTE FUNCTION subtasks_on_insert();

-- An operator may cancel a failed subtask (a poison pill nobody will retry).
INSERT INTO subtask_transitions (from_status, to_status) VALUES ('failed', 'cancelled');
