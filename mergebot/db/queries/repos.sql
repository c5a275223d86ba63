-- Repositories (mergebot/db/repos.py): their rules, held-out checks, pause and red main.
-- Named queries under "-- name: NAME" headers, loaded with every file of this folder (mergebot.db.queries).

-- name: repo_create
-- A repository and its rules (``mergebot.rules.Rules``: every rule given, its default filled in).
INSERT INTO repos (name, root_sha, forge, forge_repo, forge_api_url, forge_git_url, webhook_secret_env,
                   forge_token_env, github_app_id, github_app_key_env, github_installation_id,
                   target_branch, verifier_command, verifier_timeout_s, protected_paths, max_push_bytes,
                   max_file_bytes, footprint_refuse, cache_paths, cache_key, setup_command, setup_network,
                   post_land_command, sandbox_paths, disk_limit_mb, memory_limit_mb, report, check_config,
                   held_out_command, old_tests, risk_aware, test_paths, suspicious, speculation_window, batch_size,
                   retry_failed_checks, merge_method, require_approval, checks, on_unattested, union_merge)
VALUES (%(name)s, %(root_sha)s, %(forge)s, %(forge_repo)s, %(forge_api_url)s, %(forge_git_url)s,
        %(webhook_secret_env)s, %(forge_token_env)s, %(github_app_id)s, %(github_app_key_env)s,
        %(github_installation_id)s,
        %(target_branch)s, %(verifier_command)s, %(verifier_timeout_s)s, %(protected_paths)s, %(max_push_bytes)s,
        %(max_file_bytes)s, %(footprint_refuse)s, %(cache_paths)s, %(cache_key)s, %(setup_command)s,
        %(setup_network)s, %(post_land_command)s, %(sandbox_paths)s, %(disk_limit_mb)s, %(memory_limit_mb)s,
        %(report)s, %(check_config)s, %(held_out_command)s, %(old_tests)s, %(risk_aware)s, %(test_paths)s,
        %(suspicious)s, %(speculation_window)s, %(batch_size)s, %(retry_failed_checks)s, %(merge_method)s,
        %(require_approval)s::text[], %(checks)s, %(on_unattested)s, %(union_merge)s::text[])
RETURNING *;

-- name: repo_update
-- Change a repository's rules (``mergebot.rules.RulesChange``): a NULL leaves that rule as it is; a rule named in
-- ``reset`` goes back to NULL (no setup, main checked by the verifier command, the server's queue rules).
UPDATE repos SET
    verifier_command = coalesce(%(verifier_command)s, verifier_command),
    verifier_timeout_s = coalesce(%(verifier_timeout_s)s, verifier_timeout_s),
    protected_paths = coalesce(%(protected_paths)s::text[], protected_paths),
    footprint_refuse = coalesce(%(footprint_refuse)s, footprint_refuse),
    cache_paths = coalesce(%(cache_paths)s::text[], cache_paths),
    cache_key = coalesce(%(cache_key)s::text[], cache_key),
    setup_command = CASE WHEN 'setup_command' = ANY(%(reset)s::text[]) THEN NULL
                         ELSE coalesce(%(setup_command)s, setup_command) END,
    setup_network = coalesce(%(setup_network)s, setup_network),
    post_land_command = CASE WHEN 'post_land_command' = ANY(%(reset)s::text[]) THEN NULL
                             ELSE coalesce(%(post_land_command)s, post_land_command) END,
    sandbox_paths = coalesce(%(sandbox_paths)s::text[], sandbox_paths),
    disk_limit_mb = coalesce(%(disk_limit_mb)s::integer, disk_limit_mb),
    memory_limit_mb = coalesce(%(memory_limit_mb)s::integer, memory_limit_mb),
    report = coalesce(%(report)s::text, report),
    check_config = coalesce(%(check_config)s::text[], check_config),
    held_out_command = coalesce(%(held_out_command)s::text, held_out_command),
    old_tests = coalesce(%(old_tests)s::text, old_tests),
    risk_aware = coalesce(%(risk_aware)s::boolean, risk_aware),
    test_paths = coalesce(%(test_paths)s::text[], test_paths),
    suspicious = coalesce(%(suspicious)s::text, suspicious),
    speculation_window = CASE WHEN 'speculation_window' = ANY(%(reset)s::text[]) THEN NULL
                              ELSE coalesce(%(speculation_window)s::integer, speculation_window) END,
    batch_size = CASE WHEN 'batch_size' = ANY(%(reset)s::text[]) THEN NULL
                      ELSE coalesce(%(batch_size)s::integer, batch_size) END,
    retry_failed_checks = CASE WHEN 'retry_failed_checks' = ANY(%(reset)s::text[]) THEN NULL
                               ELSE coalesce(%(retry_failed_checks)s::boolean, retry_failed_checks) END,
    merge_method = coalesce(%(merge_method)s::text, merge_method),
    require_approval = CASE WHEN 'require_approval' = ANY(%(reset)s::text[]) THEN NULL
                            ELSE coalesce(%(require_approval)s::text[], require_approval) END,
    checks = coalesce(%(checks)s::jsonb, checks),
    on_unattested = coalesce(%(on_unattested)s::text, on_unattested),
    union_merge = coalesce(%(union_merge)s::text[], union_merge)
WHERE name = %(name)s
RETURNING *;

-- name: held_out_clear
DELETE FROM held_out_files WHERE repo = %(repo)s;

-- name: held_out_insert
INSERT INTO held_out_files (repo, path, content) VALUES (%(repo)s, %(path)s, %(content)s);

-- name: held_out_get
SELECT path, content FROM held_out_files WHERE repo = %(repo)s ORDER BY path;

-- name: held_out_count
SELECT count(*) AS n FROM held_out_files WHERE repo = %(repo)s;

-- name: repo_get
SELECT * FROM repos WHERE name = %(name)s;

-- name: repo_list
SELECT * FROM repos ORDER BY name;

-- name: forge_repos
SELECT * FROM repos WHERE forge = ANY(%(forges)s::text[]) ORDER BY name;

-- name: repo_set_paused
-- An admin's resume also ends a given-up mend's wait: it is tried again; and it says the admin saw the commits of
-- main that no landing statement explains (the audit's finding is cleared; a new one is found anew).
UPDATE repos SET paused = %(paused)s, paused_reason = %(reason)s,
                 mend_given_up = CASE WHEN %(paused)s THEN mend_given_up END,
                 unattested = CASE WHEN %(paused)s THEN unattested END
WHERE name = %(name)s RETURNING *;

-- name: repo_set_red
UPDATE repos SET red_since = %(sha)s, paused_reason = %(reason)s WHERE name = %(name)s RETURNING *;

-- name: candidates_unpark
UPDATE candidates SET status = 'queued', reason = NULL, started_at = NULL
WHERE repo = %(repo)s AND status = 'parked'
RETURNING id;

-- name: repo_audited
-- The audit of main walked to ``head``; ``unattested`` (NULL: unchanged) is what it found that no admin has seen.
UPDATE repos SET audited_head = %(head)s, unattested = coalesce(%(unattested)s::jsonb, unattested)
WHERE name = %(name)s;

-- name: repos_unattested
-- Repositories whose main holds commits no landing statement explains, not yet seen by an admin (/healthz).
SELECT name, unattested FROM repos WHERE unattested IS NOT NULL ORDER BY name;
