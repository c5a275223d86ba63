"""The claim benchmark's databases (``python -m bench.claims``): its constants, a run's result, and the templates each
contender starts from (Mergebot's subtasks, the bare UPDATE table, procrastinate's jobs).
"""

from __future__ import annotations

import logging
import os
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

import psycopg

from bench.common import harness, measure
from mergebot import auth

SHA = "ab" * 20  # a well-formed candidate sha for every completion
UPDATE_TARGET = 0.5  # Mergebot cycles/s / UPDATEs/s at the reference concurrency
HISTORY_TARGET = 0.9  # cycles/s with history / cycles/s without
PROCRASTINATE_TARGET = 5.0  # Mergebot cycles/s / procrastinate cycles/s
REFERENCE_AGENTS = 4

FLOOR = "UPDATE loop (floor)"
CYCLE_FLOOR = "cycle floor (2 updates + 2 events)"
CYCLE_FLOOR_TARGET = 0.8  # fused cycles/s / cycle floor cycles/s
# The least a claim + completion cycle with the audit log must write, in one statement: the previous subtask
# running -> submitted and the next ready -> running (both non-HOT: status and lease are indexed), and the two
# event rows the trigger appends, written here by the statement itself (the trigger is disabled in this run's
# database), with the same columns and detail. No search, no fencing: each agent knows its ids.
CYCLE_FLOOR_SQL = """
WITH done AS (
    UPDATE subtasks SET status = 'submitted', candidate_sha = %(sha)s, lease_expires_at = NULL,
                        updated_by = %(agent)s, updated_at = now()
    WHERE id = %(done)s RETURNING id, owner_id, claim_version
), claimed AS (
    UPDATE subtasks SET status = 'running', owner_id = %(agent)s, claim_version = claim_version + 1,
                        claimed_at = now(), heartbeat_at = now(), lease_expires_at = now() + interval '120 s',
                        attempts = attempts + 1, updated_by = %(agent)s, updated_at = now()
    WHERE id = %(next)s RETURNING id, owner_id, claim_version
), logged AS (
    INSERT INTO events (actor_id, kind, subtask_id, from_status, to_status, claim_version, detail)
    SELECT %(agent)s, 'status', id, 'running'::subtask_status, 'submitted'::subtask_status, claim_version,
           jsonb_strip_nulls(jsonb_build_object('owner', owner_id, 'sha', %(sha)s::text)) FROM done
    UNION ALL
    SELECT %(agent)s, 'status', id, 'ready'::subtask_status, 'running'::subtask_status, claim_version,
           jsonb_strip_nulls(jsonb_build_object('owner', owner_id)) FROM claimed
    RETURNING 1
)
SELECT (SELECT count(*) FROM logged) AS events"""
FUSED = "mergebot fused"
FUSED_HISTORY = "mergebot fused +history"
UNFUSED = "mergebot unfused (submit; claim)"
PROCRASTINATE = "procrastinate JobManager fetch+finish"
PROCRASTINATE_STOCK = "procrastinate JobManager, own pool"
PROCRASTINATE_WORKER = "procrastinate worker (run_worker)"
PROCRASTINATE_TASK = "bench.noop"


# -- results ------------------------------------------------------------------------------------------------


@dataclass
class Result:
    scenario: str
    agents: int
    cycles: int
    seconds: float
    latencies_ms: list[float] = field(default_factory=list, repr=False)
    check: str = "ok"

    @property
    def rate(self) -> float:
        return self.cycles / self.seconds if self.seconds > 0 else 0.0

    @property
    def p50(self) -> float:
        return statistics.median(self.latencies_ms) if self.latencies_ms else float("nan")

    @property
    def p99(self) -> float:
        return measure.nearest(self.latencies_ms, 0.99)

    def summary(self) -> dict[str, Any]:
        d = asdict(self)
        del d["latencies_ms"]
        d.update(cycles_per_s=round(self.rate, 1), p50_ms=round(self.p50, 3), p99_ms=round(self.p99, 3))
        return d


# -- the server ----------------------------------------------------------------------------------------------


SHOWN = ("server_version", "fsync", "synchronous_commit", "shared_buffers", "max_connections")


def server_info(server: harness.PgServer) -> dict[str, str]:
    return {"server": server.kind, "load_average_start": f"{os.getloadavg()[0]:.2f}", **server.show(*SHOWN)}


# -- fixtures (built once as templates; every run gets a fresh copy) ---------------------------------------


def build_mergebot_template(server: harness.PgServer, *, ready: int, history: int) -> str:
    """A migrated database with ``history`` landed subtasks (ids first) then ``ready`` ready subtasks; its URL."""
    url = server.create_db("tpl_hist" if history else "tpl_empty")
    with psycopg.connect(url, autocommit=True) as conn:
        if history:
            with conn.transaction():
                agent = conn.execute(
                    "INSERT INTO agents (name, role, token_hash) VALUES ('history', 'agent', %s) "
                    "RETURNING id",
                    (auth.hash_token(auth.new_token()),)).fetchone()
                assert agent is not None
                a = agent[0]
                conn.execute("INSERT INTO subtasks (title, status, created_by, updated_by) "
                             "SELECT 'history ' || g, 'ready', %(a)s, %(a)s FROM generate_series(1, %(n)s) g",
                             {"a": a, "n": history})
                # The legal path, set-based: ready -> running -> submitted -> landed (the triggers check it
                # and log every step, as they would have in real life).
                conn.execute("UPDATE subtasks SET status = 'running', owner_id = %(a)s, "
                             "claim_version = claim_version + 1, claimed_at = now(), heartbeat_at = now(), "
                             "lease_expires_at = now() + interval '2 minutes', attempts = attempts + 1, "
                             "updated_by = %(a)s WHERE status = 'ready'", {"a": a})
                conn.execute("UPDATE subtasks SET status = 'submitted', lease_expires_at = NULL, "
                             "candidate_sha = md5(id::text) || left(md5('c' || id), 8) "
                             "WHERE status = 'running'")
                conn.execute("INSERT INTO landed (subtask_id, claim_version, owner_id, repo, target_ref, "
                             "candidate_sha, base_sha, merged_sha, tree_sha, verifier_command, "
                             "verifier_result, duration_ms, log_digest, main_sha) "
                             "SELECT id, claim_version, owner_id, 'bench', 'refs/heads/main', candidate_sha, "
                             "candidate_sha, md5('m' || id) || left(md5('n' || id), 8), "
                             "md5('t' || id) || left(md5('u' || id), 8), 'true', 'passed', 1, 'x', "
                             "md5('m' || id) || left(md5('n' || id), 8) "
                             "FROM subtasks WHERE status = 'submitted'")
                conn.execute("UPDATE subtasks SET status = 'landed', previous_owner_id = owner_id, "
                             "owner_id = NULL WHERE status = 'submitted'")
        conn.execute("INSERT INTO subtasks (title, status) "
                     "SELECT 'bench ' || g, 'ready' FROM generate_series(1, %s) g", (ready,))
        conn.execute("VACUUM (FREEZE, ANALYZE)")
    return url


def build_update_template(server: harness.PgServer, *, rows: int) -> str:
    url = server.create_db("tpl_update", schema=False)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id bigint PRIMARY KEY, n bigint NOT NULL DEFAULT 0)")
        conn.execute("INSERT INTO t (id) SELECT g FROM generate_series(1, %s) g", (rows,))
        conn.execute("VACUUM (FREEZE, ANALYZE)")
    return url


def procrastinate_app(connector: Any) -> tuple[Any, Any]:
    """A procrastinate App on ``connector`` with the benchmark's one task, a no-op coroutine."""
    import procrastinate

    # procrastinate warns when an App is made in __main__ (workers could not import its tasks), and logs two
    # INFO lines per job; neither is emitted (the calls still run, as they do for its users).
    logging.getLogger("procrastinate").setLevel(logging.ERROR)
    app = procrastinate.App(connector=connector)

    @app.task(name=PROCRASTINATE_TASK)
    async def noop(i: int) -> None:
        return None

    return app, noop


async def build_procrastinate_template(server: harness.PgServer, *, jobs: int) -> str:
    """Jobs deferred through the user API (``task.batch_defer_async``), shared by every procrastinate run."""
    import procrastinate

    url = server.create_db("tpl_procrastinate", schema=False)
    app, noop = procrastinate_app(procrastinate.PsycopgConnector(conninfo=url))
    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        batch = 1000
        for start in range(0, jobs, batch):
            await noop.batch_defer_async(*({"i": i} for i in range(start, min(jobs, start + batch))))
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM (FREEZE, ANALYZE)")
    return url
