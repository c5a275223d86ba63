"""The load benchmark's scene (``python -m bench.load``): what it measures, the sampler of the server's memory and CPU,
and the task trees and agents it starts from.
"""

from __future__ import annotations

import contextlib
import platform
import random
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from bench.common import harness
from bench.common.measure import (
    descendants,
    status_kb,
)
from mergebot.tree import Node, plan

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
