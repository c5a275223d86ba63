-- Fair order within a priority (issue 45, ``mergebot.landing.window.fair``): start-time fair queuing of the
-- verifier among the agents that push, in predicted verifier-seconds. Per repository, a virtual clock (the start
-- tag of the queue's fair frontier) and, per agent, the finish tag of its last candidate taken (the service it
-- has had); each candidate keeps the start tag it was given when first taken, so a candidate the window puts back
-- keeps its place and is not charged twice.
CREATE TABLE fair_clocks (
    repo  text PRIMARY KEY REFERENCES repos (name),
    vtime double precision NOT NULL DEFAULT 0 CHECK (vtime >= 0)
);
CREATE TABLE fair_accounts (
    repo     text NOT NULL REFERENCES repos (name),
    owner_id bigint NOT NULL REFERENCES agents (id),
    served   double precision NOT NULL DEFAULT 0 CHECK (served >= 0),
    PRIMARY KEY (repo, owner_id)
);
ALTER TABLE candidates ADD COLUMN fair_start double precision;
-- The check's recent durations for a repository (the cost a candidate is predicted to take): its newest finished
-- candidate runs.
CREATE INDEX verify_jobs_candidate_runs ON verify_jobs (repo, id)
    WHERE purpose = 'candidate' AND parent_id IS NULL AND finished_at IS NOT NULL;
