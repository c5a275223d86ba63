"""The load benchmark's driver (``python -m bench.load``): the agents' requests at a target rate on keep-alive
connections, and one run of it against a server.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import random
import sys
import time
from typing import Any

import httpx
import psycopg

from bench.common import harness, rawhttp
from bench.common.measure import (
    CpuMeter,
    cpu_by_process,
    descendants,
    fmt,
    other_load,
    pctl,
    status_kb,
)
from bench.load.scene import (
    AGENT_KINDS,
    CLAIM,
    EMPTY,
    FUSED,
    FUSED_EMPTY,
    HEALTHZ,
    HEARTBEAT,
    ME,
    PATHS,
    RELEASE,
    Figures,
    Fleet,
    Sampler,
    Stopped,
)
from mergebot.db.database import Database
from mergebot.naps import cancel_all


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
        await cancel_all(tasks)
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
