-- Queue rules per repository (issue 42): the speculation window (0: as wide as the verifier slots), the largest
-- batch one run covers, and whether a failed check runs once more. NULL: the server's default
-- (MERGEBOT_SPECULATION_WINDOW, MERGEBOT_BATCH_SIZE, MERGEBOT_RETRY_FAILED_CHECKS).
ALTER TABLE repos ADD COLUMN speculation_window integer CHECK (speculation_window BETWEEN 0 AND 64);
ALTER TABLE repos ADD COLUMN batch_size integer CHECK (batch_size BETWEEN 1 AND 64);
ALTER TABLE repos ADD COLUMN retry_failed_checks boolean;
