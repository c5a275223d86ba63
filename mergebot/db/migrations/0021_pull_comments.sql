-- One living comment per pull request (issue 33): the pull requests the bot has heard of (by their webhook events),
-- each with the id of its one comment once posted. Every change of a candidate on the pull request's head branch
-- bumps ``version``; the sender edits the comment to the newest state when ``sent_version`` is behind (changes
-- between two sends go out as one edit), and not at all when the text would not change (``sent_digest``).
-- ``answer`` is the comment's answer to the last command given on the pull request (``@mergebot why`` also sets
-- ``full_verdict``: the comment then shows the whole verdict, its log's tail and test comparison included).
CREATE TABLE forge_pulls (
    repo          text NOT NULL REFERENCES repos (name),
    number        integer NOT NULL CHECK (number > 0),
    head_ref      text NOT NULL CHECK (head_ref ~ '^refs/heads/'),
    comment_id    bigint,
    version       integer NOT NULL DEFAULT 1,
    sent_version  integer NOT NULL DEFAULT 0,
    sent_digest   text,
    answer        text CHECK (length(answer) <= 2000),
    full_verdict  boolean NOT NULL DEFAULT false,
    next_at       timestamptz NOT NULL DEFAULT now(),
    attempts      integer NOT NULL DEFAULT 0,
    last_error    text,
    given_up_at   timestamptz,
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (repo, number)
);
CREATE INDEX forge_pulls_ref ON forge_pulls (repo, head_ref);
CREATE INDEX forge_pulls_due ON forge_pulls (next_at) WHERE sent_version < version AND given_up_at IS NULL;

CREATE FUNCTION candidates_pull_comment() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.status IS NOT DISTINCT FROM OLD.status THEN
        RETURN NULL;
    END IF;
    UPDATE forge_pulls SET version = version + 1, next_at = now(), given_up_at = NULL, attempts = 0, updated_at = now()
    WHERE repo = NEW.repo AND head_ref = NEW.ref;
    IF FOUND THEN
        PERFORM pg_notify('mergebot_forge', NEW.repo);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER candidates_pull_comment AFTER INSERT OR UPDATE OF status ON candidates
    FOR EACH ROW EXECUTE FUNCTION candidates_pull_comment();
