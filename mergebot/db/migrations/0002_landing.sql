-- 0002: the landing path: managed repositories, candidates in the merge queue, landing intents.
--
-- A repository's landing configuration (target branch, verifier command, protected paths, size limits) lives
-- here, not in the pushed tree, so an agent cannot change what judges it.
-- A candidate is one accepted push: (subtask, claim version, owner, sha). The queue processes them per
-- repository in priority, then arrival order.
-- A landing intent is written before main moves and carries all the evidence, so the reconciler can finish
-- (main moved: write the landed row) or roll back (main did not move) a landing cut short by a crash.

CREATE TABLE repos (
    name              text PRIMARY KEY CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$'),
    target_branch     text NOT NULL DEFAULT 'main' CHECK (target_branch ~ '^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$'),
    verifier_command  text NOT NULL CHECK (length(verifier_command) BETWEEN 1 AND 4000),
    verifier_timeout_s integer NOT NULL DEFAULT 600 CHECK (verifier_timeout_s BETWEEN 1 AND 86400),
    protected_paths   text[] NOT NULL DEFAULT '{}',
    max_push_bytes    bigint NOT NULL DEFAULT 104857600 CHECK (max_push_bytes > 0),
    max_file_bytes    bigint NOT NULL DEFAULT 10485760 CHECK (max_file_bytes > 0),
    root_sha          text NOT NULL,
    paused            boolean NOT NULL DEFAULT false,
    paused_reason     text,
    created_at        timestamptz NOT NULL DEFAULT now()
);

CREATE TYPE candidate_status AS ENUM
    ('queued', 'verifying', 'landing', 'landed', 'rejected', 'superseded', 'cancelled');

CREATE TABLE candidates (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    repo          text NOT NULL REFERENCES repos (name),
    subtask_id    bigint NOT NULL REFERENCES subtasks (id),
    claim_version bigint NOT NULL,
    owner_id      bigint NOT NULL REFERENCES agents (id),
    sha           text NOT NULL CHECK (sha ~ '^[0-9a-f]{40}([0-9a-f]{24})?$'),
    ref           text NOT NULL,
    priority      integer NOT NULL DEFAULT 0,
    status        candidate_status NOT NULL DEFAULT 'queued',
    reason        text,
    base_sha      text,
    merged_sha    text,
    verifier      jsonb,
    queued_at     timestamptz NOT NULL DEFAULT now(),
    started_at    timestamptz,
    finished_at   timestamptz
);
CREATE INDEX candidates_queue ON candidates (repo, priority DESC, id) WHERE status = 'queued';
CREATE INDEX candidates_subtask ON candidates (subtask_id, id);
CREATE INDEX candidates_active ON candidates (repo) WHERE status IN ('verifying', 'landing');

CREATE TYPE intent_status AS ENUM ('pending', 'done', 'rolled_back');

CREATE TABLE landing_intents (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    candidate_id     bigint NOT NULL REFERENCES candidates (id),
    repo             text NOT NULL REFERENCES repos (name),
    target_ref       text NOT NULL,
    old_sha          text NOT NULL,
    new_sha          text NOT NULL,
    tree_sha         text NOT NULL,
    evidence         jsonb NOT NULL,
    status           intent_status NOT NULL DEFAULT 'pending',
    created_at       timestamptz NOT NULL DEFAULT now(),
    resolved_at      timestamptz
);
CREATE UNIQUE INDEX landing_intents_one_pending ON landing_intents (repo) WHERE status = 'pending';

-- What the reconciler found that does not add up, for operators.
CREATE TABLE reconcile_findings (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    repo        text NOT NULL,
    kind        text NOT NULL,
    detail      jsonb NOT NULL,
    found_at    timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX events_kind ON events (kind, id);

-- A re-push of a submitted subtask changes its candidate without changing its status: log that too.
CREATE OR REPLACE FUNCTION subtasks_log() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO events (actor_id, kind, subtask_id, to_status, claim_version)
        VALUES (NEW.created_by, 'created', NEW.id, NEW.status, NEW.claim_version);
        RETURN NULL;
    END IF;
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
    IF NEW.status IN ('landed', 'failed', 'cancelled') AND NEW.status IS DISTINCT FROM OLD.status THEN
        PERFORM pg_notify('mergebot_finished', NEW.id::text || ':' || NEW.status::text);
    END IF;
    RETURN NULL;
END $$;
