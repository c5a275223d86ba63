"""The trends on a long history: the charts, the run timeline, the queue page, the cost of a day and the
/metrics counters, with a quarter of landings behind them, with and without the indexes of migration 0015.

What is measured, in one process against one PostgreSQL server (a fresh database):

* The app is ``create_app(settings)`` (no queue, no recovery loop), driven in-process through httpx's ASGI
  transport with a reviewer's cookie (pages) or token (API, /metrics): each figure is the whole server side of
  a request.
* The history: ``--days`` days (90 by default) of the landing path's rows, written directly
  (``bench/pages/rows.py``): each day 1,900 landings with their candidates and passing runs, and 600 rejected
  candidates with three runs each. 90 days are 171,000 landings, 225,000 candidates and 333,000 runs.
* Each view is timed in rounds that alternate between the schema without the indexes of migration 0015
  (``INDEXES`` below: runs and candidates by when they finished, the run a landing names, a subtask's
  standing landing; dropped, then ANALYZE) and with them (created again, then ANALYZE). Printed:
  each view's median and p95 per variant, the ratio without / with, and the target (100 ms on the server).
* /metrics (all time, so no index helps): each of its queries on its own, and the whole request (target: under
  200 ms). Its counters count what is fixed when it happens (a run's seconds by purpose and outcome), so it no
  longer reads the charges of every run (``run_charges``: 6.5 s at 333,000 runs, and not monotonic).

Run from the repository root::

    python -m bench.pages.history          # 90 days, 10 requests per view, variant and round, 2 rounds
    python -m bench.pages.history --days 30 --repeat 10

This prints figures; it asserts nothing about timing.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from bench.common import harness
from bench.common.measure import nearest
from bench.pages.rows import add_repo, day_of_landings
from mergebot.api import create_app
from mergebot.db.database import Database
from mergebot.settings import Settings
from mergebot.web.sample import SEEDS_NODES, seeds_tree
from mergebot.web.session import COOKIE

INDEXES = {  # migration 0015's, by name
    "verify_jobs_finished": "CREATE INDEX verify_jobs_finished ON verify_jobs (finished_at)",
    "verify_jobs_width": "CREATE INDEX verify_jobs_width ON verify_jobs (created_at) WHERE window_width IS NOT NULL",
    "candidates_finished": "CREATE INDEX candidates_finished ON candidates (finished_at)",
    "landed_run": "CREATE INDEX landed_run ON landed (run_id) WHERE run_id IS NOT NULL",
    "landed_standing": "CREATE INDEX landed_standing ON landed (subtask_id, id DESC) WHERE kind = 'land'",
}
VIEWS: list[tuple[str, str, dict[str, Any]]] = [
    ("charts: last hour", "/ui/charts", {"span": "hour"}),
    ("charts: last day", "/ui/charts", {"span": "day"}),
    ("charts: last week", "/ui/charts", {"span": "week"}),
    ("timeline: last hour", "/ui/timeline", {"span": "hour"}),
    ("timeline: last day (latest 1,000 runs)", "/ui/timeline", {"span": "day"}),
    ("queue page (with the last hour's charts)", "/ui/queue", {}),
    ("cost of the last day (API)", "/api/v1/cost", {"since": "day"}),
]


async def timed(fn: Any, repeat: int, warmup: int = 3) -> list[float]:
    for _ in range(warmup):
        await fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        await fn()
        times.append((time.perf_counter() - t0) * 1000)
    return times


async def load(store: Database, days: int) -> str:
    await harness.add_tree(store, seeds_tree(SEEDS_NODES, 10, prefix="big"), by=None)
    reviewer = await harness.add_agent(store, "rita", "reviewer")
    await add_repo(store)
    for ago in range(days):
        await day_of_landings(store, ago=ago, version=ago + 1)
    async with store.pool.connection() as conn:
        await conn.execute("ANALYZE")
    return reviewer.token


async def set_indexes(server: harness.PgServer, url: str, present: bool) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:  # as the schema's owner
        for name, create in INDEXES.items():
            conn.execute(create.replace("CREATE INDEX", "CREATE INDEX IF NOT EXISTS") if present
                         else f"DROP INDEX IF EXISTS {name}")
        conn.execute("ANALYZE verify_jobs, candidates, landed")


async def run(args: argparse.Namespace) -> dict[str, Any]:
    with harness.scratch("mb-bench-history-") as tmp, harness.PgServer(tmp, prefix="mb_bench_hist") as server:
        data = tmp / "data"
        data.mkdir()
        kind, version = server.kind, server.show("server_version")["server_version"]
        url = server.create_db("history")
        settings = Settings(database_url=url, data_dir=data, statement_timeout_ms=60_000)
        app = create_app(settings, run_recovery=False, run_queue=False)
        async with app.router.lifespan_context(app):
            store = harness.app_store(app)
            t0 = time.perf_counter()
            token = await load(store, args.days)
            load_s = time.perf_counter() - t0
            async with store.pool.connection() as conn:
                sizes = await (await conn.execute(
                    "SELECT (SELECT count(*) FROM landed), (SELECT count(*) FROM candidates), "
                    "(SELECT count(*) FROM verify_jobs)")).fetchone()
            assert sizes is not None
            figures: dict[str, dict[str, list[float]]] = {label: {"without": [], "with": []} for label, _, _ in VIEWS}
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://bench", cookies={COOKIE: token},
                                         headers={"Authorization": f"Bearer {token}"}) as client:
                for _ in range(args.rounds):
                    for variant in ("without", "with"):
                        await set_indexes(server, url, variant == "with")
                        for label, path, params in VIEWS:
                            query = {k: (datetime.now(UTC) - timedelta(days=1)).isoformat() if v == "day" else v
                                     for k, v in params.items()}

                            async def get(path: str = path, query: dict[str, Any] = query) -> None:
                                r = await client.get(path, params=query)
                                assert r.status_code == 200, (path, r.status_code, r.text[:300])

                            figures[label][variant] += await timed(get, args.repeat)
                async def scrape() -> None:
                    r = await client.get("/metrics")
                    assert r.status_code == 200, r.text[:300]

                scrape_ms = await timed(scrape, 3, warmup=1)
            metrics = {**await compare_metrics(store), "scrape_ms": scrape_ms}
    return {"server": kind, "version": version,
            "machine": harness.machine(), "load": harness.load_average(), "days": args.days,
            "rows": {"landed": sizes[0], "candidates": sizes[1], "runs": sizes[2]}, "setup_seconds": load_s,
            "views": figures, "metrics": metrics, "repeat": args.repeat, "rounds": args.rounds}


async def compare_metrics(store: Database) -> dict[str, Any]:
    """Each query of a /metrics scrape on its own (all time), to show where a scrape's time goes."""
    from mergebot.api.metrics import BUCKETS
    from mergebot.db.views import METRIC_QUERIES

    out: dict[str, Any] = {}
    for name in METRIC_QUERIES:
        args = {"bounds": list(BUCKETS)} if name == "metric_verify_buckets" else {}

        async def one(name: str = name, args: dict[str, Any] = args) -> list[Any]:
            return await store.views.sql.all(name, **args)

        out[name] = await timed(one, 3, warmup=1)
    return {"queries_ms": out}


def report(out: dict[str, Any]) -> None:
    r = out["rows"]
    print(f"mergebot history bench · {out['server']} {out['version']} · {out['machine']} · load {out['load']} · "
          f"{out['days']} days: {r['landed']:,} landings, {r['candidates']:,} candidates, {r['runs']:,} runs "
          f"(setup {out['setup_seconds']:.0f} s) · {out['repeat']} requests x {out['rounds']} rounds per variant")
    print()
    print(f"{'view':44} {'without: median':>15} {'p95':>7} {'with: median':>12} {'p95':>7} {'x faster':>8}  target")
    for label, f in out["views"].items():
        a, b = statistics.median(f["without"]), statistics.median(f["with"])
        pa, pb = nearest(f["without"], 0.95), nearest(f["with"], 0.95)
        print(f"{label:44} {a:>15.1f} {pa:>7.1f} {b:>12.1f} {pb:>7.1f} {a / b:>8.1f}  "
              f"{'met' if pb < 100 else 'MISSED'} (p95 under 100 ms, with the indexes)")
    m = out["metrics"]
    whole = statistics.median(m["scrape_ms"])
    queries = sorted(((statistics.median(v), k) for k, v in m["queries_ms"].items()), reverse=True)
    print()
    print(f"/metrics: the whole request {whole:.0f} ms (target under 200 ms: {'met' if whole < 200 else 'MISSED'});"
          " its queries, slowest first: " + ", ".join(f"{k} {ms:.0f} ms" for ms, k in queries))


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.pages.history", description=__doc__.split("\n", 1)[0])
    parser.add_argument("--days", type=int, default=90, help="days of history (1,900 landings a day)")
    parser.add_argument("--repeat", type=int, default=10, help="requests per view, variant and round")
    parser.add_argument("--rounds", type=int, default=2, help="rounds, each without then with the indexes")
    report(asyncio.run(run(parser.parse_args())))


if __name__ == "__main__":
    main()
