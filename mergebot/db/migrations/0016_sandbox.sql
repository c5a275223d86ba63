-- A sandbox that shows a check only what it needs (issue 31).
-- A repository's own read-only paths for its checks' view (a toolchain outside the usual places), what one run
-- may write in all (its overlay, /tmp and /dev/shm) and the memory it may use (resident, and address space per
-- process), in MiB.
ALTER TABLE repos ADD COLUMN sandbox_paths text[] NOT NULL DEFAULT '{}' CHECK (cardinality(sandbox_paths) <= 50);
ALTER TABLE repos ADD COLUMN disk_limit_mb integer NOT NULL DEFAULT 2048 CHECK (disk_limit_mb BETWEEN 16 AND 1048576);
ALTER TABLE repos ADD COLUMN memory_limit_mb integer NOT NULL DEFAULT 4096
    CHECK (memory_limit_mb BETWEEN 64 AND 1048576);

-- A verify job's sandbox: {"paths": [...], "disk_limit_mb": N, "memory_mb": N}, copied from its repository when it
-- is queued.
ALTER TABLE verify_jobs ADD COLUMN sandbox jsonb;

-- How the deciding run was confined, on the landed record: the sandbox (bwrap or none) and how each limit was
-- enforced ("cpu=cgroup memory=cgroup disk=tmpfs pids=cgroup").
ALTER TABLE landed ADD COLUMN verifier_sandbox text;
ALTER TABLE landed ADD COLUMN verifier_limits text;
