-- Waiting by commit (issue 45): a wait keyed on (subtask, head commit) may begin before that commit's candidate
-- exists (a forge's push arrives by webhook), so every candidate announces its creation and each change of status
-- on mergebot_push under its subtask's id (payload "subtask:candidate:status"): the wait wakes on its subtask,
-- not on a candidate id it cannot know yet.
CREATE FUNCTION candidates_notify_push() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('mergebot_push', NEW.subtask_id::text || ':' || NEW.id::text || ':' || NEW.status::text);
    RETURN NULL;
END $$;

CREATE TRIGGER candidates_notify_push AFTER INSERT OR UPDATE OF status ON candidates
    FOR EACH ROW EXECUTE FUNCTION candidates_notify_push();
