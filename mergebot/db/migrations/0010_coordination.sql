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
