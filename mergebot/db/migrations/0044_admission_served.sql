-- Admission's line ordered by the verifiers' time each agent had (issue 45, rules 6 and 7 of
-- mergebot.landing.intake.admission), not by its claims alone: at 100 agents offering 10x the claims (Jain 0.988)
-- and landings (0.989) per agent were even, but the verifier-seconds were not (0.870): a candidate run alone cost its
-- agent a whole run, one in a batch of four a quarter, and half the seconds went to runs of one candidate. An
-- agent's account is kept in runs of the lane's predicted length (``predicted_run``): ``charged``, its share of
-- every run started for its candidates, added as each run ends (each run's seconds split evenly over the candidates
-- it was started for, ``covers``, else its one candidate); ``pending``, its claims let in whose work no run has
-- charged yet (one added per claim admission let in, one taken back at the first charge of a candidate of its,
-- never below 0). Served = charged + pending: a claim counts at once as one predicted run, and is settled to what
-- its runs cost as they end. ``admission_charged`` lists the candidates whose first charge was taken: a table of
-- its own, not a column of ``candidates``, so a worker's report never waits on (or holds) a candidate's row while
-- the queue lands or cuts it (both lock in their own order: a deadlock), and touches only rows nothing else locks
-- but claims, one agent's row at a time.
ALTER TABLE admission_agents ADD COLUMN charged float8 NOT NULL DEFAULT 0;
ALTER TABLE admission_agents ADD COLUMN pending bigint NOT NULL DEFAULT 0 CHECK (pending >= 0);
CREATE TABLE admission_charged (
    candidate_id bigint PRIMARY KEY
);

CREATE FUNCTION admission_charge_run() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    members bigint[] := array_remove(coalesce(NEW.covers, ARRAY[NEW.candidate_id]), NULL);
    share float8;
BEGIN
    IF cardinality(members) = 0 THEN
        RETURN NULL;
    END IF;
    SELECT greatest(0, extract(epoch FROM NEW.finished_at - NEW.started_at))::float8 / cardinality(members)
           / greatest(p.seconds, 0.001)
    INTO share FROM predicted_run(NEW.repo) p;
    -- keys and rows taken in ascending order, so two reports ending at once wait for each other, never in a ring
    WITH firsts AS (
        INSERT INTO admission_charged (candidate_id)
        SELECT m FROM unnest(members) AS m ORDER BY m
        ON CONFLICT (candidate_id) DO NOTHING RETURNING candidate_id
    ), owed AS (
        SELECT c.owner_id, sum(share) AS runs, count(f.candidate_id) AS settled
        FROM candidates c LEFT JOIN firsts f ON f.candidate_id = c.id
        WHERE c.id = ANY (members)
        GROUP BY c.owner_id
    )
    INSERT INTO admission_agents AS a (agent_id, charged)
    SELECT owner_id, runs FROM owed ORDER BY owner_id
    ON CONFLICT (agent_id) DO UPDATE
    SET charged = a.charged + EXCLUDED.charged,
        pending = greatest(0, a.pending - (SELECT o.settled FROM owed o WHERE o.owner_id = a.agent_id));
    RETURN NULL;
END $$;

-- A run ends (done, cancelled, or given up): its seconds go to the accounts of the agents it was started for.
CREATE TRIGGER verify_jobs_charge_run AFTER UPDATE OF finished_at ON verify_jobs
    FOR EACH ROW WHEN (OLD.finished_at IS NULL AND NEW.finished_at IS NOT NULL AND NEW.started_at IS NOT NULL
                       AND NEW.candidate_id IS NOT NULL AND NOT NEW.is_group)
    EXECUTE FUNCTION admission_charge_run();
