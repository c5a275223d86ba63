-- The landing path (mergebot/db/landing.py): pushes, candidates in the queue, intents, landed rows, findings.
-- Named queries under "-- name: NAME" headers, loaded with every file of this folder (mergebot.db.queries).

-- name: subtask_land
-- Marks the subtask landed and writes its landed row, in one statement, fenced by owner and claim version.
-- Not by sha: main already holds this verified candidate of the current claim; a newer push that raced the
-- landing is superseded by it, never the other way round (main and the landed rows must agree).
WITH land AS (
    UPDATE subtasks
    SET status = 'landed', previous_owner_id = owner_id, owner_id = NULL, status_reason = NULL,
        candidate_sha = %(candidate_sha)s, updated_by = %(actor_id)s
    WHERE id = %(id)s AND owner_id = %(owner_id)s AND claim_version = %(claim_version)s
      AND status = 'submitted'
    RETURNING id, claim_version, previous_owner_id AS owner_id
)
INSERT INTO landed (subtask_id, claim_version, owner_id, repo, target_ref, candidate_sha, base_sha,
                    merged_sha, tree_sha, verifier_command, verifier_result, duration_ms, log_digest,
                    main_sha, batch_size, verifier_cache, batch_id, run_id, kind, reverts, verifier_sandbox,
                    verifier_limits, acceptance, tests_changed, policy, approved_by, union_merged)
SELECT land.id, land.claim_version, land.owner_id, %(repo)s, %(target_ref)s, %(candidate_sha)s,
       %(base_sha)s, %(merged_sha)s, %(tree_sha)s, %(verifier_command)s, %(verifier_result)s,
       %(duration_ms)s, %(log_digest)s, coalesce(%(main_sha)s, %(merged_sha)s), %(batch_size)s,
       %(verifier_cache)s::jsonb, i.id,
       -- the run: the last one that passed on exactly the commit main moved to (or on that commit with main's tests,
       -- the one the deciding run names), for the landing's own candidate
       (SELECT j.id FROM verify_jobs j
        WHERE j.candidate_id = i.candidate_id AND j.status = 'done' AND j.outcome = 'pass'
          AND j.purpose IN ('candidate', 'retry') AND j.parent_id IS NULL  -- named checks: the group, not one check
          AND j.commit_sha IN (i.new_sha, coalesce(i.evidence -> 'verifier' ->> 'commit_sha', i.new_sha))
        ORDER BY j.id DESC LIMIT 1),
       CASE WHEN c.reverts IS NULL THEN 'land' ELSE 'revert' END, c.reverts, %(verifier_sandbox)s,
       %(verifier_limits)s,
       (SELECT array_agg(a.path ORDER BY a.path) FROM acceptance_tests a WHERE a.subtask_id = land.id),
       %(tests_changed)s::text[], %(policy)s,
       -- who approved this very commit of the subtask (``approvals``), where the repository asked for it
       (SELECT array_agg(DISTINCT a.name ORDER BY a.name) FROM approvals ap JOIN agents a ON a.id = ap.approver_id
        WHERE ap.subtask_id = land.id AND ap.sha = %(candidate_sha)s),
       %(union_merged)s::text[]  -- the files whose conflicts its merge resolved by union
FROM land LEFT JOIN landing_intents i ON i.id = %(intent_id)s::bigint
          LEFT JOIN candidates c ON c.id = %(candidate_id)s::bigint
RETURNING *;

-- name: subtask_send_back
-- A revert of a landing has landed: the reverted subtask goes back to the owner who landed it, running at a new
-- claim version (its next landing is another row), with the revert's evidence as the reason.
WITH culprit AS (SELECT subtask_id, claim_version, owner_id FROM landed WHERE id = %(reverts)s)
UPDATE subtasks s
SET status = 'running', owner_id = culprit.owner_id, previous_owner_id = culprit.owner_id,
    claim_version = s.claim_version + 1, claimed_at = now(), heartbeat_at = now(),
    lease_expires_at = now() + make_interval(secs => %(lease_seconds)s), candidate_sha = NULL,
    status_reason = left(%(reason)s, 2000), updated_by = NULL
FROM culprit
WHERE s.id = culprit.subtask_id AND s.status = 'landed' AND s.claim_version = culprit.claim_version
RETURNING s.id, s.claim_version, s.owner_id;

-- name: dependents_lock
-- Lock the blocked dependents before deciding whether they are free: two dependencies landing at once then
-- take turns, and the second sees the first one committed (READ COMMITTED: a new snapshot per statement).
SELECT s.id FROM subtask_deps d JOIN subtasks s ON s.id = d.subtask_id
WHERE d.depends_on_id = %(id)s AND s.status = 'blocked'
ORDER BY s.id
FOR UPDATE OF s;

-- name: dependents_release
UPDATE subtasks s SET status = 'ready', updated_by = %(actor_id)s
WHERE s.id = ANY(%(ids)s::bigint[]) AND s.status = 'blocked'
  AND NOT EXISTS (
      SELECT 1 FROM subtask_deps d JOIN subtasks x ON x.id = d.depends_on_id
      WHERE d.subtask_id = s.id AND x.status <> 'landed'
  )
RETURNING s.id;

-- name: landed_get
SELECT l.*, a.name AS owner FROM landed l JOIN agents a ON a.id = l.owner_id WHERE l.id = %(id)s;

-- name: landed_list
SELECT l.*, a.name AS owner
FROM landed l JOIN agents a ON a.id = l.owner_id
WHERE (%(repo)s::text IS NULL OR l.repo = %(repo)s::text)
  AND (%(subtask_id)s::bigint IS NULL OR l.subtask_id = %(subtask_id)s::bigint)
  AND (%(owner)s::text IS NULL OR a.name = %(owner)s::text)
  AND (%(before_id)s::bigint IS NULL OR l.id < %(before_id)s::bigint)
ORDER BY l.id DESC
LIMIT %(limit)s;

-- name: subtask_owner_facts
SELECT s.id AS subtask_id, s.status::text AS status, s.owner_id, s.claim_version, s.paths, s.allow_check_changes,
       EXISTS (SELECT 1 FROM candidates c WHERE c.subtask_id = s.id AND c.status = 'landing') AS landing
FROM subtasks s WHERE s.id = ANY(%(ids)s::bigint[]);

-- name: candidate_twin
-- The same change (patch id) under another subtask: landed first, else the newest live candidate that its
-- subtask still waits on (a cancelled or reclaimed subtask's leftover candidate will never land: no twin).
SELECT c.id AS candidate_id, c.subtask_id, c.status::text AS status, c.sha, a.name AS owner,
       l.merged_sha AS landed_sha
FROM candidates c
JOIN agents a ON a.id = c.owner_id
JOIN subtasks s ON s.id = c.subtask_id
LEFT JOIN landed l ON l.subtask_id = c.subtask_id AND c.status = 'landed'
WHERE c.repo = %(repo)s AND c.patch_id = %(patch_id)s AND c.subtask_id <> %(subtask_id)s
  AND (c.status = 'landed'
       OR (c.status IN ('queued', 'verifying', 'landing', 'parked', 'awaiting_approval') AND s.status = 'submitted'
           AND s.claim_version = c.claim_version AND s.candidate_sha = c.sha))
ORDER BY (c.status = 'landed') DESC, c.id DESC
LIMIT 1;

-- name: subtask_submit_push
-- An accepted push submits the subtask (or replaces the candidate of an already submitted one), fenced.
UPDATE subtasks
SET status = 'submitted', candidate_sha = %(sha)s, lease_expires_at = NULL, status_reason = NULL,
    updated_by = %(owner_id)s
WHERE id = %(id)s AND owner_id = %(owner_id)s AND claim_version = %(claim_version)s
  AND status IN ('running', 'submitted')
RETURNING id;

-- name: candidates_supersede
-- A newer push for the same subtask replaces the older candidates still waiting (in the queue, or for an approval of
-- their commit: the new one needs an approval of its own).
UPDATE candidates SET status = 'superseded', reason = %(reason)s, finished_at = now()
WHERE subtask_id = %(subtask_id)s AND status IN ('queued', 'awaiting_approval')
RETURNING id;

-- name: candidate_insert
INSERT INTO candidates (repo, subtask_id, claim_version, owner_id, sha, ref, priority, patch_id, outside_footprint,
                        paths, failure_risk, risk_facts, pushed_at, suspicious)
SELECT %(repo)s, s.id, s.claim_version, s.owner_id, %(sha)s, %(ref)s, s.priority, %(patch_id)s,
       %(outside_footprint)s::text[], %(paths)s::text[], %(failure_risk)s, %(risk_facts)s::jsonb,
       coalesce(to_timestamp(%(pushed_at)s::float8), now()), %(suspicious)s::jsonb
FROM subtasks s WHERE s.id = %(subtask_id)s
RETURNING *;

-- name: subtask_push_lock
-- Serializes the acceptance of pushes for one subtask (a forge's push and pull-request events for one commit
-- may arrive at the same moment); released at commit.
SELECT pg_advisory_xact_lock(7243503, hashint8(%(subtask_id)s::bigint));

-- name: candidate_same_push
-- A live (or landed) candidate for exactly this push; a rejected or superseded one does not count: pushing that
-- commit again is a new attempt.
SELECT * FROM candidates
WHERE subtask_id = %(subtask_id)s AND claim_version = %(claim_version)s AND sha = %(sha)s
  AND status IN ('queued', 'verifying', 'landing', 'landed', 'parked', 'awaiting_approval')
ORDER BY id DESC LIMIT 1;

-- name: branch_tips_unaccounted
-- Subtask branch tips (subtask, claim version, sha) that no candidate accounts for, and whether a refusal of that
-- push is on record: accepted pushes whose post-receive step never ran, for the reconciler's sweep.
SELECT t.subtask_id, t.claim_version, t.sha,
       EXISTS (SELECT 1 FROM events e
               WHERE e.subtask_id = t.subtask_id AND e.kind = 'push_refused' AND e.claim_version = t.claim_version
                 AND e.detail->>'sha' = t.sha) AS refused
FROM unnest(%(subtask_ids)s::bigint[], %(versions)s::bigint[], %(shas)s::text[]) AS t(subtask_id, claim_version, sha)
WHERE NOT EXISTS (SELECT 1 FROM candidates c
                  WHERE c.subtask_id = t.subtask_id AND c.claim_version = t.claim_version AND c.sha = t.sha);

-- name: candidate_next
-- The queue leader takes the next candidate that still holds its fence: its subtask still waits on exactly it (the
-- same owner and claim version, submitted, with this sha). In the same statement every candidate the queue could
-- take that no longer holds its fence is superseded (cancelled, when its subtask was: ``candidate_dropped``) with
-- the reason why (the rule and its sentences:
-- ``candidate_unfenced`` with ``words``), so taking reads and writes once, never a fence read in Python and a write after it.
-- Of the fenced ones the order is ``mergebot.landing.window.fair``'s (its ``take``; tests/test_fair_queue.py holds
-- the two to one order): highest priority; then one passed over ``max_passes`` times (the oldest such first, so
-- none is passed over more than that); then the redo of a subtask that lost the most conflicts (its earlier pushes
-- rejected because another landing changed the same lines first: without this, a redo queued behind fresher pushes
-- on the same file lost again and again); then the least *tag*: its owner's service so far (``fair_accounts``), no
-- earlier than the repository's clock (``fair_clocks``), or the tag it was first taken at (``fair_start``), so
-- agents share the verifier in predicted verifier-seconds instead of one that pushed twenty changes going twenty
-- times first; then the one whose landing unblocks the most subtasks (its blocked dependents); then, where the
-- repository's queue is risk-aware, the one least likely to fail its check (``failure_risk``; unknown counts as the
-- middle); then arrival. Taken for the first time, it charges its owner its predicted cost (one run's predicted
-- verifier-seconds, ``predicted_run``, as admission control counts its backlog, times one plus its failure risk) from
-- its tag, and the clock moves up to the least tag waiting. Every older fenced queued candidate of the same priority
-- it goes before whose tag is no greater counts one more pass (one its owner's larger service puts after it is not
-- passed over). ``exclude``: candidates the window re-plans later (lanes). A candidate whose subtask depends on one
-- that is not landed (a reverted landing) is not taken.
-- A waiting reason ("waits for the candidates ahead of it") ends here: it is being verified now. A candidate that
-- waits for an approval is never taken, but it is superseded here too once it no longer holds its fence (its subtask
-- released, cancelled or reclaimed), so no approval can land it then and it does not wait forever.
WITH eligible AS (
    SELECT q.id, q.status = 'queued' AS queued, r.risk_aware, candidate_unfenced(q, s, %(words)s::jsonb) AS unfenced
    FROM candidates q JOIN repos r ON r.name = q.repo LEFT JOIN subtasks s ON s.id = q.subtask_id
    WHERE q.repo = %(repo)s AND q.status IN ('queued', 'awaiting_approval') AND NOT (q.id = ANY(%(exclude)s::bigint[]))
      -- a dependency that is no longer landed (its landing was reverted): wait until it lands again
      AND NOT EXISTS (SELECT 1 FROM subtask_deps d JOIN subtasks dep ON dep.id = d.depends_on_id
                      WHERE d.subtask_id = q.subtask_id AND dep.status <> 'landed')
), superseded AS (
    UPDATE candidates c SET status = candidate_dropped(c.subtask_id), reason = e.unfenced, verdict = NULL,
                            finished_at = now()
    FROM eligible e
    WHERE c.id = e.id AND e.unfenced IS NOT NULL AND c.status IN ('queued', 'awaiting_approval')
    RETURNING c.id
), clock AS (
    SELECT coalesce((SELECT vtime FROM fair_clocks WHERE repo = %(repo)s), 0) AS vtime,
           -- one run's predicted verifier-seconds, admission's too (``fair.predicted_seconds``)
           (SELECT p.seconds FROM predicted_run(%(repo)s) p) AS run_s
), tagged AS (
    SELECT q.id, q.priority, e.risk_aware, coalesce(q.fair_start, greatest(k.vtime, coalesce(a.served, 0))) AS tag,
           k.run_s * (1 + coalesce(q.failure_risk::float8, 0.5)) AS cost
    FROM candidates q JOIN eligible e ON e.id = q.id CROSS JOIN clock k
    LEFT JOIN fair_accounts a ON a.repo = q.repo AND a.owner_id = q.owner_id
    WHERE e.unfenced IS NULL AND e.queued
), pick AS (
    SELECT q.id, q.priority, q.owner_id, q.fair_start, t.tag, t.cost FROM candidates q JOIN tagged t ON t.id = q.id
    ORDER BY q.priority DESC,
             q.passed_over >= %(max_passes)s DESC,
             CASE WHEN q.passed_over >= %(max_passes)s THEN q.id END,
             (SELECT count(*) FROM candidates x
              WHERE x.subtask_id = q.subtask_id AND x.id < q.id AND x.status = 'rejected'
                AND x.verdict->>'kind' = 'conflict') DESC,
             t.tag,
             (SELECT count(*) FROM subtask_deps d JOIN subtasks b ON b.id = d.subtask_id
              WHERE d.depends_on_id = q.subtask_id AND b.status = 'blocked') DESC,
             CASE WHEN t.risk_aware THEN coalesce(q.failure_risk, 0.5) END,
             q.id
    LIMIT 1
    FOR UPDATE OF q SKIP LOCKED
), passed AS (
    UPDATE candidates o SET passed_over = o.passed_over + 1
    FROM pick, tagged t
    WHERE t.id = o.id AND o.id < pick.id AND t.priority = pick.priority AND t.tag <= pick.tag
), charged AS (
    INSERT INTO fair_accounts AS a (repo, owner_id, served)
    SELECT %(repo)s, pick.owner_id, pick.tag + pick.cost FROM pick WHERE pick.fair_start IS NULL
    ON CONFLICT (repo, owner_id) DO UPDATE SET served = EXCLUDED.served
), ticked AS (
    INSERT INTO fair_clocks AS f (repo, vtime)
    SELECT %(repo)s, (SELECT min(t.tag) FROM tagged t) FROM pick
    ON CONFLICT (repo) DO UPDATE SET vtime = greatest(f.vtime, EXCLUDED.vtime)
)
UPDATE candidates c SET status = 'verifying', started_at = now(), reason = NULL,
                        fair_start = coalesce(c.fair_start, pick.tag)
FROM pick WHERE c.id = pick.id
RETURNING c.*;

-- name: candidates_waiting
-- Queued candidates that the window has not yet tried on the current main (``exclude``), by priority, then in
-- turns among their owners (each owner's oldest, then each one's second, ...), the least served owner first within a
-- turn (``candidate_next``'s tag), then arrival: the sweep tries a lone agent's candidate before another agent's
-- twentieth.
SELECT w.* FROM (
    SELECT c.*, row_number() OVER (PARTITION BY c.owner_id, c.priority ORDER BY c.id) AS turn,
           coalesce(c.fair_start, greatest(coalesce(f.vtime, 0), coalesce(a.served, 0))) AS tag
    FROM candidates c
    LEFT JOIN fair_accounts a ON a.repo = c.repo AND a.owner_id = c.owner_id
    LEFT JOIN fair_clocks f ON f.repo = c.repo
    WHERE c.repo = %(repo)s AND c.status = 'queued' AND NOT (c.id = ANY(%(exclude)s::bigint[]))
) w
ORDER BY w.priority DESC, w.turn, w.tag, w.id
LIMIT %(limit)s;

-- name: candidate_merged
UPDATE candidates SET merged_at = clock_timestamp() WHERE id = %(id)s;

-- name: candidate_take
-- One queued candidate taken out of turn (it conflicts with main: judged at once); None if it moved meanwhile.
UPDATE candidates SET status = 'verifying', started_at = now(), reason = NULL
WHERE id = %(id)s AND status = 'queued'
RETURNING *;

-- name: candidates_touching
-- The live candidates of other subtasks that change any of ``paths``, in the queue's order, with their owners.
SELECT c.id, c.subtask_id, c.claim_version, c.sha, c.status::text AS status, a.name AS owner,
       ARRAY(SELECT unnest(c.paths) INTERSECT SELECT unnest(%(paths)s::text[]) ORDER BY 1) AS shared
FROM candidates c JOIN agents a ON a.id = c.owner_id
WHERE c.repo = %(repo)s AND c.subtask_id <> %(subtask_id)s AND c.paths && %(paths)s::text[]
  AND c.status IN ('queued', 'verifying', 'landing', 'parked', 'awaiting_approval')
ORDER BY c.status = 'queued', c.priority DESC, c.id
LIMIT 20;

-- name: candidate_fences
-- Are the candidates still what their subtasks wait on? Why not, by candidate (``candidate_unfenced``: NULL while
-- it holds its fence). One query for a whole speculation window.
SELECT q.id, candidate_unfenced(q, s, %(words)s::jsonb) AS unfenced
FROM candidates q LEFT JOIN subtasks s ON s.id = q.subtask_id
WHERE q.id = ANY(%(ids)s::bigint[]);

-- name: subtasks_lock_members
-- The subtasks of a landing's candidates, locked FOR SHARE (in id order) for the transaction that writes its intent:
-- their fence (``candidate_fences``, read next) holds until the intent is written, and a lead's cancel
-- (``subtask_lock``) comes before the intent or after it, when it sees the candidate ``landing`` and is refused.
SELECT s.id FROM subtasks s
WHERE s.id IN (SELECT q.subtask_id FROM candidates q WHERE q.id = ANY(%(ids)s::bigint[]))
ORDER BY s.id
FOR SHARE OF s;

-- name: candidate_finish
-- ``verdict``: the verdict's kind and facts; a new status without one keeps no stale one (NULL), except that a
-- candidate put back in the queue keeps what it was told before (a flaky requeue, said once). A landed candidate
-- stays landed: a leader that lost its lock mid-landing and carries its landing or window on must not write over
-- what the new leader landed (the protocol model's take-over finding, docs/protocol.md). No row: it was landed.
-- One dropped as ``superseded`` whose subtask was cancelled is ``cancelled`` (``candidate_dropped``): every path
-- that drops a candidate no longer holding its fence asks for ``superseded``, and this names the cancel.
UPDATE candidates
SET status = CASE WHEN %(status)s = 'superseded' THEN candidate_dropped(subtask_id)
                  ELSE %(status)s::candidate_status END,
    reason = %(reason)s, base_sha = coalesce(%(base_sha)s, base_sha),
    merged_sha = coalesce(%(merged_sha)s, merged_sha), verifier = coalesce(%(verifier)s, verifier),
    verdict = CASE WHEN %(verdict)s::jsonb IS NOT NULL THEN %(verdict)s::jsonb
                   WHEN %(status)s IN ('queued', 'verifying') THEN verdict END,
    -- one waiting for an approval is out of flight (its run is done) until an approval puts it back in the queue
    finished_at = CASE WHEN %(status)s IN ('queued', 'verifying', 'landing', 'parked') THEN NULL ELSE now() END
WHERE id = %(id)s AND status <> 'landed'
RETURNING *;

-- name: candidate_list
SELECT c.*, a.name AS owner FROM candidates c JOIN agents a ON a.id = c.owner_id
WHERE (%(repo)s::text IS NULL OR c.repo = %(repo)s::text)
  AND (%(subtask_id)s::bigint IS NULL OR c.subtask_id = %(subtask_id)s::bigint)
ORDER BY c.id DESC
LIMIT %(limit)s;

-- name: candidate_get
SELECT * FROM candidates WHERE id = %(id)s;

-- name: candidates_requeue_stuck
-- After a crash: candidates caught mid-verification (no intent written) go back to the queue, and the runs they
-- had are cancelled with them: the queue verifies them again under new jobs, so a killed server's old jobs,
-- re-queued after their lease, would be runs for nobody ahead of live work.
WITH requeued AS (
    UPDATE candidates c SET status = 'queued', started_at = NULL
    WHERE c.repo = %(repo)s AND c.status IN ('verifying', 'landing')
      AND NOT EXISTS (SELECT 1 FROM landing_intents i WHERE i.candidate_id = c.id AND i.status = 'pending')
    RETURNING c.id
), cancelled AS (
    UPDATE verify_jobs j SET status = 'cancelled', finished_at = now(), lease_expires_at = NULL
    WHERE j.candidate_id IN (SELECT id FROM requeued) AND j.status IN ('queued', 'running')
    RETURNING j.id
)
SELECT id, (SELECT count(*) FROM cancelled) AS jobs_cancelled FROM requeued;

-- name: intent_insert
INSERT INTO landing_intents (candidate_id, repo, target_ref, old_sha, new_sha, tree_sha, evidence, attestations)
VALUES (%(candidate_id)s, %(repo)s, %(target_ref)s, %(old_sha)s, %(new_sha)s, %(tree_sha)s, %(evidence)s,
        %(attestations)s)
RETURNING *;

-- name: intent_pending
SELECT * FROM landing_intents WHERE repo = %(repo)s AND status = 'pending' ORDER BY id;

-- name: intent_lock
-- The intent's status, its row locked for the transaction that settles it (``LandingStore.settling``): a leader that
-- lost its lock mid-landing and the one that took over and reconciled decide about it one after the other.
SELECT status::text AS status FROM landing_intents WHERE id = %(id)s FOR UPDATE;


-- name: landed_chain
-- Every landed row of a repository, for walking main's history back to its root.
SELECT merged_sha, base_sha, subtask_id, id FROM landed WHERE repo = %(repo)s;

-- name: finding_insert
INSERT INTO reconcile_findings (repo, kind, detail) VALUES (%(repo)s, %(kind)s, %(detail)s)
RETURNING id;

-- name: finding_list
SELECT * FROM reconcile_findings WHERE (%(repo)s::text IS NULL OR repo = %(repo)s::text)
ORDER BY id DESC LIMIT %(limit)s;

-- name: landed_set_main_status
-- The post-land check on the commit main moved to covers every row of that landing (all of a batch).
UPDATE landed SET main_status = %(main_status)s
WHERE repo = (SELECT repo FROM landed WHERE id = %(id)s)
  AND main_sha = (SELECT main_sha FROM landed WHERE id = %(id)s)
RETURNING id;

-- name: candidate_risk_facts
-- What a push's failure estimate rests on (``mergebot.landing.intake.risk.Facts``), read before it is queued: among the
-- repository's last 2,000 candidates, the ones that ran their check to a verdict (landed, or rejected for a failure
-- of their own: ``own`` names those kinds): the agent's last 50 and the repository's last 300 of them, the last 500
-- that touch any of ``paths``, and the last 300 that came right after a failure of their own subtask (how often a
-- fix fails here); and the subtask's earlier pushes (but those superseded or rejected for a conflict: they say
-- nothing of its check, and counted they sent an agent redoing a conflict behind fresher pushes, to lose the
-- next conflict too) with whether the newest of them failed its check. The agent's
-- record and the paths' leave out this subtask's own candidates: its last failure is the after-failure fact, and
-- counted again there it would make every fix look like the riskiest push of all.
WITH recent AS (
    SELECT c.id, c.owner_id, c.subtask_id, c.paths, c.status,
           c.status = 'rejected' AND c.verdict->>'kind' = ANY(%(own)s::text[]) AS failed,
           c.status = 'landed' OR c.verdict->>'kind' = ANY(%(own)s::text[]) AS judged,
           coalesce(lag(c.status = 'rejected' AND c.verdict->>'kind' = ANY(%(own)s::text[]))
                    OVER (PARTITION BY c.subtask_id ORDER BY c.id), false) AS after
    FROM (SELECT * FROM candidates WHERE repo = %(repo)s ORDER BY id DESC LIMIT 2000) c
), judged AS (
    SELECT * FROM recent WHERE judged AND status IN ('landed', 'rejected')
), agent AS (
    SELECT failed FROM judged WHERE owner_id = %(owner_id)s AND subtask_id <> %(subtask_id)s ORDER BY id DESC LIMIT 50
), repo AS (
    SELECT failed FROM judged ORDER BY id DESC LIMIT 300
), near AS (
    SELECT failed, paths FROM judged WHERE subtask_id <> %(subtask_id)s ORDER BY id DESC LIMIT 500
), fixes AS (
    SELECT failed FROM judged WHERE after ORDER BY id DESC LIMIT 300
), pushes AS (
    SELECT c.status, c.verdict->>'kind' AS kind FROM candidates c WHERE c.subtask_id = %(subtask_id)s
    ORDER BY c.id DESC
)
SELECT (SELECT count(*) FROM agent) AS agent_finished,
       (SELECT count(*) FILTER (WHERE failed) FROM agent) AS agent_failed,
       (SELECT count(*) FROM repo) AS repo_finished,
       (SELECT count(*) FILTER (WHERE failed) FROM repo) AS repo_failed,
       (SELECT count(*) FROM pushes WHERE status <> 'superseded' AND kind IS DISTINCT FROM 'conflict') + 1
           AS attempt,
       coalesce((SELECT p.status = 'rejected' AND p.kind = ANY(%(own)s::text[]) FROM pushes p LIMIT 1), false)
           AS after_failure,
       (SELECT count(*) FROM near WHERE near.paths && %(paths)s::text[]) AS path_finished,
       (SELECT count(*) FILTER (WHERE failed) FROM near WHERE near.paths && %(paths)s::text[]) AS path_failed,
       (SELECT count(*) FROM fixes) AS fix_finished,
       (SELECT count(*) FILTER (WHERE failed) FROM fixes) AS fix_failed;

-- name: approval_insert
-- An approval of one candidate's exact commit (its subtask and sha), by an agent allowed to approve.
INSERT INTO approvals (candidate_id, subtask_id, sha, approver_id, forge_login, via)
SELECT c.id, c.subtask_id, c.sha, %(approver_id)s, %(forge_login)s, %(via)s FROM candidates c WHERE c.id = %(id)s
RETURNING *;

-- name: candidate_approved
-- An approved candidate that waited for its approval goes back to the queue, to be verified again where main moved
-- and landed (its approval now on record, the gate lets it through).
UPDATE candidates SET status = 'queued', reason = %(reason)s, started_at = NULL, finished_at = NULL
WHERE id = %(id)s AND status = 'awaiting_approval'
RETURNING *;

-- name: approvers_of
-- Who approved these commits of these subtasks (names, oldest first), by (subtask, sha): the gate's facts.
SELECT t.subtask_id, t.sha,
       coalesce((SELECT array_agg(a.name ORDER BY ap.id) FROM approvals ap JOIN agents a ON a.id = ap.approver_id
                 WHERE ap.subtask_id = t.subtask_id AND ap.sha = t.sha), '{}') AS approvers
FROM unnest(%(subtask_ids)s::bigint[], %(shas)s::text[]) AS t(subtask_id, sha);

-- name: approvals_of_candidate
-- A candidate's approvals, with who gave each and how, oldest first (its page).
SELECT ap.id, ap.sha, ap.via, ap.forge_login, ap.created_at, a.name AS approver, a.role::text AS role
FROM approvals ap JOIN candidates c ON c.subtask_id = ap.subtask_id AND c.sha = ap.sha
JOIN agents a ON a.id = ap.approver_id
WHERE c.id = %(id)s
ORDER BY ap.id;

-- name: candidates_requeue_awaiting
-- A repository's approval rule changed: what waited for an approval goes back to the queue, judged anew.
UPDATE candidates SET status = 'queued', reason = %(reason)s, started_at = NULL, finished_at = NULL
WHERE repo = %(repo)s AND status = 'awaiting_approval'
RETURNING id;

-- name: candidate_of_commit
-- The newest candidate of a subtask for one commit (a full sha, or a prefix of one): what a wait keyed on (subtask,
-- head commit) answers with, never a newer or older push of the same subtask.
SELECT * FROM candidates
WHERE subtask_id = %(subtask_id)s AND starts_with(sha, %(sha)s)
ORDER BY id DESC LIMIT 1;

-- name: candidate_in_flight
-- The subtask's newest candidate still in the queue or running (waiting for main or a person counts): a retry of
-- the subtask while it is there is a no-op.
SELECT * FROM candidates
WHERE subtask_id = %(subtask_id)s AND status IN ('queued', 'verifying', 'landing', 'parked', 'awaiting_approval')
ORDER BY id DESC LIMIT 1;
