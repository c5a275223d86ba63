-- A fleet that does not trip over itself (issue 18).
-- A candidate's change by its patch id (the diff from where it forked off main, whitespace-insensitive as
-- `git patch-id --stable`): the same change pushed under another subtask is refused as a duplicate.
ALTER TABLE candidates ADD COLUMN patch_id text CHECK (patch_id ~ '^[0-9a-f]{40}([0-9a-f]{24})?$');
CREATE INDEX candidates_patch ON candidates (repo, patch_id) WHERE patch_id IS NOT NULL;

-- A subtask's footprint: the paths (globs) it is expected to touch, from its creator or its claimer.
ALTER TABLE subtasks ADD COLUMN paths text[] NOT NULL DEFAULT '{}' CHECK (cardinality(paths) <= 100);

-- Whether a push outside its subtask's footprint is refused (else it is a warning on its verdict).
ALTER TABLE repos ADD COLUMN footprint_refuse boolean NOT NULL DEFAULT false;

-- The footprints of subtasks in flight (running, or submitted and waiting in the queue), for the claim: only
-- these rows are read when it prefers work elsewhere.
CREATE INDEX subtasks_busy_paths ON subtasks (id) WHERE owner_id IS NOT NULL AND paths <> '{}';

-- The paths a candidate changes outside its subtask's footprint (a warning on its verdict).
ALTER TABLE candidates ADD COLUMN outside_footprint text[];

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

-- The paths a candidate changes (from where it forked off main, at most 1,000): the forecast finds the live
-- candidates that touch the same files as a new change.
ALTER TABLE candidates ADD COLUMN paths text[];
CREATE INDEX candidates_live_paths ON candidates USING gin (paths)
    WHERE status IN ('queued', 'verifying', 'landing', 'parked');
