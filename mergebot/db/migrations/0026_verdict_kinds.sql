-- Every rejected candidate records its verdict's kind (issue 42). Rows from before kinds were recorded (0009) were
-- classified each time they were read, by the first words of their reason; this writes that classification onto
-- them once, so nothing reads a kind from a sentence again. Data only: the schema does not change.
--
-- The classification is the one mergebot.landing.verdicts applied until now, in its order. A reason that starts
-- with "the check " and says " gave timeout" is check_timeout, " reached its disk limit" disk_limit, " reached its
-- memory limit" memory_limit; one that starts with "conflicts with " is conflict, "nothing to land"
-- nothing_to_land, "the verifier could not run" verifier_error; any other (a check that failed, no reason) is
-- check_failed. A row whose verdict already names a kind of that time keeps it; the verdict's other facts stay.
UPDATE candidates
SET verdict = CASE WHEN jsonb_typeof(verdict) = 'object' THEN verdict ELSE '{}'::jsonb END || jsonb_build_object(
    'kind', CASE
        WHEN starts_with(coalesce(reason, ''), 'the check ') AND strpos(reason, ' gave timeout') > 0
            THEN 'check_timeout'
        WHEN starts_with(coalesce(reason, ''), 'the check ') AND strpos(reason, ' reached its disk limit') > 0
            THEN 'disk_limit'
        WHEN starts_with(coalesce(reason, ''), 'the check ') AND strpos(reason, ' reached its memory limit') > 0
            THEN 'memory_limit'
        WHEN starts_with(coalesce(reason, ''), 'conflicts with ') THEN 'conflict'
        WHEN starts_with(coalesce(reason, ''), 'nothing to land') THEN 'nothing_to_land'
        WHEN starts_with(coalesce(reason, ''), 'the verifier could not run') THEN 'verifier_error'
        ELSE 'check_failed'
    END)
WHERE status = 'rejected'
  AND coalesce(verdict ->> 'kind', '') <> ALL (ARRAY[
    'queued', 'verifying', 'landing', 'landed', 'pre_existing', 'conflict', 'nothing_to_land', 'check_failed',
    'check_timeout', 'disk_limit', 'memory_limit', 'tests_weakened', 'no_report', 'report_flood', 'acceptance_failed',
    'tests_changed', 'held_out_failed', 'flaky_then_failed', 'verifier_error', 'superseded', 'cancelled',
    'protected_ref', 'unknown_subtask', 'not_owner', 'stale_claim', 'landing_now', 'not_running', 'too_large',
    'history_anomaly', 'check_config', 'protected_path', 'outside_footprint', 'suspicious', 'duplicate',
    'claim_superseded', 'unchanged', 'push_failed']);
