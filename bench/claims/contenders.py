"""The claim benchmark's contenders (``python -m bench.claims``): Mergebot's claim cycle fused and not, the UPDATE loop
and the cycle floor, and procrastinate's job manager and worker, each run by N agents for a fixed time.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

from bench.claims.databases import (
    CYCLE_FLOOR,
    CYCLE_FLOOR_SQL,
    FLOOR,
    PROCRASTINATE,
    PROCRASTINATE_STOCK,
    PROCRASTINATE_WORKER,
    SHA,
    Result,
    procrastinate_app,
)
from bench.common import harness
from mergebot.models import Handle, Subtask

# -- the runs ------------------------------------------------------------------------------------------------


def _pool_size(agents: int) -> dict[str, Any]:
    """Mergebot's pool for N agents: N connections, no more, no fewer."""
    return {"size": (agents, agents), "max_size": agents}


async def _run_agents(workers: list[Callable[[], Awaitable[int]]]) -> tuple[int, float]:
    start = time.perf_counter()
    counts = await asyncio.gather(*(w() for w in workers))
    return sum(counts), time.perf_counter() - start


async def run_mergebot(url: str, *, agents: int, fused: bool, cap: float, scenario: str) -> Result:
    store = await harness.open_store(url, **_pool_size(agents))
    try:
        ids = [(await harness.add_agent(store, f"bench-{i}")).id for i in range(agents)]
        lat: list[float] = []
        deadline = time.perf_counter() + cap

        async def agent(agent_id: int) -> int:
            done = 0
            prev: Subtask | None = None
            while True:
                if fused:
                    complete = Handle(prev.id, prev.claim_version) if prev else None
                    t0 = time.perf_counter()
                    sub = await store.subtasks.claim(agent_id=agent_id, complete=complete, sha=SHA if prev else None)
                    lat.append((time.perf_counter() - t0) * 1000)
                else:
                    if prev is not None:
                        await store.subtasks.submit(agent_id=agent_id, handle=Handle(prev.id, prev.claim_version),
                                                    sha=SHA)
                    t0 = time.perf_counter()
                    sub = await store.subtasks.claim(agent_id=agent_id)
                    lat.append((time.perf_counter() - t0) * 1000)
                if sub is None:
                    return done  # the fused claim has already submitted prev
                done += 1
                prev = sub
                if time.perf_counter() >= deadline:
                    await store.subtasks.submit(agent_id=agent_id, handle=Handle(prev.id, prev.claim_version), sha=SHA)
                    return done

        cycles, seconds = await _run_agents([lambda a=a: agent(a) for a in ids])
        by_status = await harness.counts(store)
    finally:
        await harness.close_store(store)
    check = "ok"
    if by_status.get("running", 0) or by_status.get("submitted", 0) != cycles:
        check = f"MISMATCH: {cycles} cycles but counts {by_status}"
    return Result(scenario, agents, cycles, seconds, lat, check)


async def run_update_loop(url: str, *, agents: int, rows: int, cap: float) -> Result:
    pool = await harness.open_bench_pool(url, **_pool_size(agents))
    try:
        lat: list[float] = []
        deadline = time.perf_counter() + cap

        async def worker(k: int) -> int:
            done = 0
            for i in range(k + 1, rows + 1, agents):
                t0 = time.perf_counter()
                async with pool.connection() as conn:
                    await conn.execute("UPDATE t SET n = n + 1 WHERE id = %s", (i,))
                lat.append((time.perf_counter() - t0) * 1000)
                done += 1
                if time.perf_counter() >= deadline:
                    break
            return done

        cycles, seconds = await _run_agents([lambda k=k: worker(k) for k in range(agents)])
        async with pool.connection() as conn:
            row = await (await conn.execute("SELECT coalesce(sum(n), 0) FROM t")).fetchone()
    finally:
        await pool.close()
    check = "ok" if row and row[0] == cycles else f"MISMATCH: {cycles} updates but sum(n) = {row}"
    return Result(FLOOR, agents, cycles, seconds, lat, check)


async def run_cycle_floor(url: str, *, agents: int, cap: float) -> Result:
    """The cycle floor (``CYCLE_FLOOR_SQL``) on a copy of the fused runs' database, its trigger disabled: each
    agent claims the ready ids k, k + N, ... in turn, completing the one before in the same statement."""
    pool = await harness.open_bench_pool(url, **_pool_size(agents))
    try:
        async with pool.connection() as conn:
            await conn.execute("ALTER TABLE subtasks DISABLE TRIGGER subtasks_on_update")
            ids = [r[0] for r in await (await conn.execute(
                "SELECT id FROM subtasks WHERE status = 'ready' ORDER BY id")).fetchall()]
            agent_ids = [r[0] for r in await (await conn.execute(
                "INSERT INTO agents (name, role, token_hash) SELECT 'floor-' || g, 'agent', "
                "sha256(('floor-' || g)::bytea) FROM generate_series(1, %s) g RETURNING id", (agents,))).fetchall()]
        lat: list[float] = []
        deadline = time.perf_counter() + cap
        wrong = 0

        async def worker(k: int) -> int:
            nonlocal wrong
            done = 0
            mine = ids[k::agents]
            for prev, nxt in zip([None, *mine], mine, strict=False):
                t0 = time.perf_counter()
                async with pool.connection() as conn:
                    row = await (await conn.execute(CYCLE_FLOOR_SQL, {
                        "agent": agent_ids[k], "done": prev, "next": nxt, "sha": SHA})).fetchone()
                lat.append((time.perf_counter() - t0) * 1000)
                wrong += row is None or row[0] != (2 if prev is not None else 1)
                done += 1
                if time.perf_counter() >= deadline:
                    break
            return done

        cycles, seconds = await _run_agents([lambda k=k: worker(k) for k in range(agents)])
    finally:
        await pool.close()
    return Result(CYCLE_FLOOR, agents, cycles, seconds, lat,
                  "ok" if not wrong else f"MISMATCH: {wrong} cycles did not write their rows")


async def run_procrastinate(url: str, *, agents: int, cap: float, stock: bool = False) -> Result:
    """Like-for-like: procrastinate on a pool configured like Mergebot's. ``stock``: the pool procrastinate
    builds itself (not autocommit: BEGIN, statement, COMMIT per call)."""
    import procrastinate
    from procrastinate.jobs import Status
    from procrastinate.manager import JobManager

    if stock:
        connector = procrastinate.PsycopgConnector(conninfo=url, min_size=agents, max_size=agents)
        await connector.open_async()
        pool = connector.pool
    else:
        pool = await harness.open_bench_pool(url, **_pool_size(agents))
        connector = procrastinate.PsycopgConnector()
        await connector.open_async(pool)
    try:
        jm = JobManager(connector)
        workers = [await jm.register_worker() for _ in range(agents)]
        lat: list[float] = []
        deadline = time.perf_counter() + cap

        async def worker(worker_id: int) -> int:
            done = 0
            while True:
                t0 = time.perf_counter()
                job = await jm.fetch_job(queues=None, worker_id=worker_id)
                lat.append((time.perf_counter() - t0) * 1000)
                if job is None:
                    return done
                await jm.finish_job(job, status=Status.SUCCEEDED, delete_job=False)
                done += 1
                if time.perf_counter() >= deadline:
                    return done

        cycles, seconds = await _run_agents([lambda w=w: worker(w) for w in workers])
        async with pool.connection() as conn:
            rows = await (await conn.execute(
                "SELECT status::text, count(*) FROM procrastinate_jobs GROUP BY 1")).fetchall()
    finally:
        await connector.close_async()
        await pool.close()
    counts = {r[0]: r[1] for r in rows}
    ok = counts.get("succeeded", 0) == cycles and not counts.get("doing")
    check = "ok" if ok else f"MISMATCH: {counts}"
    return Result(PROCRASTINATE_STOCK if stock else PROCRASTINATE, agents, cycles, seconds, lat, check)


async def run_procrastinate_worker(url: str, *, agents: int, cap: float) -> Result:
    """procrastinate as its users run it: ``App.run_worker_async(concurrency=N, wait=False)``."""
    import procrastinate

    size = agents + 2  # the LISTEN connection, the fetch loop, and up to N jobs finishing at once
    app, _ = procrastinate_app(procrastinate.PsycopgConnector(conninfo=url, min_size=size, max_size=size))
    async with app.open_async():
        start = time.perf_counter()
        run = asyncio.create_task(app.run_worker_async(
            concurrency=agents, wait=False, install_signal_handlers=False))
        finished, _ = await asyncio.wait({run}, timeout=cap)
        if finished:
            run.result()  # re-raises a worker failure
        else:  # the cap: a graceful stop (jobs in flight finish, and are counted)
            run.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await run
        seconds = time.perf_counter() - start
        async with app.connector.pool.connection() as conn:
            rows = await (await conn.execute(
                "SELECT status::text, count(*) FROM procrastinate_jobs GROUP BY 1")).fetchall()
    counts = {r[0]: r[1] for r in rows}
    cycles = counts.get("succeeded", 0)
    # Drained means no job left to do; whether drained or stopped at the cap, none is left half done or failed.
    ok = not counts.get("doing") and not counts.get("failed") and not (finished and counts.get("todo"))
    check = "ok" if ok else f"MISMATCH: {counts}"
    return Result(PROCRASTINATE_WORKER, agents, cycles, seconds, [], check)


def have_procrastinate() -> bool:
    try:
        import procrastinate  # noqa: F401
    except ImportError:
        return False
    return True
