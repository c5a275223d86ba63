-- Landings that know who is likely to fail (issue 34): each candidate's estimated failure probability and what it
-- rests on (``mergebot.landing.risk``), how often a later candidate was taken before it (no one starves behind
-- safer work), whether a repository's queue uses the estimate, and which policy landed each landed row.
ALTER TABLE candidates ADD COLUMN failure_risk real CHECK (failure_risk BETWEEN 0 AND 1);
ALTER TABLE candidates ADD COLUMN risk_facts jsonb;
ALTER TABLE candidates ADD COLUMN passed_over integer NOT NULL DEFAULT 0 CHECK (passed_over >= 0);
ALTER TABLE repos ADD COLUMN risk_aware boolean NOT NULL DEFAULT true;
ALTER TABLE landed ADD COLUMN policy text CHECK (length(policy) <= 100);
-- A repository's candidates, newest first: the risk facts read the last two thousand.
CREATE INDEX candidates_repo_recent ON candidates (repo, id DESC);
CREATE INDEX candidates_owner_finished ON candidates (owner_id, repo, id DESC) WHERE status IN ('landed', 'rejected');
-- Where the second goes (issue 34): when the push reached the bot (its receive-pack request, or the forge's
-- delivery) and when the queue last merged the candidate for a run; the other stages are the queue's own columns
-- and the deciding run's (``candidate_stages``).
ALTER TABLE candidates ADD COLUMN pushed_at timestamptz;
ALTER TABLE candidates ADD COLUMN merged_at timestamptz;
-- A red main's mend that gave up stays given up (not tried again at every start) until main moves or an admin
-- resumes the repository: main's head when it gave up.
ALTER TABLE repos ADD COLUMN mend_given_up text;
