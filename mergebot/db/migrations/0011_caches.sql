-- Warm, poison-proof caches for checks (issue 19).
-- A repository's cache paths inside the checkout and the files whose content keys the cache (lockfiles).
ALTER TABLE repos ADD COLUMN cache_paths text[] NOT NULL DEFAULT '{}' CHECK (cardinality(cache_paths) <= 20);
ALTER TABLE repos ADD COLUMN cache_key text[] NOT NULL DEFAULT '{}' CHECK (cardinality(cache_key) <= 20);

-- A verify job's cache request: {"paths", "key_files", "write"} (write: the commit is on main).
ALTER TABLE verify_jobs ADD COLUMN cache jsonb;
