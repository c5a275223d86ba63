-- Batched landings (issue 6): several candidates verified together by one run and landed by one move of main.
-- Each landed row still names its own merge commit (merged_sha, on main's first-parent chain) and now also the
-- commit main moved to in that landing (main_sha, the one the covering verifier run passed on) and how many
-- candidates that landing carried. For a landing of one candidate main_sha = merged_sha.
ALTER TABLE landed ADD COLUMN main_sha text;
UPDATE landed SET main_sha = merged_sha;
ALTER TABLE landed ALTER COLUMN main_sha SET NOT NULL;
ALTER TABLE landed ADD COLUMN batch_size integer NOT NULL DEFAULT 1 CHECK (batch_size >= 1);
CREATE INDEX landed_main_sha ON landed (repo, main_sha);
