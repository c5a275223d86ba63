-- A cancelled subtask's leftover candidates are cancelled, and say so. The fence named the cancel "reclaimed" (a
-- cancel drops the owner, so the owner test came first) and every path that drops an unfenced candidate wrote
-- ``superseded``: an agent waiting on its push was told a newer push replaced it, and a lead's cancel read as a
-- lost claim. A cancel is final (no transition leaves ``cancelled``), so whatever of the subtask is still queued or
-- in flight is dropped because of it: the fence says so first (``cancelled`` with the lead's ``{reason}``), and
-- ``candidate_dropped`` names the status every such drop writes.
CREATE OR REPLACE FUNCTION candidate_unfenced(q candidates, s subtasks, words jsonb) RETURNS text
    LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN s.id IS NULL THEN words ->> 'gone'
                WHEN s.status = 'cancelled'
                    THEN replace(words ->> 'cancelled', '{reason}', coalesce(s.status_reason, ''))
                WHEN s.claim_version <> q.claim_version OR s.owner_id IS DISTINCT FROM q.owner_id
                    THEN replace(words ->> 'reclaimed', '{claim_version}', s.claim_version::text)
                WHEN s.status <> 'submitted' THEN replace(words ->> 'status', '{status}', s.status::text)
                WHEN s.candidate_sha IS DISTINCT FROM q.sha THEN words ->> 'replaced'
           END
$$;

-- The status a candidate that no longer holds its fence ends in: ``cancelled`` when its subtask was cancelled,
-- else ``superseded`` (reclaimed, replaced by a newer push, released, gone).
CREATE FUNCTION candidate_dropped(subtask_id bigint) RETURNS candidate_status LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN EXISTS (SELECT 1 FROM subtasks s
                             WHERE s.id = candidate_dropped.subtask_id AND s.status = 'cancelled')
                THEN 'cancelled' ELSE 'superseded' END::candidate_status
$$;
