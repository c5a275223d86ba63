-- A fleet that does not trip over itself (issue 18).
-- A candidate's change by its patch id (the diff from where it forked off main, whitespace-insensitive as
-- `git patch-id --stable`): the same change pushed under another subtask is refused as a duplicate.
ALTER TABLE candidates ADD COLUMN patch_id text CHECK (patch_id ~ '^[0-9a-f]{40}([0-9a-f]{24})?$');
CREATE INDEX candidates_patch ON candidates (repo, patch_id) WHERE patch_id IS NOT NULL;

-- A subtask's footprint: the paths (globs) it is expected to touch, from its creator or its claimer.
ALTER TABLE subtasks ADD COLUMN paths text[] NOT NULL DEFAULT '{}' CHECK (cardinality(paths) <= 100);

-- Whether a push outside its subtask's footprint is refused (else it is a warning on its verdict).
ALTER TABLE repos ADD COLUMN footprint_refuse boolean NOT NULL DEFAULT false;
