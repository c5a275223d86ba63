-- A red main that mends itself (issue 21). When the post-land check fails on main and a re-run confirms it, the
-- queue bisects the landings since the last green commit on the verifier (jobs of purpose 'bisect'), and lands a
-- revert of the culprit made by the bot: a candidate that names the landing it reverts, and a landed row of kind
-- 'revert'. The culprit's subtask goes back to its owner (landed -> running, at a new claim version), so one
-- subtask may land more than once, once per claim version.
ALTER TABLE repos ADD COLUMN post_land_command text CHECK (length(post_land_command) BETWEEN 1 AND 4000);
ALTER TABLE candidates ADD COLUMN reverts bigint REFERENCES landed (id);
ALTER TABLE landed ADD COLUMN kind text NOT NULL DEFAULT 'land' CHECK (kind IN ('land', 'revert'));
ALTER TABLE landed ADD COLUMN reverts bigint REFERENCES landed (id);
ALTER TABLE landed ADD CONSTRAINT landed_revert_names_its_culprit CHECK ((kind = 'revert') = (reverts IS NOT NULL));
ALTER TABLE landed DROP CONSTRAINT landed_subtask_id_key;
ALTER TABLE landed ADD CONSTRAINT landed_once_per_claim UNIQUE (subtask_id, claim_version);
CREATE UNIQUE INDEX landed_reverted_once ON landed (reverts) WHERE reverts IS NOT NULL;
ALTER TABLE verify_jobs DROP CONSTRAINT verify_jobs_purpose_check;
ALTER TABLE verify_jobs ADD CONSTRAINT verify_jobs_purpose_check
    CHECK (purpose IN ('candidate', 'retry', 'base', 'post_land', 'manual', 'bisect'));
INSERT INTO subtask_transitions (from_status, to_status) VALUES ('landed', 'running');
