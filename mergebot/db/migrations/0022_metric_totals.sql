-- /metrics kept as things happen (issue 33), not summed over the whole history at every scrape (1.4 s at 333,000
-- runs): a finished verify run adds itself to its (purpose, outcome, histogram bucket) total, a landed row to its
-- repository's, a lost lease to the leases' total. Each total only grows, as a counter must. The histogram's
-- bounds are ``metric_bounds()``'s, the same as ``mergebot.api.metrics.BUCKETS`` (a test holds them equal).
CREATE FUNCTION metric_bounds() RETURNS float8[] LANGUAGE sql IMMUTABLE AS $$
    SELECT ARRAY[1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0]::float8[]
$$;

-- How many bounds lie below a run of ``seconds`` (a run of exactly a bound's length is in that bound's bucket).
CREATE FUNCTION metric_below(seconds float8) RETURNS smallint LANGUAGE sql IMMUTABLE AS $$
    SELECT (cardinality(metric_bounds())
            - width_bucket(-seconds, ARRAY(SELECT -b FROM unnest(metric_bounds()) AS b ORDER BY b DESC)))::smallint
$$;

CREATE TABLE metric_run_totals (
    purpose  text NOT NULL,
    outcome  text NOT NULL,
    below    smallint NOT NULL,
    runs     bigint NOT NULL DEFAULT 0,
    seconds  float8 NOT NULL DEFAULT 0,
    PRIMARY KEY (purpose, outcome, below)
);
CREATE TABLE metric_landing_totals (
    repo     text NOT NULL,
    result   text NOT NULL,
    landings bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (repo, result)
);
CREATE TABLE metric_totals (
    name  text PRIMARY KEY,
    n     bigint NOT NULL DEFAULT 0
);

CREATE FUNCTION verify_jobs_metric() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    took float8;
BEGIN
    IF NEW.status = 'done' AND (TG_OP = 'INSERT' OR OLD.status IS DISTINCT FROM 'done')
       AND NEW.started_at IS NOT NULL AND NEW.finished_at IS NOT NULL THEN
        took := extract(epoch FROM NEW.finished_at - NEW.started_at);
        INSERT INTO metric_run_totals AS t (purpose, outcome, below, runs, seconds)
        VALUES (NEW.purpose, coalesce(NEW.outcome, 'none'), metric_below(took), 1, took)
        ON CONFLICT (purpose, outcome, below) DO UPDATE SET runs = t.runs + 1, seconds = t.seconds + EXCLUDED.seconds;
    END IF;
    IF NEW.leases_lost > (CASE WHEN TG_OP = 'INSERT' THEN 0 ELSE OLD.leases_lost END) THEN
        INSERT INTO metric_totals AS t (name, n)
        VALUES ('verify_leases_lost', NEW.leases_lost - (CASE WHEN TG_OP = 'INSERT' THEN 0 ELSE OLD.leases_lost END))
        ON CONFLICT (name) DO UPDATE SET n = t.n + EXCLUDED.n;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER verify_jobs_metric AFTER INSERT OR UPDATE OF status, leases_lost ON verify_jobs
    FOR EACH ROW EXECUTE FUNCTION verify_jobs_metric();

CREATE FUNCTION landed_metric() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO metric_landing_totals AS t (repo, result, landings) VALUES (NEW.repo, NEW.verifier_result, 1)
    ON CONFLICT (repo, result) DO UPDATE SET landings = t.landings + 1;
    RETURN NULL;
END $$;
CREATE TRIGGER landed_metric AFTER INSERT ON landed FOR EACH ROW EXECUTE FUNCTION landed_metric();

-- What happened before this migration, counted once.
INSERT INTO metric_run_totals (purpose, outcome, below, runs, seconds)
SELECT purpose, coalesce(outcome, 'none'), metric_below(extract(epoch FROM finished_at - started_at)), count(*),
       sum(extract(epoch FROM finished_at - started_at))
FROM verify_jobs WHERE status = 'done' AND started_at IS NOT NULL AND finished_at IS NOT NULL
GROUP BY 1, 2, 3;
INSERT INTO metric_landing_totals (repo, result, landings)
SELECT repo, verifier_result, count(*) FROM landed GROUP BY 1, 2;
INSERT INTO metric_totals (name, n) SELECT 'verify_leases_lost', coalesce(sum(leases_lost), 0) FROM verify_jobs;

-- The queue's depth by repository and status reads only the live candidates.
CREATE INDEX candidates_live ON candidates (repo, status) WHERE status IN ('queued', 'verifying', 'landing', 'parked');
