-- Warm, poison-proof caches for checks (issue 19).
-- A repository's cache paths inside the checkout and the files whose content keys the cache (lockfiles).
ALTER TABLE repos ADD COLUMN cache_paths text[] NOT NULL DEFAULT '{}' CHECK (cardinality(cache_paths) <= 20);
ALTER TABLE repos ADD COLUMN cache_key text[] NOT NULL DEFAULT '{}' CHECK (cardinality(cache_key) <= 20);

-- A setup step run before the check (installing dependencies, building), and whether it may use the network
-- (only ever on commits already on main).
ALTER TABLE repos ADD COLUMN setup_command text CHECK (length(setup_command) BETWEEN 1 AND 4000);
ALTER TABLE repos ADD COLUMN setup_network boolean NOT NULL DEFAULT false;

-- A verify job's cache request and setup: {"paths", "key_files", "write", "setup", "setup_network"} (write and
-- the setup's network: the commit is on main).
ALTER TABLE verify_jobs ADD COLUMN cache jsonb;

-- The cache generation the deciding run read (or wrote), on the landed record, so a reviewer's re-run can use it.
ALTER TABLE landed ADD COLUMN verifier_cache jsonb;
