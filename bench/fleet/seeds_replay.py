"""The seeds' load replayed through the real server's HTTP API (``python -m bench.fleet --scenario seeds``): the lead,
the group leaders and the helpers as one asyncio loop, and what a refused request costs the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import random
import sys
import time
from collections import Counter, defaultdict
from typing import Any

import psycopg

from bench.common import harness, rawhttp
from bench.common.measure import CpuMeter
from bench.fleet.seeds import SeedsPlan, read_sequence
from mergebot.db.database import Database
from mergebot.naps import cancel_all


async def call(http: rawhttp.Pool, method: str, path: str, token: str, body: Any = None) -> tuple[int, bytes, float]:
    """(status, body, seconds spent waiting for a free connection); a GET is tried twice, and a transport error
    is raised."""
    payload = b"" if body is None else json.dumps(body).encode()
    status, data, waited = await http.send(method, path, token, payload, retry_reads=True)
    if status == 0:
        raise ConnectionError(data.decode(errors="replace"))
    return status, data, waited


class Replay:
    """The seeds' run, replayed through the HTTP API as fast as the server answers."""

    def __init__(self, plan: SeedsPlan, pool: rawhttp.Pool, store: Database, lead: str, tokens: list[str],
                 helper_ids: list[int], names: list[str]) -> None:
        self.plan, self.http, self.store = plan, pool, store
        self.lead, self.tokens, self.helper_ids, self.names = lead, tokens, helper_ids, names
        self.total = len(plan.nodes)
        self.node_of: dict[int, int] = {}  # subtask id -> node index
        self.id_of: dict[int, int] = {}  # node index -> subtask id
        self.landed = 0
        self.opened = False
        self.done = asyncio.Event()
        self.created_all = asyncio.Event()
        self.groups = sorted(plan.leaders)
        # One ticket per subtask that became ready: an idle helper waits for a ticket of its group (or of everyone's
        # once the groups are open) before it claims again, so idle agents do not spin on empty claims.
        self.tickets = {g: asyncio.Semaphore(0) for g in [*self.groups, "*"]}
        self.counts: Counter[str] = Counter()
        self.lat: dict[str, list[float]] = defaultdict(list)
        self.by_kind: dict[str, list[float]] = defaultdict(list)
        self.errors: Counter[str] = Counter()
        self.error_samples: list[str] = []
        self.latest_note = 0
        self.read_seq = read_sequence()
        self.milestones: dict[str, float] = {}
        self.t0 = 0.0

    # -- plumbing ---------------------------------------------------------------------------------------------

    async def call(self, kind: str, method: str, path: str, token: str, body: Any = None,
                   ok: tuple[int, ...] = (200, 201)) -> tuple[int, bytes]:
        t = time.perf_counter()
        status, data, waited = await call(self.http, method, path, token, body)
        dt = time.perf_counter() - t - waited  # the round trip to the server, without the wait for a connection
        self.lat["write" if method != "GET" else "read"].append(dt)
        self.lat["connection wait"].append(waited)
        self.by_kind[kind if status != 204 else "empty claims (204)"].append(dt)
        self.counts[kind] += 1
        if status not in ok:
            self.errors[f"{kind} {status}"] += 1
            if len(self.error_samples) < 10:
                self.error_samples.append(f"{method} {path} -> {status}: {data[:300]!r}")
        return status, data

    def channel(self, group: str | None) -> str:
        return "*" if self.opened or group is None else group

    async def notify(self, node_indexes: list[int]) -> None:
        for i in node_indexes:
            self.tickets[self.channel(self.plan.nodes[i].group)].release()

    async def wait_for_work(self, group: str | None) -> None:
        if self.done.is_set():
            return
        with contextlib.suppress(TimeoutError):  # a ticket, or look again after a while anyway
            await asyncio.wait_for(self.tickets[self.channel(group)].acquire(), timeout=60.0)

    def wake_all(self) -> None:
        for sem in self.tickets.values():
            for _ in range(self.plan.helpers):
                sem.release()

    # -- the lead ---------------------------------------------------------------------------------------------

    async def lead_setup(self) -> None:
        for g in self.groups:
            await self.call("groups (create)", "PUT", f"/api/v1/groups/{g}", self.lead,
                            {"description": f"{g} of Langlands-Tunnell"})
        await self.announce("Plan: ten directions; group leaders split them, helpers claim within their group.")

        async def assign(h: int) -> None:
            g = self.plan.helper_group[h]
            role = "leader" if self.plan.leaders[g] == h else "helper"
            await self.call("assignments", "PUT", f"/api/v1/assignments/{self.names[h]}", self.lead,
                            {"group": g, "group_role": role})

        await harness.gather_bounded(self.http.size, (assign(h) for h in range(self.plan.helpers)))
        self.milestones["assigned"] = time.monotonic() - self.t0

    async def announce(self, body: str) -> None:
        if self.counts["announcements"] < self.plan.announcements:
            await self.call("announcements", "POST", "/api/v1/announcements", self.lead, {"body": body})

    async def lead_watch(self) -> None:
        await self.created_all.wait()
        root = self.plan.nodes[0]
        status, data = await self.call("subtasks (create)", "POST", "/api/v1/subtasks", self.lead, {
            "title": "Langlands-Tunnell", "description": "the integration of the ten directions",
            "depends_on": [self.id_of[c] for c in root.children], "idempotency_key": "seeds/0"})
        if status in (200, 201):
            sub = json.loads(data)["subtask"]
            self.id_of[0], self.node_of[sub["id"]] = sub["id"], 0
            if sub["status"] == "ready":
                await self.notify([0])
        reminders = self.plan.announcements - 2  # the plan and "don't wait for me" are the other two
        step = self.total / (reminders + 1)
        sent = 0
        while not self.done.is_set():
            if not self.opened and self.landed >= 0.1 * self.total:
                await self.announce("Don't wait for me: idle helpers may claim in any group.")
                for g in self.groups:
                    await self.call("groups (open)", "PUT", f"/api/v1/groups/{g}", self.lead, {"open": True})
                self.opened = True
                self.milestones["opened"] = time.monotonic() - self.t0
                for g in self.groups:  # waiters move to the shared channel
                    for _ in range(self.plan.helpers):
                        self.tickets[g].release()
            while sent < reminders and self.landed >= (sent + 1) * step:
                sent += 1
                await self.announce(f"Time check {sent}: {self.landed}/{self.total} landed.")
            await asyncio.sleep(0.2)

    # -- group leaders create the tree ------------------------------------------------------------------------

    async def create_group(self, group: str) -> None:
        token = self.tokens[self.plan.leaders[group]]
        top = next(x for x in self.plan.nodes[0].children if self.plan.nodes[x].group == group)
        order: list[int] = []
        stack = [(top, False)]
        while stack:  # post-order: children before their integrating parent
            i, seen = stack.pop()
            if seen:
                order.append(i)
                continue
            stack.append((i, True))
            stack.extend((c, False) for c in reversed(self.plan.nodes[i].children))
        for i in order:
            node = self.plan.nodes[i]
            status, data = await self.call("subtasks (create)", "POST", "/api/v1/subtasks", token, {
                "title": f"{group} level {node.depth} item {i}", "group": group,
                "description": f"Prove piece {i}; it integrates {len(node.children)} smaller pieces.",
                "depends_on": [self.id_of[c] for c in node.children], "idempotency_key": f"seeds/{i}"})
            if status not in (200, 201):
                raise RuntimeError(f"could not create node {i}: {status} {data[:300]!r}")
            sub = json.loads(data)["subtask"]
            self.id_of[i], self.node_of[sub["id"]] = sub["id"], i
            if sub["status"] == "ready":
                await self.notify([i])

    # -- helpers ----------------------------------------------------------------------------------------------

    async def helper(self, h: int, creating: asyncio.Task[None] | None) -> None:
        if creating is not None:
            await creating
        token = self.tokens[h]
        group: str | None = self.plan.helper_group[h]
        while not self.done.is_set():
            status, data = await self.call("claims", "POST", "/api/v1/subtasks/claim", token, None, ok=(200, 204))
            if status == 204:
                self.counts["claims"] -= 1
                self.counts["empty claims (204)"] += 1
                await self.wait_for_work(group)
                continue
            if status != 200:
                await asyncio.sleep(0.5)
                continue
            handle = json.loads(data)["handle"]
            await self.work(h, token, handle["id"], handle["claim_version"])

    async def work(self, h: int, token: str, sid: int, version: int) -> None:
        while sid not in self.node_of:  # claimed before its creator read the creation's answer
            await asyncio.sleep(0.01)
        i = self.node_of[sid]
        node = self.plan.nodes[i]
        group = node.group
        deps = [self.id_of[c] for c in node.children if c in self.id_of]
        reads, hbs, notes = self.plan.reads[i], self.plan.heartbeats[i], self.plan.notes[i]
        writes = ["heartbeat"] * hbs + ["note"] * notes
        random.Random(i).shuffle(writes)
        slots = len(writes) + 1
        at = {round((k + 1) * reads / slots): [] for k in range(len(writes))}
        for k, w in enumerate(writes):
            at[round((k + 1) * reads / slots)].append(w)
        for r in range(reads + 1):
            for w in at.get(r, []):
                if w == "heartbeat":
                    await self.call("heartbeats", "POST", f"/api/v1/subtasks/{sid}/heartbeat", token,
                                    {"claim_version": version})
                elif (r + i) % 5 == 0 and group is not None:  # a plan or estimate for the group
                    _, data = await self.call("notes", "POST", "/api/v1/notes", token,
                                              {"group": group, "body": f"estimate for piece {i}: {r % 7 + 1} hours"})
                    self.note_seen(data)
                else:
                    _, data = await self.call("notes", "POST", f"/api/v1/subtasks/{sid}/notes", token, {
                        "claim_version": version, "body": f"progress on {i}: step {r}; tried lemma {r % 13}."})
                    self.note_seen(data)
            if r < reads:
                await self.read(self.read_seq[(self.plan.read_offset[i] + r) % len(self.read_seq)], token, sid,
                                deps, group, r)
        sha = hashlib.sha1(f"candidate {sid} {version}".encode()).hexdigest()
        status, _ = await self.call("submits", "POST", f"/api/v1/subtasks/{sid}/submit", token,
                                    {"claim_version": version, "sha": sha})
        if status != 200:
            return
        t = time.perf_counter()
        merged = hashlib.sha1(f"merged {sid}".encode()).hexdigest()
        released = await harness.land(self.store, subtask_id=sid, claim_version=version, owner_id=self.helper_ids[h],
                                      repo="seeds", sha=sha, merged_sha=merged,
                                      command="(replay: landed with Store.land, no check)")
        self.lat["land"].append(time.perf_counter() - t)
        self.counts["landings (store)"] += 1
        self.landed += 1
        if self.landed == self.total:
            self.milestones["all landed"] = time.monotonic() - self.t0
            self.done.set()
            self.wake_all()
            return
        await self.notify([self.node_of[x] for x in released if x in self.node_of])

    def note_seen(self, data: bytes) -> None:
        with contextlib.suppress(ValueError, KeyError, TypeError):
            self.latest_note = max(self.latest_note, int(json.loads(data)["note"]["id"]))

    async def read(self, kind: str, token: str, sid: int, deps: list[int], group: str | None, r: int) -> None:
        after = max(0, self.latest_note - 100)
        g = f"group={group}&" if group else ""
        path = {
            "subtask": f"/api/v1/subtasks/{deps[r % len(deps)] if deps and r % 2 else sid}",
            "subtask_notes": f"/api/v1/subtasks/{sid}/notes?limit=50",
            "announcements": "/api/v1/announcements?limit=100",
            "group_notes": f"/api/v1/notes?{g}after={after}&limit=20",
            "ready": f"/api/v1/subtasks?status=ready&{g}limit=20",
            "landed": "/api/v1/landed?limit=20",
            "status": "/api/v1/status",
            "groups": "/api/v1/groups",
            "me": "/api/v1/me",
            "assignments": "/api/v1/assignments",
        }[kind]
        await self.call(f"read {kind}", "GET", path, token)


async def run_seeds_async(url: str, bot_urls: list[str], plan: SeedsPlan, connections: int,
                          max_seconds: float, pids: list[int], pg_pid: int | None) -> dict[str, Any]:
    http = rawhttp.Pool(bot_urls, connections)
    try:
        async with harness.store_on(url, statement_timeout_ms=60_000) as store:
            return await replay_seeds(store, http, url, plan, max_seconds, pids, pg_pid)
    finally:
        await http.close()


async def replay_seeds(store: Database, http: rawhttp.Pool, url: str, plan: SeedsPlan, max_seconds: float,
                       pids: list[int], pg_pid: int | None) -> dict[str, Any]:
    lead = await harness.add_agent(store, "lead", "lead")
    helpers = [await harness.add_agent(store, f"helper-{h:04d}") for h in range(plan.helpers)]
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM (ANALYZE)")
    replay = Replay(plan, http, store, lead.token, [a.token for a in helpers], [a.id for a in helpers],
                    [a.name for a in helpers])
    load0 = harness.load_average()
    meter = CpuMeter(pids, pg_pid)
    replay.t0 = t0 = time.monotonic()
    await replay.lead_setup()
    creators = {g: asyncio.create_task(replay.create_group(g)) for g in replay.groups}

    async def all_created() -> None:
        await asyncio.gather(*creators.values())
        replay.milestones["tree created"] = time.monotonic() - t0
        replay.created_all.set()

    tasks = [asyncio.create_task(all_created()), asyncio.create_task(replay.lead_watch())]
    leaders = {h: g for g, h in plan.leaders.items()}
    tasks += [asyncio.create_task(replay.helper(h, creators[leaders[h]] if h in leaders else None))
              for h in range(plan.helpers)]

    async def progress() -> None:
        last = 0
        while not replay.done.is_set():
            await asyncio.sleep(10)
            n = sum(replay.counts.values())
            el = time.monotonic() - t0
            print(f"[seeds] {el:6.0f}s: {replay.landed}/{replay.total} landed, {n:,} requests "
                  f"({(n - last) / 10:,.0f}/s), load {harness.load_average()}", file=sys.stderr, flush=True)
            last = n

    ticker = asyncio.create_task(progress())
    try:
        await asyncio.wait_for(replay.done.wait(), timeout=max_seconds)
    except TimeoutError:
        print(f"[seeds] the --max-seconds cap ({max_seconds:g} s) ran out", file=sys.stderr)
    wall = time.monotonic() - t0
    cpu = meter.read()
    replay.done.set()
    replay.wake_all()
    await cancel_all([*tasks, ticker])
    with psycopg.connect(url, autocommit=True) as conn:
        statuses = dict(conn.execute("SELECT status::text, count(*) FROM subtasks GROUP BY 1").fetchall())
        depth = conn.execute(
            "WITH RECURSIVE d(id, n) AS (SELECT id, 1 FROM subtasks s WHERE NOT EXISTS "
            "(SELECT 1 FROM subtask_deps x WHERE x.subtask_id = s.id) UNION ALL "
            "SELECT x.subtask_id, d.n + 1 FROM subtask_deps x JOIN d ON x.depends_on_id = d.id) "
            "SELECT max(n) FROM d").fetchone()
    floor = await refused_request_cost(http, pids, pg_pid)
    return {"replay": replay, "wall_s": wall, "load_start": load0, "load_end": harness.load_average(),
            "statuses": statuses, "tree_depth": depth[0] if depth else None, "floor": floor, **cpu}


async def refused_request_cost(http: rawhttp.Pool, pids: list[int], pg_pid: int | None,
                               n: int = 4000) -> dict[str, float]:
    """The server's floor, after the replay: CPU per request for ``GET /api/v1/me`` without a token, which is
    refused (401) before any database work -- the HTTP server, middleware, routing and the error answer."""

    async def burst(count: int) -> None:
        await harness.gather_bounded(http.size, (call(http, "GET", "/api/v1/me", "") for _ in range(count)))

    await burst(300)  # warm
    meter = CpuMeter(pids, pg_pid)
    t = time.monotonic()
    await burst(n)
    rate = n / (time.monotonic() - t)
    cpu = meter.read()
    return {"requests_per_s": rate, **{f"{k}_ms": cpu[f"{k}_cores"] / rate * 1000 for k in ("server", "driver")}}
