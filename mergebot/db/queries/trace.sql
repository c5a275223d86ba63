-- A finished run's record, read in order for the protocol's trace checker (mergebot.protocol.replay).

-- name: trace_events
-- The events after ``after``, in the order they were written (the status trigger writes in the transaction that
-- changed the row, so one subtask's events are in its order).
SELECT id, kind, subtask_id, from_status::text AS from_status, to_status::text AS to_status, claim_version,
       actor_id, detail
FROM events WHERE id > %(after)s ORDER BY id LIMIT %(limit)s;

-- name: trace_deps
SELECT subtask_id, array_agg(depends_on_id ORDER BY depends_on_id) AS depends_on
FROM subtask_deps GROUP BY subtask_id;

-- name: trace_pending_intents
SELECT id FROM landing_intents WHERE status = 'pending' ORDER BY id;
