-- A notification whenever a candidate changes status, so an agent waiting on its push's verdict can be
-- answered by one long-poll request (GET /api/v1/candidates/{id}?wait=S) instead of polling the queue.
CREATE FUNCTION candidates_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('mergebot_candidate', NEW.id::text || ':' || NEW.status::text);
    RETURN NULL;
END $$;

CREATE TRIGGER candidates_notify AFTER UPDATE OF status ON candidates
    FOR EACH ROW WHEN (NEW.status IS DISTINCT FROM OLD.status) EXECUTE FUNCTION candidates_notify();
