-- Batches that name their run (issue 20): every landed row says which verifier run passed on the commit main
-- moved to, and which landing it was part of (the members of one batch share it; a single landing is a batch of
-- one). Older rows, and landings made without the queue, have neither.
ALTER TABLE landed ADD COLUMN run_id bigint REFERENCES verify_jobs (id);
ALTER TABLE landed ADD COLUMN batch_id bigint REFERENCES landing_intents (id);
CREATE INDEX landed_batch ON landed (batch_id) WHERE batch_id IS NOT NULL;
