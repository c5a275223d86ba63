-- Landings that know who is likely to fail (issue 34): each candidate's estimated failure probability and what it
-- rests on (``mergebot.landing.risk``), how often a later candidate was taken before it (no one starves behind
-- safer work), whether a repository's queue uses the estimate, and which policy landed each landed row.
ALTER TABLE candidates ADD COLUMN failure_risk real CHECK (failure_risk BETWEEN 0 AND 1);
ALTER TABLE candidates ADD COLUMN risk_facts jsonb;
ALTER TABLE candidates ADD COLUMN passed_over integer NOT NULL DEFAULT 0 CHECK (passed_over >= 0);
ALTER TABLE repos ADD COLUMN risk_aware boolean NOT NULL DEFAULT true;
ALTER TABLE landed ADD COLUMN policy text CHECK (length(policy) <= 100);
-- The recent finished candidates of a repository, newest first: the risk facts read the last few hundred.
CREATE INDEX candidates_finished_recent ON candidates (repo, id DESC) WHERE status IN ('landed', 'rejected');
CREATE INDEX candidates_owner_finished ON candidates (owner_id, repo, id DESC) WHERE status IN ('landed', 'rejected');
