-- Counters that never go down (issue 33): a verify job's lost leases are counted as they are lost, not derived
-- from its status afterwards (a job cancelled while queued after an expiry was counted one short, so the counter
-- fell). The rows already there are counted as the old rule did.
ALTER TABLE verify_jobs ADD COLUMN leases_lost integer NOT NULL DEFAULT 0 CHECK (leases_lost >= 0);
UPDATE verify_jobs SET leases_lost = CASE
    WHEN status = 'queued' THEN attempts
    WHEN status = 'done' AND result->>'error' = 'every worker that took this job lost its lease' THEN attempts
    ELSE greatest(attempts - 1, 0) END
WHERE attempts > 0;
