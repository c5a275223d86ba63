-- The trends on a long history (issue 22). The charts, the timeline and the cost of a window read runs and
-- candidates by when they finished (or, for the speculation window's width, when a run was queued): without
-- these, each of those pages read every run and candidate ever made (``bench/history.py`` measures them).
CREATE INDEX verify_jobs_finished ON verify_jobs (finished_at);
CREATE INDEX verify_jobs_width ON verify_jobs (created_at) WHERE window_width IS NOT NULL;
CREATE INDEX candidates_finished ON candidates (finished_at);
-- The run a landing names, and a subtask's standing landing (its latest, which the cost charges rework to):
-- looked up once per run read.
CREATE INDEX landed_run ON landed (run_id) WHERE run_id IS NOT NULL;
CREATE INDEX landed_standing ON landed (subtask_id, id DESC) WHERE kind = 'land';
-- Where each run's seconds are charged, in one place: the cost of a window (``view_cost_runs``) and the all-time
-- counters on /metrics (``metric_verifier_seconds``) both read it. One row per run a worker started and that
-- ended, or per member of the batch a run landed (``seconds`` is then the whole run's: readers split it):
--   main_check  - a landing's post-land check or a red main's bisection (the run names the landed row);
--   landing_run - the run that passed on the commit main moved to;
--   rework      - any other run of a candidate whose subtask landed (failed, retried, superseded, cancelled
--                 runs on the way): charged to that subtask's standing landing;
--   thrown_away - a run of a candidate whose subtask has not landed: charged to nobody's landing;
--   other       - runs of no candidate and no landing (manual checks).
CREATE VIEW run_charges AS
SELECT j.id AS run_id, j.repo, j.purpose, j.status::text AS status, j.finished_at,
       greatest(0, extract(epoch FROM j.finished_at - j.started_at))::float8 AS seconds,
       c.owner_id AS pusher_id, coalesce(ml.id, rl.id, sl.id) AS landed_id,
       CASE WHEN ml.id IS NOT NULL THEN 'main_check' WHEN rl.id IS NOT NULL THEN 'landing_run'
            WHEN sl.id IS NOT NULL THEN 'rework' WHEN c.id IS NOT NULL THEN 'thrown_away'
            ELSE 'other' END AS charge
FROM verify_jobs j
LEFT JOIN landed ml ON ml.id = j.landed_id
LEFT JOIN candidates c ON c.id = j.candidate_id
LEFT JOIN landed rl ON j.landed_id IS NULL AND rl.run_id = j.id
LEFT JOIN LATERAL (
    SELECT l.id FROM landed l
    WHERE c.id IS NOT NULL AND l.subtask_id = c.subtask_id AND l.kind = 'land'
      AND NOT EXISTS (SELECT 1 FROM landed rv WHERE rv.reverts = l.id)
    ORDER BY l.id DESC LIMIT 1
) sl ON j.landed_id IS NULL AND rl.id IS NULL
WHERE j.started_at IS NOT NULL AND j.finished_at IS NOT NULL;
