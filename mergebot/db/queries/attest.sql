-- name: attest_facts
-- What a landing's statements say beyond the intent, in one read before main moves: for each candidate its owner's
-- name, branch and times, what a lead allowed its subtask, a digest of its acceptance tests' files (path and content
-- digest; never the text) and who approved its commit; and, the same on every row, the number the repository's next
-- landing statement takes (one intent is pending per repository at a time, so two landings never take the same
-- number) and, when asked (``held``), a digest of the repository's held-out check files.
SELECT c.id, c.ref, c.pushed_at, c.queued_at, c.merged_at, a.name AS owner,
       s.allow_test_removal, s.allow_check_changes, s.allow_behaviour_change,
       (SELECT encode(sha256(convert_to(string_agg(t.path || ' ' || encode(sha256(t.content), 'hex'), E'\n'
                                                  ORDER BY t.path), 'UTF8')), 'hex')
        FROM acceptance_tests t WHERE t.subtask_id = c.subtask_id) AS acceptance_digest,
       (SELECT array_agg(ap.name ORDER BY ap.name) FROM approvals p JOIN agents ap ON ap.id = p.approver_id
        WHERE p.subtask_id = c.subtask_id AND p.sha = c.sha) AS approved_by,
       (SELECT coalesce(max(x.sequence), 0) + 1 FROM attestations x
        WHERE x.repo = %(repo)s AND x.kind = 'landing') AS next_sequence,
       CASE WHEN %(held)s THEN
           (SELECT encode(sha256(convert_to(string_agg(h.path || ' ' || encode(sha256(h.content), 'hex'), E'\n'
                                                       ORDER BY h.path), 'UTF8')), 'hex')
            FROM held_out_files h WHERE h.repo = %(repo)s) END AS held_out_digest
FROM candidates c
JOIN subtasks s ON s.id = c.subtask_id
JOIN agents a ON a.id = c.owner_id
WHERE c.id = ANY(%(ids)s);

-- name: attest_insert
INSERT INTO attestations (repo, landed_id, kind, subject_sha, sequence, keyid, envelope)
VALUES (%(repo)s, %(landed_id)s, %(kind)s, %(subject_sha)s, %(sequence)s, %(keyid)s, %(envelope)s)
ON CONFLICT DO NOTHING
RETURNING id;

-- name: attest_unnoted
-- Statements not yet copied to the repository's git notes, oldest first.
SELECT id, subject_sha FROM attestations WHERE repo = %(repo)s AND noted_at IS NULL ORDER BY id LIMIT 500;

-- name: attest_of_commits
-- Every statement of these commits, oldest first: what each commit's note holds.
SELECT id, subject_sha, kind, sequence, keyid, envelope FROM attestations
WHERE repo = %(repo)s AND subject_sha = ANY(%(shas)s) ORDER BY id;

-- name: attest_noted
UPDATE attestations SET noted_at = now() WHERE id = ANY(%(ids)s);

-- name: attest_of_landed
-- A landed row's statements, oldest first (the landed page).
SELECT id, kind, sequence, keyid, subject_sha, envelope, created_at, noted_at FROM attestations
WHERE landed_id = %(landed_id)s OR (repo = %(repo)s AND subject_sha = %(sha)s) ORDER BY id;

-- name: attest_landings
-- A repository's landing statements by commit (``mergebot attest verify`` on the server reads its notes; this is
-- what the database holds beside them).
SELECT subject_sha, sequence, keyid, envelope FROM attestations
WHERE repo = %(repo)s AND kind = 'landing' ORDER BY sequence;

-- name: attest_landing_envelopes
-- The landing statement of each of these commits (the reconciler's audit of main: at most one per commit).
SELECT subject_sha, envelope FROM attestations
WHERE repo = %(repo)s AND kind = 'landing' AND subject_sha = ANY(%(shas)s);

-- name: attest_intent_envelopes
-- The landing statements of these commits that an intent kept but no landed row took (a landing whose every claim
-- was superseded after main moved: the bot moved main, and signed the move).
SELECT DISTINCT ON (a->>'sha') a->>'sha' AS subject_sha, a->'envelope' AS envelope
FROM landing_intents i, jsonb_array_elements(i.attestations) a
WHERE i.repo = %(repo)s AND i.attestations IS NOT NULL AND a->>'kind' = 'landing' AND a->>'sha' = ANY(%(shas)s)
ORDER BY a->>'sha', i.id DESC;

-- name: attest_insert_reverify
-- A re-verification's statement, once per job (a second finishing of the same job adds nothing).
INSERT INTO attestations (repo, landed_id, kind, subject_sha, keyid, envelope, job_id)
VALUES (%(repo)s, %(landed_id)s, 'reverify', %(subject_sha)s, %(keyid)s, %(envelope)s, %(job_id)s)
ON CONFLICT DO NOTHING
RETURNING id;

-- name: attest_reverifies
-- A landed row's re-verification statements, newest first.
SELECT id, job_id, keyid, subject_sha, envelope, created_at, noted_at FROM attestations
WHERE landed_id = %(landed_id)s AND kind = 'reverify'
ORDER BY id DESC LIMIT %(limit)s;
