-- Admission control at claim time (issue 45, mergebot.landing.intake.admission): each lane's (repository's) last
-- decision, written only when it changes, so every replica answers from the same state and a lane that refuses
-- admits again only below its low mark (hysteresis); with what it measured then and the claims it refused since.
CREATE TABLE admission_lanes (
    repo              text PRIMARY KEY REFERENCES repos (name),
    admitting         boolean NOT NULL DEFAULT true,
    changed_at        timestamptz NOT NULL DEFAULT now(),
    backlog_seconds   float8 NOT NULL DEFAULT 0,
    threshold_seconds float8 NOT NULL DEFAULT 0,
    refusals          bigint NOT NULL DEFAULT 0 CHECK (refusals >= 0)
);
-- A repository's finished runs, newest first: the length of its next run is predicted from its last ones, and the
-- verifiers' capacity measured from the runs of the last minutes.
CREATE INDEX verify_jobs_repo_finished ON verify_jobs (repo, finished_at DESC) WHERE finished_at IS NOT NULL AND NOT is_group;
