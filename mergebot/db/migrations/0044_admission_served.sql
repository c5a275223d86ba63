-- Admission's line ordered by the verifiers' time each agent had (issue 45, rules 6 and 7 of
-- mergebot.landing.intake.admission), not by its claims alone: at 100 agents offering 10x the claims (Jain 0.988)
-- and landings (0.989) per agent were even, but the verifier-seconds were not (0.870): a candidate run alone cost its
-- agent a whole run, one in a batch of four a quarter, and half the seconds went to runs of one candidate.
-- ``admission_agents.charged``: the verifier-seconds of every run started for the agent's candidates (any purpose:
-- a retry, a check of main for its failure, its held-out tests are its cost too), each run's seconds split evenly
-- over the candidates it covers (``covers``, else its one candidate), added when a run that was running ends. A
-- claim admission let in counts as one predicted run until a run charges its work (read live, in
-- ``admission_standing``: its ``admission_claims`` row not yet ``settled``, its subtask still the agent's, running or
-- submitted), so a claim released, lapsed or cancelled before any run costs nothing, and one claim's second push
-- settles nothing more.
ALTER TABLE admission_agents ADD COLUMN charged float8 NOT NULL DEFAULT 0;
ALTER TABLE admission_claims ADD COLUMN agent_id bigint;
ALTER TABLE admission_claims ADD COLUMN settled boolean NOT NULL DEFAULT false;
CREATE INDEX admission_claims_pending ON admission_claims (agent_id) WHERE NOT settled;

-- One statement's ended runs at once (a sweep may end many): the claims settled, then the agents charged, each in
-- ascending order, so two statements ending runs at once, or one and a claim (its claim row, then its agent's),
-- wait for each other and never in a ring.
CREATE FUNCTION admission_charge_runs() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    subs bigint[];
    owners bigint[];
    seconds float8[];
BEGIN
    -- each ended run's share per candidate it covers: (its subtask, its owner, seconds); none when nothing ended
    -- (a lease renewed, a run claimed)
    SELECT array_agg(c.subtask_id), array_agg(c.owner_id),
           array_agg(greatest(0, extract(epoch FROM n.finished_at - n.started_at))::float8 / cardinality(r.members))
    INTO subs, owners, seconds
    FROM ended_new n JOIN ended_old o ON o.id = n.id
    CROSS JOIN LATERAL (SELECT array_remove(coalesce(n.covers, ARRAY[n.candidate_id]), NULL) AS members) r
    CROSS JOIN LATERAL unnest(r.members) AS m
    JOIN candidates c ON c.id = m
    WHERE o.finished_at IS NULL AND o.status = 'running' AND n.finished_at IS NOT NULL
      AND n.started_at IS NOT NULL AND n.candidate_id IS NOT NULL AND NOT n.is_group;
    IF subs IS NULL THEN
        RETURN NULL;
    END IF;
    PERFORM 1 FROM admission_claims WHERE subtask_id = ANY (subs) AND NOT settled ORDER BY subtask_id FOR UPDATE;
    UPDATE admission_claims SET settled = true WHERE subtask_id = ANY (subs) AND NOT settled;
    INSERT INTO admission_agents AS a (agent_id, charged)
    SELECT owner, sum(share) FROM unnest(owners, seconds) AS s(owner, share) GROUP BY owner ORDER BY owner
    ON CONFLICT (agent_id) DO UPDATE SET charged = a.charged + EXCLUDED.charged;
    RETURN NULL;
END $$;

CREATE TRIGGER verify_jobs_charge_runs AFTER UPDATE ON verify_jobs
    REFERENCING OLD TABLE AS ended_old NEW TABLE AS ended_new
    FOR EACH STATEMENT EXECUTE FUNCTION admission_charge_runs();
