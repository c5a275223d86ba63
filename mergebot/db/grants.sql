-- What the request-handling role may do (the API, the merge queue, the in-process verifier workers and the
-- recovery loop all run as it). Applied after the migrations, as the schema's owner, on every start; the
-- role owns nothing, so it cannot change the schema, drop or alter a trigger, truncate, or grant.
-- Every table of the schema must appear here (a test checks): a new table gets no access until it is listed.
-- {role} is the role's name (settings: database_app_role).

REVOKE ALL ON ALL TABLES IN SCHEMA public FROM {role};
REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM {role};
GRANT USAGE ON SCHEMA public TO {role};

-- Read-only: the migration log, the legal subtask transitions, and where each verify run's seconds are charged.
GRANT SELECT ON schema_migrations, subtask_transitions, run_charges TO {role};

-- The audit log is append-only: rows come from triggers and from the store, and are never changed.
GRANT SELECT, INSERT ON events TO {role};

-- An approval is given once and never changed.
GRANT SELECT, INSERT ON approvals TO {role};

-- A landed row is written once; afterwards only the post-land status of main changes.
GRANT SELECT, INSERT ON landed TO {role};
GRANT UPDATE (main_status) ON landed TO {role};

-- A signed statement is written once; afterwards only when it reached the repository's git notes.
GRANT SELECT, INSERT ON attestations TO {role};
GRANT UPDATE (noted_at) ON attestations TO {role};

-- Rows that change state through their life (no DELETE: nothing here is ever removed by the bot).
GRANT SELECT, INSERT, UPDATE ON
    agents, groups, assignments, subtasks, subtask_deps, notes, announcements, repos, candidates,
    landing_intents, reconcile_findings, verify_jobs, webhook_deliveries, forge_statuses, forge_check_runs,
    forge_pulls, metric_run_totals, metric_landing_totals, metric_totals
TO {role};

-- Linking a forge login can be undone, a subtask's acceptance tests and a repository's held-out checks replaced.
GRANT SELECT, INSERT, UPDATE, DELETE ON forge_links, acceptance_tests, held_out_files TO {role};

-- Identity columns draw from their sequences.
GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {role};

-- The fair order's clock and accounts (0038): kept by the statement that takes the next candidate.
GRANT SELECT, INSERT, UPDATE ON fair_clocks, fair_accounts TO {role};
-- Each lane's admission state (0037): written when it changes, and its refusals counted.
GRANT SELECT, INSERT, UPDATE ON admission_lanes, admission_agents, admission_claims TO {role};
