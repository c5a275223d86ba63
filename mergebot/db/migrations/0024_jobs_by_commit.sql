-- Replicas without a shared disk (issue 35): a queue branch on the forge is deleted once every job naming its
-- commit has ended (``landing.shared.tidy``), which looks the jobs up by commit.
CREATE INDEX verify_jobs_commit ON verify_jobs (repo, commit_sha);
