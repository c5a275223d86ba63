-- 0005: forges. A repository may live on GitHub or Gitea/Forgejo: the bot keeps a local mirror, hears pushes
-- through webhooks, and reports back with commit statuses and by pushing the verified merge to the forge.
--
-- Secrets never enter the database: a forge repository names the environment variables that hold its webhook
-- secret and its API token, and the server reads them when it needs them.
ALTER TABLE repos ADD COLUMN forge text CHECK (forge IN ('github', 'gitea', 'forgejo'));
ALTER TABLE repos ADD COLUMN forge_repo text CHECK (forge_repo ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,99}/[A-Za-z0-9._-]{1,100}$');
ALTER TABLE repos ADD COLUMN forge_api_url text CHECK (forge_api_url ~ '^https?://');
ALTER TABLE repos ADD COLUMN forge_git_url text CHECK (length(forge_git_url) BETWEEN 1 AND 2000);
ALTER TABLE repos ADD COLUMN webhook_secret_env text CHECK (webhook_secret_env ~ '^[A-Z_][A-Z0-9_]{0,99}$');
ALTER TABLE repos ADD COLUMN forge_token_env text CHECK (forge_token_env ~ '^[A-Z_][A-Z0-9_]{0,99}$');
ALTER TABLE repos ADD CONSTRAINT forge_complete CHECK (
    (forge IS NULL) = (forge_repo IS NULL) AND (forge IS NULL) = (forge_api_url IS NULL)
    AND (forge IS NULL) = (forge_git_url IS NULL) AND (forge IS NULL) = (webhook_secret_env IS NULL)
    AND (forge IS NULL) = (forge_token_env IS NULL)
);
CREATE UNIQUE INDEX repos_forge_repo ON repos (forge, lower(forge_repo)) WHERE forge IS NOT NULL;

-- A forge login acts as exactly one Mergebot agent, and only when an admin said so. Logins are stored lower-
-- cased (GitHub and Gitea logins are case-insensitive).
CREATE TABLE forge_links (
    forge       text NOT NULL CHECK (forge IN ('github', 'gitea', 'forgejo')),
    login       text NOT NULL CHECK (login ~ '^[a-z0-9][a-z0-9._-]{0,99}$'),
    agent_id    bigint NOT NULL REFERENCES agents (id),
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (forge, login)
);

-- Every signed webhook delivery, deduplicated by the forge's delivery id. A processed delivery is answered
-- again without effect; a failed one is processed when redelivered; the same id with another body is refused.
CREATE TABLE webhook_deliveries (
    forge        text NOT NULL,
    delivery_id  text NOT NULL CHECK (length(delivery_id) BETWEEN 1 AND 200),
    event        text NOT NULL,
    body_sha256  text NOT NULL CHECK (body_sha256 ~ '^[0-9a-f]{64}$'),
    status       text NOT NULL CHECK (status IN ('processing', 'done', 'failed')),
    http_status  integer,
    outcome      text,
    repo         text,
    attempts     integer NOT NULL DEFAULT 1,
    received_at  timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (forge, delivery_id)
);

-- The outbox of commit statuses for forge repositories, sent (and retried with backoff) by the server. Every
-- change of a forge candidate's status queues its status here (a trigger, so no path can forget); refusals
-- that never became candidates are queued by the webhook handler.
CREATE TABLE forge_statuses (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    repo          text NOT NULL REFERENCES repos (name),
    sha           text NOT NULL CHECK (sha ~ '^[0-9a-f]{40}([0-9a-f]{24})?$'),
    state         text NOT NULL CHECK (state IN ('pending', 'success', 'failure', 'error')),
    description   text NOT NULL CHECK (length(description) <= 2000),
    candidate_id  bigint REFERENCES candidates (id),
    attempts      integer NOT NULL DEFAULT 0,
    next_at       timestamptz NOT NULL DEFAULT now(),
    sent_at       timestamptz,
    given_up_at   timestamptz,
    last_error    text,
    created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX forge_statuses_due ON forge_statuses (next_at, id) WHERE sent_at IS NULL AND given_up_at IS NULL;
CREATE INDEX forge_statuses_sha ON forge_statuses (repo, sha, id);

CREATE FUNCTION candidates_forge_status() RETURNS trigger LANGUAGE plpgsql AS $$
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
        WHEN 'rejected' THEN st := 'failure'; msg := coalesce(NEW.reason, 'rejected');
        WHEN 'parked' THEN st := 'pending'; msg := coalesce(NEW.reason, 'parked: the target branch is red');
        ELSE st := 'error'; msg := NEW.status::text || ': ' || coalesce(NEW.reason, '');
    END CASE;
    INSERT INTO forge_statuses (repo, sha, state, description, candidate_id)
    VALUES (NEW.repo, NEW.sha, st, left(msg, 2000), NEW.id);
    PERFORM pg_notify('mergebot_forge', NEW.repo);
    RETURN NULL;
END $$;

CREATE TRIGGER candidates_forge_status AFTER INSERT OR UPDATE OF status ON candidates
    FOR EACH ROW EXECUTE FUNCTION candidates_forge_status();
