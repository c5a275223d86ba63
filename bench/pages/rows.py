"""The landing path's rows for a day, written directly into the database, for the benches that measure reads
(``python -m bench.pages``: a day; ``python -m bench.pages.history``: a quarter of days).

One day ``ago`` days back: ``LANDINGS`` landed rows, 45 s apart, on as many subtasks (at claim version
``version``, so that the same subtasks can land again on another day), each with its candidate and its passing
run (queued with a speculation window of 1 to 4); and ``REWORK`` rejected candidates before them, each with a
failed run, a failed retry and a passing base check. Runs are spread over four workers.
"""

from __future__ import annotations

from mergebot.db.database import Database

LANDINGS = 1900  # about the seeds' rate (80 an hour) for a day
REWORK = 600  # candidates that failed (their run, its retry and main's base check) before the landing one
REPO = "bench"


async def add_repo(store: Database) -> None:
    async with store.pool.connection() as conn:
        await conn.execute("INSERT INTO repos (name, verifier_command, root_sha) VALUES (%s, 'pytest', %s)",
                           (REPO, "a" * 40))


async def day_of_landings(store: Database, *, ago: int = 0, version: int = 1) -> None:
    """The day that ended ``ago`` days before now (0: the last 24 hours)."""
    window = {"n": LANDINGS, "rework": REWORK, "start": f"{ago + 1} days", "version": version,
              "offset": 1_000_000 * version}
    async with store.pool.connection() as conn:
        await conn.execute("""
            WITH s AS (SELECT id, row_number() OVER (ORDER BY id) AS n FROM subtasks ORDER BY id LIMIT %(n)s),
            c AS (
                INSERT INTO candidates (repo, subtask_id, claim_version, owner_id, sha, ref, status, queued_at,
                                        started_at, finished_at)
                SELECT 'bench', s.id, %(version)s, (SELECT min(id) FROM agents),
                       lpad(to_hex(%(offset)s + s.n), 40, '0'), 'refs/heads/b', 'landed',
                       now() - %(start)s::interval + s.n * interval '45 s',
                       now() - %(start)s::interval + s.n * interval '45 s' + interval '20 s',
                       now() - %(start)s::interval + s.n * interval '45 s' + interval '50 s'
                FROM s RETURNING id, subtask_id, sha, started_at, finished_at
            ), j AS (
                INSERT INTO verify_jobs (repo, commit_sha, command, timeout_s, purpose, candidate_id, status, outcome,
                                         created_at, started_at, finished_at, worker_name, window_width)
                SELECT 'bench', c.sha, 'pytest', 60, 'candidate', c.id, 'done', 'pass', c.started_at - interval '5 s',
                       c.started_at, c.finished_at, 'worker-' || (c.id %% 4), 1 + c.id %% 4
                FROM c RETURNING id, candidate_id
            )
            INSERT INTO landed (subtask_id, claim_version, owner_id, repo, target_ref, candidate_sha, base_sha,
                                merged_sha, tree_sha, verifier_command, verifier_result, duration_ms, log_digest,
                                main_sha, landed_at, run_id)
            SELECT c.subtask_id, %(version)s, (SELECT min(id) FROM agents), 'bench', 'refs/heads/main', c.sha, c.sha,
                   c.sha, c.sha, 'pytest', 'pass', 30000, repeat('d', 64), c.sha, c.finished_at, j.id
            FROM c JOIN j ON j.candidate_id = c.id""", window)
        await conn.execute("""
            WITH c AS (
                INSERT INTO candidates (repo, subtask_id, claim_version, owner_id, sha, ref, status, reason,
                                        queued_at, started_at, finished_at)
                SELECT 'bench', l.subtask_id, l.claim_version, l.owner_id,
                       lpad(to_hex(%(offset)s + 500000 + l.id), 40, '0'), 'refs/heads/b', 'rejected', 'check failed',
                       l.landed_at - interval '10 min',
                       l.landed_at - interval '9 min', l.landed_at - interval '7 min'
                FROM landed l WHERE l.repo = 'bench' AND l.claim_version = %(version)s ORDER BY l.id LIMIT %(rework)s
                RETURNING id, sha, started_at, finished_at
            )
            INSERT INTO verify_jobs (repo, commit_sha, command, timeout_s, purpose, candidate_id, status, outcome,
                                     created_at, started_at, finished_at, worker_name)
            SELECT 'bench', c.sha, 'pytest', 60, p.purpose, c.id, 'done', p.outcome,
                   c.started_at + p.k * interval '40 s' - interval '5 s', c.started_at + p.k * interval '40 s',
                   c.started_at + p.k * interval '40 s' + interval '30 s', 'worker-' || ((c.id + p.k) %% 4)
            FROM c, (VALUES ('candidate', 'fail', 0), ('retry', 'fail', 1), ('base', 'pass', 2)) p(purpose, outcome, k)
            """, window)
