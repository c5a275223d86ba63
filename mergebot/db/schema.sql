-- Mergebot's current schema, declared: every type, table, index, view, function and trigger once, in its final
-- form. Servers are built and upgraded by the migrations (migrations/0001 to 0028, the history, never edited);
-- tests/test_migrations.py proves that a database built from this file equals one built from them, catalog for
-- catalog (columns in order, constraints and indexes by name, functions, triggers, views, privileges, seed rows).
-- A schema change is a new migration and the same change here, in place.
--
-- Columns stand in the order the migrations gave them: a column added later comes last in its table (ALTER TABLE
-- ADD COLUMN appends, and the order shows in SELECT * and in INSERT without a column list). Constraint names are
-- PostgreSQL's own (table_column_check, table_column_fkey, ...) unless named here.
--
-- Rules the schema enforces by itself (not only through Python):
--  * a subtask changes status only along the edges listed in subtask_transitions;
--  * a running or submitted subtask has an owner, and nothing else does; a running one, and only it, has a lease
--    (so does a running verify job);
--  * every creation of a subtask and every change of its status, owner, claim version or candidate appends one
--    row to events (triggers); events is append-only;
--  * the dependency graph has no cycles (a trigger on subtask_deps);
--  * a subtask lands at most once per claim version; a revert names the landing it reverts, and a landing is
--    reverted at most once; a repository has at most one pending landing intent;
--  * a forge repository's settings are all set or all NULL, and so are a GitHub App's;
--  * every change of a forge candidate's status reaches the outboxes that apply (its commit status, its GitHub
--    check run, its pull request's comment), and the /metrics totals count each finished run, landing and lost
--    lease (triggers, so no path can forget);
--  * waiters are told at once (NOTIFY): mergebot_finished (a subtask landed, failed or was cancelled),
--    mergebot_ready (work became ready), mergebot_candidate (a candidate's status), mergebot_job (a verify job
--    ended), mergebot_forge (an outbox has work), mergebot_push (a subtask's candidate made or changed, by subtask).
-- Errors raised here carry our own codes: MB001 (a transition not allowed), MB002 (events is append-only),
-- MB003 (a dependency cycle).
--
-- Three foreign keys close cycles between tables (subtasks -> verify_jobs -> candidates -> subtasks, and so on);
-- their columns are declared with their tables and the keys at the end, once every table exists.


-- ---- Agents and groups -------------------------------------------------------------------------------------------

CREATE TYPE agent_role AS ENUM ('admin', 'lead', 'agent', 'verifier', 'reviewer');

-- Whoever acts on the bot: an agent, a person or a verifier worker, known by the SHA-256 of its token.
CREATE TABLE agents (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name        text NOT NULL UNIQUE CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$'),
    role        agent_role NOT NULL,
    token_hash  bytea NOT NULL UNIQUE CHECK (length(token_hash) = 32),
    created_at  timestamptz NOT NULL DEFAULT now(),
    revoked_at  timestamptz
);

-- Groups as in the 1,000-agent run: the lead assigns agents to groups and may "open" a group, after which
-- its members also claim ready subtasks outside it ("don't wait for me").
CREATE TABLE groups (
    name        text PRIMARY KEY CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$'),
    open        boolean NOT NULL DEFAULT false,
    description text NOT NULL DEFAULT '' CHECK (length(description) <= 4000),
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- An agent belongs to at most one group, as its leader or a helper.
CREATE TABLE assignments (
    agent_id    bigint PRIMARY KEY REFERENCES agents (id),
    group_name  text NOT NULL REFERENCES groups (name),
    group_role  text NOT NULL DEFAULT 'helper' CHECK (group_role IN ('leader', 'helper')),
    assigned_by bigint REFERENCES agents (id),
    assigned_at timestamptz NOT NULL DEFAULT now()
);


-- ---- Subtasks: the tree of work, its claims, its dependencies, and the log of everything that happened to it -----

CREATE TYPE subtask_status AS ENUM
    ('blocked', 'ready', 'running', 'submitted', 'landed', 'failed', 'cancelled');

-- A unit of work. A claim sets the owner, bumps claim_version and sets a lease; every owner write names
-- (id, owner, claim_version), so a superseded owner changes nothing.
CREATE TABLE subtasks (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    parent_id        bigint REFERENCES subtasks (id),
    group_name       text REFERENCES groups (name),
    title            text NOT NULL CHECK (length(title) BETWEEN 1 AND 200),
    description      text NOT NULL DEFAULT '' CHECK (length(description) <= 20000),
    status           subtask_status NOT NULL,
    priority         integer NOT NULL DEFAULT 0,
    owner_id         bigint REFERENCES agents (id),
    claim_version    bigint NOT NULL DEFAULT 0,
    claimed_at       timestamptz,
    heartbeat_at     timestamptz,
    lease_expires_at timestamptz,
    attempts         integer NOT NULL DEFAULT 0,
    max_attempts     integer NOT NULL DEFAULT 3 CHECK (max_attempts BETWEEN 1 AND 100),
    candidate_sha    text CHECK (candidate_sha ~ '^[0-9a-f]{40}([0-9a-f]{24})?$'),
    previous_owner_id bigint REFERENCES agents (id),
    status_reason    text CHECK (length(status_reason) <= 2000),
    idempotency_key  text CHECK (length(idempotency_key) BETWEEN 1 AND 200),
    created_by       bigint REFERENCES agents (id),
    updated_by       bigint REFERENCES agents (id),
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    finished_at      timestamptz,
    -- The footprint: the paths (globs) the subtask is expected to touch, from its creator or its claimer.
    paths            text[] NOT NULL DEFAULT '{}' CHECK (cardinality(paths) <= 100),
    -- What a lead or admin allows a subtask, never its owner: to delete tests (a deleted test that passed on main
    -- is then removed, not weakened), to change what configures the check, to change behaviour (its edits of
    -- existing tests are then expected).
    allow_test_removal     boolean NOT NULL DEFAULT false,
    allow_check_changes    boolean NOT NULL DEFAULT false,
    allow_behaviour_change boolean NOT NULL DEFAULT false,
    -- The run of its acceptance tests on main when they were attached: if they pass there, they test nothing new.
    acceptance_probe bigint,  -- REFERENCES verify_jobs (id), at the end
    CONSTRAINT owned_iff_in_flight CHECK (
        (status IN ('running', 'submitted')) = (owner_id IS NOT NULL)
    ),
    CONSTRAINT lease_iff_running CHECK ((status = 'running') = (lease_expires_at IS NOT NULL))
);

-- The claim path reads only these partial indexes, so its cost follows the number of ready rows, not history.
-- Fenced owner writes probe (owner_id, id); recovery reads the leases; an index holds only the rows that have
-- its key, so a status change writes into as few indexes as it can.
CREATE INDEX subtasks_ready_any ON subtasks (priority DESC, id) WHERE status = 'ready';
CREATE INDEX subtasks_ready_group ON subtasks (group_name, priority DESC, id) WHERE status = 'ready';
CREATE INDEX subtasks_lease ON subtasks (lease_expires_at) WHERE lease_expires_at IS NOT NULL;
CREATE INDEX subtasks_owner ON subtasks (owner_id, id) WHERE owner_id IS NOT NULL;
CREATE INDEX subtasks_parent ON subtasks (parent_id) WHERE parent_id IS NOT NULL;
CREATE UNIQUE INDEX subtasks_idempotency_key ON subtasks (idempotency_key) WHERE idempotency_key IS NOT NULL;
-- The footprints of subtasks in flight (running, or submitted and waiting in the queue), for the claim: only
-- these rows are read when it prefers work elsewhere.
CREATE INDEX subtasks_busy_paths ON subtasks (id) WHERE owner_id IS NOT NULL AND paths <> '{}';

-- A subtask is blocked until every subtask it depends on has landed.
CREATE TABLE subtask_deps (
    subtask_id    bigint NOT NULL REFERENCES subtasks (id),
    depends_on_id bigint NOT NULL REFERENCES subtasks (id),
    PRIMARY KEY (subtask_id, depends_on_id),
    CHECK (subtask_id <> depends_on_id)
);
CREATE INDEX subtask_deps_reverse ON subtask_deps (depends_on_id);

-- The only status changes a subtask may make (checked by subtasks_on_update). landed -> running: a red main's
-- culprit goes back to its owner at a new claim version, so a subtask may land once per claim version.
CREATE TABLE subtask_transitions (
    from_status subtask_status NOT NULL,
    to_status   subtask_status NOT NULL,
    PRIMARY KEY (from_status, to_status)
);

INSERT INTO subtask_transitions (from_status, to_status) VALUES
    ('blocked', 'ready'), ('blocked', 'cancelled'),
    ('ready', 'running'), ('ready', 'blocked'), ('ready', 'cancelled'),
    ('running', 'ready'), ('running', 'submitted'), ('running', 'failed'), ('running', 'cancelled'),
    ('submitted', 'landed'), ('submitted', 'running'), ('submitted', 'ready'),
    ('submitted', 'failed'), ('submitted', 'cancelled'),
    ('landed', 'running'),
    ('failed', 'ready'), ('failed', 'blocked'), ('failed', 'cancelled');

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

-- Notes on a subtask (the handoff to its next owner) or to a group.
CREATE TABLE notes (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    subtask_id  bigint REFERENCES subtasks (id),
    group_name  text REFERENCES groups (name),
    author_id   bigint NOT NULL REFERENCES agents (id),
    claim_version bigint,
    body        text NOT NULL CHECK (length(body) BETWEEN 1 AND 20000),
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX notes_subtask ON notes (subtask_id, id);

-- Announcements to everyone or to a group. Mergebot itself announces (a red main): those have no author.
CREATE TABLE announcements (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    author_id   bigint REFERENCES agents (id),
    group_name  text REFERENCES groups (name),
    body        text NOT NULL CHECK (length(body) BETWEEN 1 AND 20000),
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- Every state change, appended by triggers and by the store; never updated or deleted.
CREATE TABLE events (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at            timestamptz NOT NULL DEFAULT clock_timestamp(),
    actor_id      bigint REFERENCES agents (id),
    kind          text NOT NULL,
    subtask_id    bigint REFERENCES subtasks (id),
    from_status   subtask_status,
    to_status     subtask_status,
    claim_version bigint,
    detail        jsonb NOT NULL DEFAULT '{}'
);
CREATE INDEX events_subtask ON events (subtask_id, id);

-- One BEFORE UPDATE trigger checks every status change against the transition table, stamps the row, and
-- turns every change of status, owner, claim version or candidate into an event (the actor is the row's
-- updated_by, which every store query sets); finished subtasks are announced on mergebot_finished. Creation
-- is logged AFTER INSERT, when the row exists for the event to reference.
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

CREATE FUNCTION events_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'events is append-only' USING ERRCODE = 'MB002';
END $$;

CREATE TRIGGER events_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON events
    FOR EACH STATEMENT EXECUTE FUNCTION events_append_only();

-- A new edge subtask -> depends_on must not close a cycle: refuse it if depends_on already (transitively)
-- depends on subtask.
CREATE FUNCTION subtask_deps_acyclic() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- Two transactions adding edges concurrently could each miss the other's half of a cycle: serialize
    -- edge insertion (rare, off the claim path). The check below runs with a snapshot taken after the lock.
    PERFORM pg_advisory_xact_lock(7243501);
    IF EXISTS (
        WITH RECURSIVE reach(id) AS (
            SELECT d.depends_on_id FROM subtask_deps d WHERE d.subtask_id = NEW.depends_on_id
            UNION
            SELECT d.depends_on_id FROM subtask_deps d JOIN reach r ON d.subtask_id = r.id
        )
        SELECT 1 FROM reach WHERE id = NEW.subtask_id
    ) THEN
        RAISE EXCEPTION 'dependency % -> % would close a cycle', NEW.subtask_id, NEW.depends_on_id
            USING ERRCODE = 'MB003';
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER subtask_deps_acyclic BEFORE INSERT ON subtask_deps
    FOR EACH ROW EXECUTE FUNCTION subtask_deps_acyclic();

-- Whether two footprints may overlap: some entry of one is a prefix of an entry of the other, each cut at its
-- first wildcard (``src/*.py`` is ``src/``; a leading wildcard, ``*.md``, is everything). Conservative: it may
-- say yes for globs that touch nothing in common, never no for ones that do. Each entry is cut once
-- (``footprint_prefixes``); the claim cuts the footprints in flight once per statement.
CREATE FUNCTION footprint_prefixes(a text[]) RETURNS text[] LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT ARRAY(SELECT DISTINCT regexp_replace(x, '[*?[].*$', '') FROM unnest(a) x)
$$;
CREATE FUNCTION prefixes_overlap(a text[], b text[]) RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT EXISTS (SELECT 1 FROM unnest(a) x, unnest(b) y WHERE starts_with(x, y) OR starts_with(y, x))
$$;
CREATE FUNCTION footprints_overlap(a text[], b text[]) RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT prefixes_overlap(footprint_prefixes(a), footprint_prefixes(b))
$$;

-- The claim's footprint preference (``subtask_claim``): among the first ready subtasks of the top priority, in the
-- claim's own order (the caller's group first, then what it may roam to), one whose footprint overlaps none of
-- the subtasks in flight, locked (SKIP LOCKED) for the claim; NULL when no subtask in flight has a footprint, when
-- the caller's group has ready work but all of it overlaps (the claim then takes its group's work as ever), or
-- when everything overlaps. Priority still rules: only the top priority's subtasks are looked at.
CREATE FUNCTION claim_free(p_group text, p_roam boolean) RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    busy text[];
    top integer;
    picked bigint;
BEGIN
    SELECT CASE WHEN count(*) > 0 THEN footprint_prefixes(array_agg(p)) END INTO busy
    FROM subtasks r, unnest(r.paths) p WHERE r.owner_id IS NOT NULL AND r.paths <> '{}';
    IF busy IS NULL THEN
        RETURN NULL;
    END IF;
    IF p_group IS NOT NULL THEN
        SELECT max(priority) INTO top FROM subtasks WHERE status = 'ready' AND group_name = p_group;
        IF top IS NOT NULL THEN
            SELECT s.id INTO picked FROM (
                SELECT q.id FROM subtasks q WHERE q.status = 'ready' AND q.group_name = p_group AND q.priority = top
                ORDER BY q.id LIMIT 32) pool
            JOIN subtasks s ON s.id = pool.id
            WHERE s.status = 'ready' AND NOT (s.paths <> '{}' AND prefixes_overlap(footprint_prefixes(s.paths), busy))
            ORDER BY s.id LIMIT 1 FOR UPDATE OF s SKIP LOCKED;
            RETURN picked;
        END IF;
    END IF;
    SELECT max(priority) INTO top FROM subtasks WHERE status = 'ready' AND (p_roam OR group_name IS NULL);
    IF top IS NULL THEN
        RETURN NULL;
    END IF;
    SELECT s.id INTO picked FROM (
        SELECT q.id FROM subtasks q WHERE q.status = 'ready' AND (p_roam OR q.group_name IS NULL) AND q.priority = top
        ORDER BY q.id LIMIT 32) pool
    JOIN subtasks s ON s.id = pool.id
    WHERE s.status = 'ready' AND NOT (s.paths <> '{}' AND prefixes_overlap(footprint_prefixes(s.paths), busy))
    ORDER BY s.id LIMIT 1 FOR UPDATE OF s SKIP LOCKED;
    RETURN picked;
END $$;


-- ---- Repositories and landing: the merge queue's candidates, landing intents, what landed ------------------------

-- A managed repository and its rules. What judges a change (the check's command, the protected paths, the files
-- that configure the check, the test paths a judging run takes from main, the held-out command) lives here, not
-- in the pushed tree, so an agent cannot change what judges it. Secrets never enter the database: a forge
-- repository names the environment variables that hold its webhook secret, its token or its App's key.
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
    created_at        timestamptz NOT NULL DEFAULT now(),
    -- A red main (its check fails) is not an operator's pause: landing goes on, but only a candidate that
    -- passes (a fix) lands; the others are parked until main is green again or an admin resumes.
    red_since         text,
    -- Forge mode (GitHub, Gitea/Forgejo): all set or all NULL (forge_complete).
    forge             text CHECK (forge IN ('github', 'gitea', 'forgejo')),
    forge_repo        text CHECK (forge_repo ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,99}/[A-Za-z0-9._-]{1,100}$'),
    forge_api_url     text CHECK (forge_api_url ~ '^https?://'),
    forge_git_url     text CHECK (length(forge_git_url) BETWEEN 1 AND 2000),
    webhook_secret_env text CHECK (webhook_secret_env ~ '^[A-Z_][A-Z0-9_]{0,99}$'),
    forge_token_env   text CHECK (forge_token_env ~ '^[A-Z_][A-Z0-9_]{0,99}$'),
    -- Whether a push outside its subtask's footprint is refused (else it is a warning on its verdict).
    footprint_refuse  boolean NOT NULL DEFAULT false,
    -- Caches for checks: paths inside the checkout, the files whose content keys them (lockfiles), and a setup
    -- step run before the check (its network only ever on commits already on main).
    cache_paths       text[] NOT NULL DEFAULT '{}' CHECK (cardinality(cache_paths) <= 20),
    cache_key         text[] NOT NULL DEFAULT '{}' CHECK (cardinality(cache_key) <= 20),
    setup_command     text CHECK (length(setup_command) BETWEEN 1 AND 4000),
    setup_network     boolean NOT NULL DEFAULT false,
    -- The check on main after a landing, and its bisection (NULL: the verifier command).
    post_land_command text CHECK (length(post_land_command) BETWEEN 1 AND 4000),
    -- The checks' sandbox: extra read-only paths, what one run may write in all, the memory it may use (MiB).
    sandbox_paths     text[] NOT NULL DEFAULT '{}' CHECK (cardinality(sandbox_paths) <= 50),
    disk_limit_mb     integer NOT NULL DEFAULT 2048 CHECK (disk_limit_mb BETWEEN 16 AND 1048576),
    memory_limit_mb   integer NOT NULL DEFAULT 4096 CHECK (memory_limit_mb BETWEEN 64 AND 1048576),
    -- Where the tests report their outcomes: our pytest plugin, or a JUnit file the check leaves.
    report            text NOT NULL DEFAULT 'pytest' CHECK (report = 'pytest' OR report ~ '^junit:[^/].{0,998}$'),
    -- What a candidate that edits existing tests gets: flagged, refused, or judged by main's version of them.
    old_tests         text NOT NULL DEFAULT 'flag' CHECK (old_tests IN ('flag', 'refuse', 'run')),
    -- The files that configure the check, as globs (a glob without "/" matches the name in any folder).
    check_config      text[] NOT NULL DEFAULT '{conftest.py,pytest.ini,tox.ini,noxfile.py}'
                          CHECK (cardinality(check_config) <= 100),
    held_out_command  text NOT NULL DEFAULT 'python -m pytest -q -p no:cacheprovider "$VERIFIER_HELD_OUT"'
                          CHECK (length(held_out_command) BETWEEN 1 AND 4000),
    -- GitHub App authentication instead of a personal token (github_app_complete); the installation is found
    -- from the repository when it is not given.
    github_app_id     bigint CHECK (github_app_id > 0),
    github_app_key_env text CHECK (github_app_key_env ~ '^[A-Z_][A-Z0-9_]{0,99}$'),
    github_installation_id bigint CHECK (github_installation_id > 0),
    -- Whether the queue orders by each candidate's failure risk.
    risk_aware        boolean NOT NULL DEFAULT true,
    -- A red main's mend that gave up stays given up until main moves or an admin resumes: main's head then.
    mend_given_up     text,
    -- The paths a judging run takes from main, and whether the tamper signal refuses a candidate or names it.
    test_paths        text[] NOT NULL DEFAULT '{test_*.py,*_test.py,tests/,test/,conftest.py}'
                          CHECK (cardinality(test_paths) <= 100),
    suspicious        text NOT NULL DEFAULT 'flag' CHECK (suspicious IN ('flag', 'refuse')),
    -- Queue rules (0028): the speculation window (0: as wide as the verifier slots), the largest batch, whether a
    -- failed check runs once more; NULL: the server's default (MERGEBOT_SPECULATION_WINDOW, ...).
    speculation_window integer CHECK (speculation_window BETWEEN 0 AND 64),
    batch_size        integer CHECK (batch_size BETWEEN 1 AND 64),
    retry_failed_checks boolean,
    -- How a landing reaches main (0029): a merge commit, or one squashed commit whose only parent is main.
    merge_method      text NOT NULL DEFAULT 'merge' CHECK (merge_method IN ('merge', 'squash')),
    -- Approvals (0030): NULL, none needed; empty, every change waits for one; else the globs of the paths whose
    -- changes wait for one (a lead's, a reviewer's or an admin's, for the candidate's exact commit).
    require_approval  text[] CHECK (cardinality(require_approval) <= 100),
    -- Named checks (0031): each {name, command, required, timeout_s}, run in parallel; '[]': the verifier command.
    checks            jsonb NOT NULL DEFAULT '[]'
                          CHECK (jsonb_typeof(checks) = 'array' AND jsonb_array_length(checks) <= 10),
    -- The audit of main (0033): what a commit of main without a landing statement does ('flag' or 'pause'), the
    -- head the audit last walked to, and the commits it found without one that no admin has seen yet.
    on_unattested     text NOT NULL DEFAULT 'flag' CHECK (on_unattested IN ('pause', 'flag')),
    audited_head      text CHECK (audited_head ~ '^[0-9a-f]{40}([0-9a-f]{24})?$'),
    unattested        jsonb,
    -- Union merges (0036): globs of files whose conflicts the bot merges by union, besides the files main's
    -- .gitattributes mark merge=union.
    union_merge       text[] NOT NULL DEFAULT '{}' CHECK (cardinality(union_merge) <= 100),
    CONSTRAINT forge_complete CHECK (
        (forge IS NULL) = (forge_repo IS NULL) AND (forge IS NULL) = (forge_api_url IS NULL)
        AND (forge IS NULL) = (forge_git_url IS NULL) AND (forge IS NULL) = (webhook_secret_env IS NULL)
        AND (forge IS NULL) = (forge_token_env IS NULL)
    ),
    CONSTRAINT github_app_complete CHECK (
        (github_app_id IS NULL) = (github_app_key_env IS NULL)
        AND (github_installation_id IS NULL OR github_app_id IS NOT NULL)
        AND (github_app_id IS NULL OR forge = 'github'))
);
CREATE UNIQUE INDEX repos_forge_repo ON repos (forge, lower(forge_repo)) WHERE forge IS NOT NULL;

-- Held-out checks: a repository's tests that are never in the repository and never shown to an agent. A candidate
-- that passed its check runs them next, as a run of their own (purpose held_out), mounted read-only beside its
-- checkout; agents learn pass or fail and the failing test ids only.
CREATE TABLE held_out_files (
    repo        text NOT NULL REFERENCES repos (name),
    path        text NOT NULL CHECK (length(path) BETWEEN 1 AND 1000 AND path !~ '^/' AND path !~ '(^|/)\.\.?(/|$)'),
    content     bytea NOT NULL CHECK (octet_length(content) <= 1048576),
    PRIMARY KEY (repo, path)
);

CREATE TYPE candidate_status AS ENUM
    ('queued', 'verifying', 'landing', 'landed', 'rejected', 'superseded', 'cancelled', 'parked', 'awaiting_approval');

-- A candidate is one accepted push: (subtask, claim version, owner, sha). The queue processes them per
-- repository in priority, then arrival order; parked ones wait for a red main to turn green.
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
    finished_at   timestamptz,
    -- The typed verdict (kind and facts), written with the status.
    verdict       jsonb,
    -- The change's patch id (`git patch-id --stable` of the diff from where it forked off main): the same change
    -- pushed under another subtask is refused as a duplicate.
    patch_id      text CHECK (patch_id ~ '^[0-9a-f]{40}([0-9a-f]{24})?$'),
    -- The paths it changes outside its subtask's footprint (a warning on its verdict), and all it changes (at
    -- most 1,000): the forecast finds the live candidates that touch the same files.
    outside_footprint text[],
    paths         text[],
    -- A revert the bot made of a red main's culprit names the landing it reverts.
    reverts       bigint,  -- REFERENCES landed (id), at the end
    -- The estimated probability it fails, what that rests on, and how often a later candidate went first.
    failure_risk  real CHECK (failure_risk BETWEEN 0 AND 1),
    risk_facts    jsonb,
    passed_over   integer NOT NULL DEFAULT 0 CHECK (passed_over >= 0),
    -- When the push reached the bot, and when the queue last merged it for a run.
    pushed_at     timestamptz,
    merged_at     timestamptz,
    -- What the tamper signal found in its diff.
    suspicious    jsonb,
    -- The start tag the fair order gave it when it was first taken (0038; ``fair_accounts``): NULL until then.
    fair_start    double precision
);
CREATE INDEX candidates_queue ON candidates (repo, priority DESC, id) WHERE status = 'queued';
CREATE INDEX candidates_subtask ON candidates (subtask_id, id);
CREATE INDEX candidates_active ON candidates (repo) WHERE status IN ('verifying', 'landing');
-- The queue's depth by repository and status reads only the live candidates.
CREATE INDEX candidates_live ON candidates (repo, status) WHERE status IN ('queued', 'verifying', 'landing', 'parked');
CREATE INDEX candidates_live_paths ON candidates USING gin (paths)
    WHERE status IN ('queued', 'verifying', 'landing', 'parked');
CREATE INDEX candidates_patch ON candidates (repo, patch_id) WHERE patch_id IS NOT NULL;
CREATE INDEX candidates_finished ON candidates (finished_at);
-- A repository's candidates, newest first: the risk facts read the last two thousand.
CREATE INDEX candidates_repo_recent ON candidates (repo, id DESC);
CREATE INDEX candidates_owner_finished ON candidates (owner_id, repo, id DESC) WHERE status IN ('landed', 'rejected');

-- A candidate's fence: NULL while its subtask still waits on exactly it (the same owner and claim version,
-- submitted, with this sha), else why not. One rule for the statement that takes the next candidate
-- (``candidate_next``) and for the window's checks of the candidates in flight (``candidate_fences``); the
-- sentences are the caller's (``mergebot.messages.queue.FENCE_WORDS``: ``gone``, ``cancelled`` with ``{reason}``,
-- ``reclaimed`` with ``{claim_version}``, ``status`` with ``{status}``, ``replaced``). ``s`` is all NULL when the
-- subtask is gone. A cancel drops the owner, so it is named before the owner is compared.
CREATE FUNCTION candidate_unfenced(q candidates, s subtasks, words jsonb) RETURNS text LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN s.id IS NULL THEN words ->> 'gone'
                WHEN s.status = 'cancelled'
                    THEN replace(words ->> 'cancelled', '{reason}', coalesce(s.status_reason, ''))
                WHEN s.claim_version <> q.claim_version OR s.owner_id IS DISTINCT FROM q.owner_id
                    THEN replace(words ->> 'reclaimed', '{claim_version}', s.claim_version::text)
                WHEN s.status <> 'submitted' THEN replace(words ->> 'status', '{status}', s.status::text)
                WHEN s.candidate_sha IS DISTINCT FROM q.sha THEN words ->> 'replaced'
           END
$$;

-- The status a candidate that no longer holds its fence ends in: ``cancelled`` when its subtask was cancelled (a
-- cancel is final, so whatever of it is left is dropped because of it), else ``superseded`` (reclaimed, replaced by
-- a newer push, released, gone).
CREATE FUNCTION candidate_dropped(subtask_id bigint) RETURNS candidate_status LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN EXISTS (SELECT 1 FROM subtasks s
                             WHERE s.id = candidate_dropped.subtask_id AND s.status = 'cancelled')
                THEN 'cancelled' ELSE 'superseded' END::candidate_status
$$;

-- Candidates announce each change of status (long-polled verdicts).
CREATE FUNCTION candidates_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('mergebot_candidate', NEW.id::text || ':' || NEW.status::text);
    RETURN NULL;
END $$;

CREATE TRIGGER candidates_notify AFTER UPDATE OF status ON candidates
    FOR EACH ROW WHEN (NEW.status IS DISTINCT FROM OLD.status) EXECUTE FUNCTION candidates_notify();

-- The fair order within a priority (0038, ``mergebot.landing.window.fair``): start-time fair queuing of the verifier
-- among the agents that push, in predicted verifier-seconds. Per repository a virtual clock (the least start tag
-- waiting when a candidate was last taken) and per agent the finish tag of its last candidate taken (the service it
-- has had); ``candidates.fair_start`` keeps the start tag each candidate was first taken at.
CREATE TABLE fair_clocks (
    repo  text PRIMARY KEY REFERENCES repos (name),
    vtime double precision NOT NULL DEFAULT 0 CHECK (vtime >= 0)
);
CREATE TABLE fair_accounts (
    repo     text NOT NULL REFERENCES repos (name),
    owner_id bigint NOT NULL REFERENCES agents (id),
    served   double precision NOT NULL DEFAULT 0 CHECK (served >= 0),
    PRIMARY KEY (repo, owner_id)
);
-- ... and under their subtask's id, on creation too (0035): a wait keyed on (subtask, head commit) may begin before
-- that commit's candidate exists (payload "subtask:candidate:status").
CREATE FUNCTION candidates_notify_push() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('mergebot_push', NEW.subtask_id::text || ':' || NEW.id::text || ':' || NEW.status::text);
    RETURN NULL;
END $$;

CREATE TRIGGER candidates_notify_push AFTER INSERT OR UPDATE OF status ON candidates
    FOR EACH ROW EXECUTE FUNCTION candidates_notify_push();

-- Approvals (0030): a lead's, a reviewer's or an admin's approval of one candidate's exact commit, given with
-- `mergebot approve`, the API, `@mergebot approve` or an approving review on the forge. It holds for that commit of
-- that subtask only: a new push is a new candidate, and needs a new one.
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

CREATE TYPE intent_status AS ENUM ('pending', 'done', 'rolled_back');

-- A landing intent is written before main moves and carries all the evidence, so the reconciler can finish
-- (main moved: write the landed row) or roll back (main did not move) a landing cut short by a crash. One
-- pending intent per repository at a time.
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
    resolved_at      timestamptz,
    -- The landing's signed statements (0032), made before main moves: kept in attestations when it is recorded.
    attestations     jsonb
);
CREATE UNIQUE INDEX landing_intents_one_pending ON landing_intents (repo) WHERE status = 'pending';

-- What landed: one row per landing of a subtask's claim, with the evidence a reviewer needs to re-run the check.
-- A batch lands several candidates by one move of main: each row names its own merge commit (merged_sha, on
-- main's first-parent chain), the commit main moved to (main_sha, the one the covering run passed on), the run
-- and the landing (batch_id) it was part of. A revert (kind 'revert') names the landing it reverts.
CREATE TABLE landed (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    subtask_id       bigint NOT NULL REFERENCES subtasks (id),
    claim_version    bigint NOT NULL,
    owner_id         bigint NOT NULL REFERENCES agents (id),
    repo             text NOT NULL,
    target_ref       text NOT NULL,
    candidate_sha    text NOT NULL,
    base_sha         text NOT NULL,
    merged_sha       text NOT NULL,
    tree_sha         text NOT NULL,
    verifier_command text NOT NULL,
    verifier_result  text NOT NULL,
    duration_ms      integer NOT NULL CHECK (duration_ms >= 0),
    log_digest       text NOT NULL,
    main_status      text NOT NULL DEFAULT 'pending',
    landed_at        timestamptz NOT NULL DEFAULT now(),
    main_sha         text NOT NULL,
    batch_size       integer NOT NULL DEFAULT 1 CHECK (batch_size >= 1),
    -- The cache generation the deciding run read (or wrote), so a reviewer's re-run can use it.
    verifier_cache   jsonb,
    run_id           bigint,  -- REFERENCES verify_jobs (id), at the end
    batch_id         bigint REFERENCES landing_intents (id),
    kind             text NOT NULL DEFAULT 'land' CHECK (kind IN ('land', 'revert')),
    reverts          bigint REFERENCES landed (id),
    -- How the deciding run was confined: the sandbox, and how each limit was enforced.
    verifier_sandbox text,
    verifier_limits  text,
    -- The existing tests the change edits, and the acceptance tests it carried, by path.
    tests_changed    text[],
    acceptance       text[],
    -- The queue policy that landed it.
    policy           text CHECK (length(policy) <= 100),
    -- Who approved the landed commit, where the repository required an approval (0030): agents' names.
    approved_by      text[],
    -- The files whose conflicts its merge resolved by union (0036), by path; NULL: none.
    union_merged     text[],
    UNIQUE (repo, merged_sha),
    CONSTRAINT landed_once_per_claim UNIQUE (subtask_id, claim_version),
    CONSTRAINT landed_revert_names_its_culprit CHECK ((kind = 'revert') = (reverts IS NOT NULL))
);
CREATE INDEX landed_recent ON landed (landed_at DESC, id DESC);
CREATE INDEX landed_main_sha ON landed (repo, main_sha);
CREATE INDEX landed_batch ON landed (batch_id) WHERE batch_id IS NOT NULL;
CREATE UNIQUE INDEX landed_reverted_once ON landed (reverts) WHERE reverts IS NOT NULL;
-- The run a landing names, and a subtask's standing landing (its latest, which the cost charges rework to):
-- looked up once per run read.
CREATE INDEX landed_run ON landed (run_id) WHERE run_id IS NOT NULL;
CREATE INDEX landed_standing ON landed (subtask_id, id DESC) WHERE kind = 'land';

-- Signed landing statements (0032): in-toto statements in DSSE envelopes, one landing statement per commit main
-- moved through (numbered per repository: ``sequence``) and its test result, kept with the landed rows and copied to
-- the bare repository's refs/notes/mergebot (``noted_at``).
CREATE TABLE attestations (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    repo         text NOT NULL REFERENCES repos (name),
    landed_id    bigint REFERENCES landed (id),
    kind         text NOT NULL CHECK (kind IN ('landing', 'test_result', 'reverify')),
    subject_sha  text NOT NULL CHECK (subject_sha ~ '^[0-9a-f]{40}([0-9a-f]{24})?$'),
    sequence     bigint CHECK (sequence > 0),
    keyid        text NOT NULL CHECK (keyid ~ '^[0-9a-f]{64}$'),
    envelope     jsonb NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    noted_at     timestamptz,
    CHECK ((kind = 'landing') = (sequence IS NOT NULL))
);
CREATE UNIQUE INDEX attestations_one_landing ON attestations (repo, subject_sha) WHERE kind = 'landing';
CREATE UNIQUE INDEX attestations_sequence ON attestations (repo, sequence) WHERE kind = 'landing';
CREATE INDEX attestations_landed ON attestations (landed_id);
CREATE INDEX attestations_unnoted ON attestations (repo, id) WHERE noted_at IS NULL;

-- What the reconciler found that does not add up, for operators.
CREATE TABLE reconcile_findings (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    repo        text NOT NULL,
    kind        text NOT NULL,
    detail      jsonb NOT NULL,
    found_at    timestamptz NOT NULL DEFAULT now()
);


-- ---- Verify jobs: checks run by verifier workers on any machine --------------------------------------------------

CREATE TYPE job_status AS ENUM ('queued', 'running', 'done', 'cancelled');

-- A job is (repository, exact commit, command, time limit) and a purpose. Workers claim jobs with the same
-- SKIP LOCKED, lease and fencing pattern as subtasks: a claim bumps claim_version, and heartbeats and the result
-- must name it, so a worker that lost its lease cannot report and each job finishes at most once.
CREATE TABLE verify_jobs (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    repo             text NOT NULL REFERENCES repos (name),
    commit_sha       text NOT NULL CHECK (commit_sha ~ '^[0-9a-f]{40}([0-9a-f]{24})?$'),
    command          text NOT NULL,
    timeout_s        integer NOT NULL CHECK (timeout_s > 0),
    purpose          text NOT NULL CHECK (purpose IN ('candidate', 'retry', 'base', 'post_land', 'manual', 'bisect',
                                                      'baseline', 'acceptance', 'held_out', 'old_tests',
                                                      'reverify')),
    candidate_id     bigint REFERENCES candidates (id),
    landed_id        bigint REFERENCES landed (id),
    status           job_status NOT NULL DEFAULT 'queued',
    worker_id        bigint REFERENCES agents (id),
    worker_name      text CHECK (length(worker_name) <= 200),
    claim_version    bigint NOT NULL DEFAULT 0,
    lease_expires_at timestamptz,
    attempts         integer NOT NULL DEFAULT 0,
    max_attempts     integer NOT NULL DEFAULT 3,
    outcome          text,
    result           jsonb,
    created_at       timestamptz NOT NULL DEFAULT now(),
    started_at       timestamptz,
    finished_at      timestamptz,
    -- The cache request and setup, and the sandbox, copied from the repository when the job is queued.
    cache            jsonb,
    -- The speculation window's width when a candidate run was queued (NULL for every other run).
    window_width     integer CHECK (window_width >= 1),
    sandbox          jsonb,
    -- The tree the run was proven to be: a baseline (main's outcomes) is found by tree.
    tree_sha         text CHECK (tree_sha ~ '^[0-9a-f]{40}([0-9a-f]{24})?$'),
    -- Lost leases, counted as they are lost (a counter that never goes down).
    leases_lost      integer NOT NULL DEFAULT 0 CHECK (leases_lost >= 0),
    -- A run of named checks (0031): a group parent no worker claims, finished with its children's combined result;
    -- each child runs one check (its name, and whether it must pass).
    is_group         boolean NOT NULL DEFAULT false,
    parent_id        bigint REFERENCES verify_jobs (id),
    check_name       text CHECK (check_name ~ '^[a-z0-9][a-z0-9_.-]{0,39}$'),
    required         boolean,
    -- The candidates the run was started for (0043): a window's checkpoint covers its own slot and the unchecked
    -- slots ahead of it since the previous checkpoint (a batch). NULL: its candidate alone (or none).
    covers           bigint[],
    CONSTRAINT lease_iff_running CHECK ((status = 'running') = (lease_expires_at IS NOT NULL)),
    CONSTRAINT check_of_group CHECK ((parent_id IS NULL) = (check_name IS NULL) AND (parent_id IS NULL) = (required IS NULL)
                                     AND NOT (is_group AND parent_id IS NOT NULL))
);
CREATE INDEX verify_jobs_queue ON verify_jobs (id) WHERE status = 'queued';
CREATE INDEX verify_jobs_lease ON verify_jobs (lease_expires_at) WHERE status = 'running';
CREATE INDEX verify_jobs_candidate ON verify_jobs (candidate_id);
CREATE INDEX verify_jobs_tree ON verify_jobs (repo, tree_sha) WHERE tree_sha IS NOT NULL;
-- A queue branch on the forge is deleted once every job naming its commit has ended.
CREATE INDEX verify_jobs_commit ON verify_jobs (repo, commit_sha);
-- The charts and the cost of a window read runs by when they finished (or, for the width, were queued).
CREATE INDEX verify_jobs_finished ON verify_jobs (finished_at);
CREATE INDEX verify_jobs_width ON verify_jobs (created_at) WHERE window_width IS NOT NULL;
CREATE INDEX verify_jobs_parent ON verify_jobs (parent_id) WHERE parent_id IS NOT NULL;
CREATE INDEX verify_jobs_landed ON verify_jobs (landed_id, id) WHERE landed_id IS NOT NULL;
CREATE INDEX verify_jobs_reverify ON verify_jobs (id) WHERE purpose = 'reverify' AND parent_id IS NULL;
-- A repository's candidate runs, newest first (0038): what predicted_run reads.
CREATE INDEX verify_jobs_candidate_runs ON verify_jobs (repo, id)
    WHERE purpose = 'candidate' AND parent_id IS NULL AND finished_at IS NOT NULL;

-- One prediction of how long a check of a repository runs (issue 45), for admission control's backlog
-- (``admission_measure``) and the fair order's charge (``candidate_next``) alike; ``mergebot.landing.window.fair``'s
-- ``predicted_seconds`` is the same rule in Python. The runs are the repository's newest 20 candidate runs (by id,
-- the order they were queued) that finished ``done`` (a cancelled run says nothing of the check's length). A run
-- counts its verifier-seconds: a single run its own time; a run of named checks (a group, whose parent never starts)
-- the sum of its children's that ran, since each of them held a verifier that long, side by side or not. The
-- prediction is the median of those runs, or 60 seconds with none (admission never uses that default: a lane with
-- no finished run is stale and admits). With it: how many runs it was made of, when the first of their work started
-- (the candidates that left the queue since are what those runs cleared) and when the newest finished. One
-- SELECT in a STABLE SQL function returning a table: the planner inlines it into the statement that reads it, so
-- ``candidate_next`` on the landing's hot path makes no call of its own.
CREATE FUNCTION predicted_run(for_repo text)
    RETURNS TABLE (seconds float8, runs integer, since timestamptz, last_finished timestamptz)
    LANGUAGE sql STABLE AS $$
    SELECT coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY r.secs), 60.0)::float8, count(*)::integer,
           min(r.started), max(r.finished)
    FROM (
        SELECT j.finished_at AS finished,
               CASE WHEN j.is_group THEN k.secs
                    ELSE extract(epoch FROM j.finished_at - j.started_at)::float8 END AS secs,
               CASE WHEN j.is_group THEN k.started ELSE j.started_at END AS started
        FROM (SELECT v.id, v.is_group, v.started_at, v.finished_at FROM verify_jobs v
              WHERE v.repo = for_repo AND v.purpose = 'candidate' AND v.parent_id IS NULL AND v.finished_at IS NOT NULL
                AND v.status = 'done' AND (v.is_group OR v.started_at IS NOT NULL)
              ORDER BY v.id DESC LIMIT 20) j
        LEFT JOIN LATERAL (
            SELECT sum(extract(epoch FROM c.finished_at - c.started_at))::float8 AS secs, min(c.started_at) AS started
            FROM verify_jobs c
            WHERE j.is_group AND c.parent_id = j.id AND c.started_at IS NOT NULL AND c.finished_at IS NOT NULL
        ) k ON true
    ) r
    WHERE r.secs IS NOT NULL
$$;

-- A re-verification's statement names the job it compared (0034): one statement a job.
ALTER TABLE attestations ADD COLUMN job_id bigint REFERENCES verify_jobs (id);
CREATE UNIQUE INDEX attestations_reverify_job ON attestations (job_id) WHERE job_id IS NOT NULL;

-- Every finished job is announced, so whoever waits on it wakes at once.
CREATE FUNCTION verify_jobs_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status IN ('done', 'cancelled') AND NEW.status IS DISTINCT FROM OLD.status THEN
        PERFORM pg_notify('mergebot_job', NEW.id::text);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER verify_jobs_notify AFTER UPDATE ON verify_jobs
    FOR EACH ROW EXECUTE FUNCTION verify_jobs_notify();


-- ---- Forges: GitHub, Gitea and Forgejo ---------------------------------------------------------------------------

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

-- The status names the verdict's kind, so an agent reading it knows what to do, and a landing's names the existing
-- tests its change edits (tests_changed), so a person reading the pull request sees them.
CREATE FUNCTION candidates_forge_status() RETURNS trigger LANGUAGE plpgsql AS $$
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

CREATE TRIGGER candidates_forge_status AFTER INSERT OR UPDATE OF status ON candidates
    FOR EACH ROW EXECUTE FUNCTION candidates_forge_status();

-- Check runs on GitHub, for a repository that authenticates as a GitHub App: one per candidate on its head commit
-- and one per landing on main's new commit, kept as they move. Each change bumps ``version``; the sender sends
-- the newest state when ``sent_version`` is behind, so changes made between two sends go out as one update.
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
    -- One check run per named check beside the candidate's (0031), once its checks ran: their ids by check name.
    named_runs    jsonb NOT NULL DEFAULT '{}',
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

-- One living comment per pull request the bot heard of (an outbox row per pull request). Every change of a
-- candidate on its head branch bumps ``version``; the sender edits the comment to the newest state when
-- ``sent_version`` is behind, and not at all when the text would not change (``sent_digest``). ``answer`` answers
-- the last command given on the pull request (``@mergebot why`` also sets ``full_verdict``).
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


-- ---- Cross references: the foreign keys that close cycles between the tables above -------------------------------

ALTER TABLE subtasks ADD CONSTRAINT subtasks_acceptance_probe_fkey
    FOREIGN KEY (acceptance_probe) REFERENCES verify_jobs (id);
ALTER TABLE candidates ADD CONSTRAINT candidates_reverts_fkey FOREIGN KEY (reverts) REFERENCES landed (id);
ALTER TABLE landed ADD CONSTRAINT landed_run_id_fkey FOREIGN KEY (run_id) REFERENCES verify_jobs (id);


-- ---- Read models: refusal reasons, what each run is charged to, /metrics kept as things happen -------------------

-- The reason a refusal is counted (/metrics) and shown (mergebot queue) under, in one place: a push refused
-- at push time by its rule's code, a forge push ignored by why, a reused delivery id, and a candidate the queue
-- rejected by the kind its event records (older events, written before the kind was, by their reason's first
-- words, which the messages module keeps stable).
CREATE FUNCTION refusal_reason(kind text, detail jsonb) RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE kind
        WHEN 'push_refused' THEN coalesce(detail->>'code', 'refused')
        WHEN 'push_ignored' THEN replace(coalesce(detail->>'why', 'ignored'), ' ', '_')
        WHEN 'webhook_refused' THEN 'delivery_id_reused'
        ELSE coalesce(detail->>'kind', CASE
            WHEN detail->>'reason' LIKE 'conflicts with %' THEN 'conflict'
            WHEN detail->>'reason' LIKE 'nothing to land%' THEN 'nothing_to_land'
            WHEN detail->>'reason' LIKE 'the verifier could not run%' THEN 'verifier_error'
            WHEN detail->>'reason' LIKE 'the check % gave timeout%' THEN 'check_timeout'
            WHEN detail->>'reason' LIKE 'the check %' THEN 'check_failed'
            ELSE 'other'
        END)
    END
$$;

-- Where each run's seconds are charged, in one place: the cost of a window (``view_cost_runs``) and the all-time
-- counters on /metrics (``metric_verifier_seconds``) both read it. One row per run a worker started and that
-- ended, or per member of the batch a run landed (``seconds`` is then the whole run's: readers split it):
--   main_check  - a landing's post-land check or a red main's bisection (the run names the landed row);
--   landing_run - the run that passed on the commit main moved to;
--   rework      - any other run of a candidate whose subtask landed (failed, retried, superseded, cancelled
--                 runs on the way): charged to that subtask's standing landing;
--   thrown_away - a run of a candidate whose subtask has not landed: charged to nobody's landing;
--   other       - runs of no candidate and no landing (manual checks).
CREATE VIEW run_charges AS
SELECT j.id AS run_id, j.repo, j.purpose, j.status::text AS status, j.finished_at,
       greatest(0, extract(epoch FROM j.finished_at - j.started_at))::float8 AS seconds,
       c.owner_id AS pusher_id, coalesce(ml.id, rl.id, sl.id) AS landed_id,
       CASE WHEN ml.id IS NOT NULL THEN 'main_check' WHEN rl.id IS NOT NULL THEN 'landing_run'
            WHEN sl.id IS NOT NULL THEN 'rework' WHEN c.id IS NOT NULL THEN 'thrown_away'
            ELSE 'other' END AS charge,
       j.check_name
FROM verify_jobs j
LEFT JOIN landed ml ON ml.id = j.landed_id
LEFT JOIN candidates c ON c.id = j.candidate_id
-- a named check's run is its group's: the landed row names the group (0031)
LEFT JOIN landed rl ON j.landed_id IS NULL AND rl.run_id = coalesce(j.parent_id, j.id)
LEFT JOIN LATERAL (
    SELECT l.id FROM landed l
    WHERE c.id IS NOT NULL AND l.subtask_id = c.subtask_id AND l.kind = 'land'
      AND NOT EXISTS (SELECT 1 FROM landed rv WHERE rv.reverts = l.id)
    ORDER BY l.id DESC LIMIT 1
) sl ON j.landed_id IS NULL AND rl.id IS NULL
WHERE j.started_at IS NOT NULL AND j.finished_at IS NOT NULL;

-- /metrics kept as things happen, not summed over the whole history at every scrape: a finished verify run adds
-- itself to its (purpose, outcome, histogram bucket) total, a landed row to its repository's, a lost lease to the
-- leases' total. Each total only grows, as a counter must. The histogram's bounds are ``metric_bounds()``'s, the
-- same as ``mergebot.api.metrics.BUCKETS`` (a test holds them equal); ``metric_below(seconds)`` is how many bounds
-- lie below a run of ``seconds`` (a run of exactly a bound's length is in that bound's bucket).
CREATE FUNCTION metric_bounds() RETURNS float8[] LANGUAGE sql IMMUTABLE AS $$
    SELECT ARRAY[1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0]::float8[]
$$;
CREATE FUNCTION metric_below(seconds float8) RETURNS smallint LANGUAGE sql IMMUTABLE AS $$
    SELECT (cardinality(metric_bounds())
            - width_bucket(-seconds, ARRAY(SELECT -b FROM unnest(metric_bounds()) AS b ORDER BY b DESC)))::smallint
$$;

CREATE TABLE metric_run_totals (
    purpose  text NOT NULL,
    outcome  text NOT NULL,
    below    smallint NOT NULL,
    runs     bigint NOT NULL DEFAULT 0,
    seconds  float8 NOT NULL DEFAULT 0,
    PRIMARY KEY (purpose, outcome, below)
);
CREATE TABLE metric_landing_totals (
    repo     text NOT NULL,
    result   text NOT NULL,
    landings bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (repo, result)
);
CREATE TABLE metric_totals (
    name  text PRIMARY KEY,
    n     bigint NOT NULL DEFAULT 0
);
-- The lost leases' total is there from the start, at zero.
INSERT INTO metric_totals (name, n) VALUES ('verify_leases_lost', 0);

CREATE FUNCTION verify_jobs_metric() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    took float8;
BEGIN
    IF NEW.status = 'done' AND (TG_OP = 'INSERT' OR OLD.status IS DISTINCT FROM 'done')
       AND NEW.started_at IS NOT NULL AND NEW.finished_at IS NOT NULL THEN
        took := extract(epoch FROM NEW.finished_at - NEW.started_at);
        INSERT INTO metric_run_totals AS t (purpose, outcome, below, runs, seconds)
        VALUES (NEW.purpose, coalesce(NEW.outcome, 'none'), metric_below(took), 1, took)
        ON CONFLICT (purpose, outcome, below) DO UPDATE SET runs = t.runs + 1, seconds = t.seconds + EXCLUDED.seconds;
    END IF;
    IF NEW.leases_lost > (CASE WHEN TG_OP = 'INSERT' THEN 0 ELSE OLD.leases_lost END) THEN
        INSERT INTO metric_totals AS t (name, n)
        VALUES ('verify_leases_lost', NEW.leases_lost - (CASE WHEN TG_OP = 'INSERT' THEN 0 ELSE OLD.leases_lost END))
        ON CONFLICT (name) DO UPDATE SET n = t.n + EXCLUDED.n;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER verify_jobs_metric AFTER INSERT OR UPDATE OF status, leases_lost ON verify_jobs
    FOR EACH ROW EXECUTE FUNCTION verify_jobs_metric();

CREATE FUNCTION landed_metric() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO metric_landing_totals AS t (repo, result, landings) VALUES (NEW.repo, NEW.verifier_result, 1)
    ON CONFLICT (repo, result) DO UPDATE SET landings = t.landings + 1;
    RETURN NULL;
END $$;

CREATE TRIGGER landed_metric AFTER INSERT ON landed FOR EACH ROW EXECUTE FUNCTION landed_metric();

-- Admission control at claim time (0037, mergebot.landing.intake.admission): each lane's (repository's) last
-- decision, written only when it changes, so every replica answers from the same state and a lane that refuses
-- admits again only below its low mark (hysteresis); with what it measured then and the claims it refused since.
CREATE TABLE admission_lanes (
    repo              text PRIMARY KEY REFERENCES repos (name),
    admitting         boolean NOT NULL DEFAULT true,
    changed_at        timestamptz NOT NULL DEFAULT now(),
    backlog_seconds   float8 NOT NULL DEFAULT 0,
    threshold_seconds float8 NOT NULL DEFAULT 0,
    refusals          bigint NOT NULL DEFAULT 0 CHECK (refusals >= 0),
    -- while it refuses, the claims it let in, one for each candidate that left its queue (migration 0040)
    admitted          bigint NOT NULL DEFAULT 0 CHECK (admitted >= 0)
);
-- Each agent's standing with admission control (migration 0040): the claims it was let make, and, while a full lane
-- keeps it waiting for a slot, since and until when it waits (the least-served agent waiting gets the next slot).
-- The line is ordered by the verifiers' time each agent had (0044): ``charged``, the seconds of every run started for
-- its candidates, each run's split over the candidates it covers, added as a running run ends; a claim let in counts
-- as one predicted run until then (``admission_claims.settled``).
CREATE TABLE admission_agents (
    agent_id      bigint PRIMARY KEY REFERENCES agents (id),
    claims        bigint NOT NULL DEFAULT 0 CHECK (claims >= 0),
    waiting_since timestamptz,
    waiting_until timestamptz,
    charged       float8 NOT NULL DEFAULT 0
);
-- The lane each claim admission let in was made for (migration 0041; NULL: it named none): the claims still out,
-- not yet pushed, count against their lane (rule 8), so a lane that begins to admit lets in no flood.
CREATE TABLE admission_claims (
    subtask_id bigint PRIMARY KEY REFERENCES subtasks (id),
    repo       text REFERENCES repos (name),
    -- its claimer, and whether a run has charged its work yet (0044): until then it counts as one predicted run
    agent_id   bigint,
    settled    boolean NOT NULL DEFAULT false
);
CREATE INDEX admission_claims_pending ON admission_claims (agent_id) WHERE NOT settled;

-- One statement's ended runs at once (a sweep may end many): the claims settled, then the agents charged, each in
-- ascending order, so two statements ending runs at once, or one and a claim (its claim row, then its agent's),
-- wait for each other and never in a ring.
CREATE FUNCTION admission_charge_runs() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    subs bigint[];
    owners bigint[];
    seconds float8[];
BEGIN
    -- each ended run's share per candidate it covers: (its subtask, its owner, seconds); none when nothing ended
    -- (a lease renewed, a run claimed)
    SELECT array_agg(c.subtask_id), array_agg(c.owner_id),
           array_agg(greatest(0, extract(epoch FROM n.finished_at - n.started_at))::float8 / cardinality(r.members))
    INTO subs, owners, seconds
    FROM ended_new n JOIN ended_old o ON o.id = n.id
    CROSS JOIN LATERAL (SELECT array_remove(coalesce(n.covers, ARRAY[n.candidate_id]), NULL) AS members) r
    CROSS JOIN LATERAL unnest(r.members) AS m
    JOIN candidates c ON c.id = m
    WHERE o.finished_at IS NULL AND o.status = 'running' AND n.finished_at IS NOT NULL
      AND n.started_at IS NOT NULL AND n.candidate_id IS NOT NULL AND NOT n.is_group;
    IF subs IS NULL THEN
        RETURN NULL;
    END IF;
    PERFORM 1 FROM admission_claims WHERE subtask_id = ANY (subs) AND NOT settled ORDER BY subtask_id FOR UPDATE;
    UPDATE admission_claims SET settled = true WHERE subtask_id = ANY (subs) AND NOT settled;
    INSERT INTO admission_agents AS a (agent_id, charged)
    SELECT owner, sum(share) FROM unnest(owners, seconds) AS s(owner, share) GROUP BY owner ORDER BY owner
    ON CONFLICT (agent_id) DO UPDATE SET charged = a.charged + EXCLUDED.charged;
    RETURN NULL;
END $$;

CREATE TRIGGER verify_jobs_charge_runs AFTER UPDATE ON verify_jobs
    REFERENCING OLD TABLE AS ended_old NEW TABLE AS ended_new
    FOR EACH STATEMENT EXECUTE FUNCTION admission_charge_runs();

