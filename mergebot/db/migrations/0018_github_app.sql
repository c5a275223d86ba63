-- GitHub App authentication (issue 33): a repository on GitHub may authenticate as an App installation instead of
-- with a personal token. The App's private key is named by its environment variable, never stored; the
-- installation is found from the repository when it is not given.
ALTER TABLE repos ADD COLUMN github_app_id bigint CHECK (github_app_id > 0);
ALTER TABLE repos ADD COLUMN github_app_key_env text CHECK (github_app_key_env ~ '^[A-Z_][A-Z0-9_]{0,99}$');
ALTER TABLE repos ADD COLUMN github_installation_id bigint CHECK (github_installation_id > 0);
ALTER TABLE repos ADD CONSTRAINT github_app_complete CHECK (
    (github_app_id IS NULL) = (github_app_key_env IS NULL)
    AND (github_installation_id IS NULL OR github_app_id IS NOT NULL)
    AND (github_app_id IS NULL OR forge = 'github'));
