-- A candidate's fence as one SQL function (issue 42): the statement that takes the next candidate and the window's
-- checks of its candidates in flight judged it apart (one in SQL, one in Python); now both call this.
-- A candidate's fence: NULL while its subtask still waits on exactly it (the same owner and claim version,
-- submitted, with this sha), else why not. One rule for the statement that takes the next candidate
-- (``candidate_next``) and for the window's checks of the candidates in flight (``candidate_fences``); the
-- sentences are the caller's (``mergebot.messages.queue.FENCE_WORDS``: ``gone``, ``reclaimed`` with
-- ``{claim_version}``, ``status`` with ``{status}``, ``replaced``). ``s`` is all NULL when the subtask is gone.
CREATE FUNCTION candidate_unfenced(q candidates, s subtasks, words jsonb) RETURNS text LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN s.id IS NULL THEN words ->> 'gone'
                WHEN s.claim_version <> q.claim_version OR s.owner_id IS DISTINCT FROM q.owner_id
                    THEN replace(words ->> 'reclaimed', '{claim_version}', s.claim_version::text)
                WHEN s.status <> 'submitted' THEN replace(words ->> 'status', '{status}', s.status::text)
                WHEN s.candidate_sha IS DISTINCT FROM q.sha THEN words ->> 'replaced'
           END
$$;
