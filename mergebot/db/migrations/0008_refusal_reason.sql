-- The reason a refusal is counted (/metrics) and shown (mergebot queue) under, in one place: a push refused
-- at push time by its rule's code, a forge push ignored by why, a reused delivery id, and a candidate the queue
-- rejected by the kind its event records (older events, written before the kind was, by their reason's first
-- words, which mergebot.landing.messages keeps stable).
CREATE FUNCTION refusal_reason(kind text, detail jsonb) RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE kind
        WHEN 'push_refused' THEN coalesce(detail->>'code', 'refused')
        WHEN 'push_ignored' THEN replace(coalesce(detail->>'why', 'ignored'), ' ', '_')
        WHEN 'webhook_refused' THEN 'delivery_id_reused'
        ELSE coalesce(detail->>'kind', CASE
            WHEN detail->>'reason' LIKE 'conflicts with %' THEN 'conflict'
            WHEN detail->>'reason' LIKE 'nothing to land%' THEN 'nothing_to_land'
            WHEN detail->>'reason' LIKE 'the verifier could not run%' THEN 'verifier_error'
            WHEN detail->>'reason' LIKE 'the check % gave timeout%' THEN 'check_timeout'
            WHEN detail->>'reason' LIKE 'the check %' THEN 'check_failed'
            ELSE 'other'
        END)
    END
$$;
