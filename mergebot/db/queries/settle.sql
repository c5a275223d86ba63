-- Settling a landing intent (``mergebot.db.settle``), in the transaction that holds its row locked.

-- name: intent_resolve
UPDATE landing_intents SET status = %(status)s::intent_status, resolved_at = now()
WHERE id = %(id)s AND status = 'pending'
RETURNING id;
