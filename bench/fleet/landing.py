"""The fleet benchmark's landing scenario (``python -m bench.fleet``): its modes, one run of a mode on a fresh server
and database, and the figures read from the database after it.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from bench.common import harness
from bench.common.gitenv import agent_worktrees
from bench.common.measure import CpuMeter, pctl
from bench.fleet.agents import REPO, VERIFY_PURPOSES, AgentRun, Idle, agent_loop, agent_rate, check_command, make_source
from mergebot.landing.intake import risk
from mergebot.landing.main.repos import repos_root
from mergebot.rules import RulesChange
from mergebot.settings import Settings


def window_bound(window: int, p: float, duration: float) -> float:
    """Landings per hour when a window of ``window`` candidates is checked per check duration."""
    return 3600.0 / duration * sum((1 - p) ** k for k in range(1, window + 1))


def server_settings() -> set[str]:
    """The settings this checkout's server knows (MERGEBOT_<NAME> for each)."""
    return set(Settings.model_fields)


# -- scenario 1: landing throughput ---------------------------------------------------------------------------


@dataclass
class Mode:
    name: str
    env: dict[str, str]
    window: int | None  # for the model bound; None: no bound printed
    note: str = ""
    risk: bool = False  # the repository's queue orders and batches by the failure estimates (``repo set --risk``)


def modes_for(names: list[str], workers: int, batch: int) -> list[Mode]:
    known = server_settings()
    out = []
    for name in names:
        if name == "serial":
            out.append(Mode(name, {"MERGEBOT_SPECULATION_WINDOW": "1", "MERGEBOT_BATCH_SIZE": "1"}, 1))
        elif name == "speculative":
            note = "" if "speculation_window" in known else (
                "this server has no speculation_window setting: MERGEBOT_SPECULATION_WINDOW is ignored, "
                "so it ran serially")
            out.append(Mode(name, {"MERGEBOT_SPECULATION_WINDOW": str(workers), "MERGEBOT_BATCH_SIZE": "1"}, workers,
                            note))
        elif name == "batched":
            note = "" if "batch_size" in known else (
                "this server has no batch_size setting: MERGEBOT_BATCH_SIZE is ignored, so it ran serially")
            out.append(Mode(name, {"MERGEBOT_BATCH_SIZE": str(batch), "MERGEBOT_SPECULATION_WINDOW": "1"}, None, note))
        elif name == "speculative-batched":  # W runs in flight, each covering up to B candidates
            out.append(Mode(name, {"MERGEBOT_BATCH_SIZE": str(batch), "MERGEBOT_SPECULATION_WINDOW": str(workers)},
                            None))
        elif name == "defaults":  # what a new server does: the window at its workers, risk-aware batches of up to 4
            out.append(Mode(name, {}, None, risk=True))
        elif name == "risk":  # speculative-batched, with batches, order and bisection shaped by the estimates
            out.append(Mode(name, {"MERGEBOT_BATCH_SIZE": str(batch), "MERGEBOT_SPECULATION_WINDOW": str(workers)},
                            None, risk=True))
        else:
            raise SystemExit(f"unknown mode {name!r} (serial, speculative, batched, speculative-batched, risk, "
                             "defaults)")
    return out


async def setup_landing(url: str, data: Path, source: Path, agents: int, subtasks: int,
                        command: str, timeout_s: int, depends: int = 0, risk: bool = False) -> list[str]:
    """Agents, the subtasks (with ``depends`` K, subtask i waits for subtask i-K: K chains) and the repository."""
    async with harness.store_on(url, statement_timeout_ms=60_000) as store:
        tokens = [(await harness.add_agent(store, f"agent-{i:04d}")).token for i in range(agents)]
        ids: list[int] = []
        for i in range(subtasks):
            after = [ids[i - depends]] if depends and i >= depends else []
            sub, _ = await store.subtasks.create_subtask(actor_id=None, title=f"fleet work item {i}", depends_on=after)
            ids.append(sub.id)
        await harness.add_bench_repo(store, repos_root(data), name=REPO, source=source, command=command,
                                     timeout_s=timeout_s)
        await store.repos.update_repo(REPO, RulesChange.of(risk_aware=risk))
        return tokens


def collect_landing(url: str) -> dict[str, Any]:
    with psycopg.connect(url, autocommit=True) as conn:
        landed = conn.execute("SELECT subtask_id, extract(epoch FROM landed_at)::float8 FROM landed "
                              "WHERE repo = %s", (REPO,)).fetchall()
        cands = conn.execute("SELECT id, subtask_id, status::text, extract(epoch FROM queued_at)::float8 "
                             "FROM candidates WHERE repo = %s ORDER BY id", (REPO,)).fetchall()
        jobs = conn.execute(
            "SELECT purpose, coalesce(outcome, status::text), extract(epoch FROM started_at)::float8, "
            "extract(epoch FROM finished_at)::float8, (result->>'duration_ms')::float8, result->>'sandbox', "
            "extract(epoch FROM created_at)::float8 FROM verify_jobs WHERE repo = %s", (REPO,)).fetchall()
        statuses = dict(conn.execute("SELECT status::text, count(*) FROM subtasks GROUP BY 1").fetchall())
        red = conn.execute("SELECT red_since, paused_reason FROM repos WHERE name = %s", (REPO,)).fetchone()
        findings = conn.execute("SELECT kind, detail::text FROM reconcile_findings LIMIT 5").fetchall()
        # the estimate against what happened: landed, or rejected for a failure of its own check
        judged = conn.execute("SELECT failure_risk, status = 'rejected' FROM candidates WHERE repo = %s "
                              "AND failure_risk IS NOT NULL AND (status = 'landed' OR verdict->>'kind' = ANY(%s))",
                              (REPO, list(risk.OWN_FAILURES))).fetchall()
        passed_over = conn.execute("SELECT coalesce(max(passed_over), 0) FROM candidates WHERE repo = %s",
                                   (REPO,)).fetchone()
    return {"landed": landed, "candidates": cands, "jobs": jobs, "statuses": statuses,
            "red": red, "findings": findings, "judged": [(float(p), bool(f)) for p, f in judged],
            "passed_over_max": passed_over[0] if passed_over else 0}


def max_overlap(intervals: list[tuple[float, float]]) -> int:
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    best = cur = 0
    for _, d in events:
        cur += d
        best = max(best, cur)
    return best


def landing_figures(mode: Mode, args: argparse.Namespace, t0: float, ended: float, db: dict[str, Any],
                    runs: list[AgentRun], cpu: dict[str, float]) -> dict[str, Any]:
    landed_at = {sid: at for sid, at in db["landed"]}
    n = len(landed_at)
    times = sorted(landed_at.values())
    # All landed: the wall ends at the last landing. Not all: it ends when the run did (the cap, or the agents gave up).
    wall = (times[-1] - t0) if times and n >= args.subtasks else ended - t0
    rate = n / wall * 3600 if wall > 0 else 0.0
    steady = float("nan")
    if n >= 10:
        i10, i90 = int(0.1 * (n - 1)), int(0.9 * (n - 1))
        if times[i90] > times[i10]:
            steady = (i90 - i10) / (times[i90] - times[i10]) * 3600
    first_push: dict[int, float] = {}
    final_lat, first_lat = [], []
    statuses: Counter[str] = Counter()
    for _cid, sid, status, queued in db["candidates"]:
        statuses[status] += 1
        first_push.setdefault(sid, queued)
        if status == "landed" and sid in landed_at:
            final_lat.append(landed_at[sid] - queued)
    for sid, at in landed_at.items():
        if sid in first_push:
            first_lat.append(at - first_push[sid])
    pushes = [p for r in runs for p in r.pushes]
    seen = [p.seen_at - p.queued_at for p in pushes if p.status == "landed" and p.queued_at is not None]
    agent_push = [p.seen_at - p.pushed_at for p in pushes if p.status == "landed"]
    by_purpose: Counter[str] = Counter(j[0] for j in db["jobs"])
    outcomes: Counter[str] = Counter(f"{j[0]}:{j[1]}" for j in db["jobs"])
    verify_runs = sum(by_purpose[k] for k in VERIFY_PURPOSES)
    # a job cancelled before a worker took it never ran: counted above (it was asked for), not here
    started_runs = sum(1 for j in db["jobs"] if j[0] in VERIFY_PURPOSES and j[2] is not None)
    checks = [j for j in db["jobs"] if j[0] in VERIFY_PURPOSES and j[2] is not None and j[3] is not None]
    check_s = [j[4] / 1000 for j in checks if j[4] is not None]
    busy = sum(j[3] - j[2] for j in checks)
    # Where a run's time goes: waiting for a free worker (queued -> claimed), and every worker's busy share,
    # post-land runs included (they take a worker only when no run that decides a landing is queued).
    waits = [j[2] - j[6] for j in checks]
    first_queued = min((c[3] for c in db["candidates"]), default=t0) - t0
    every = [j for j in db["jobs"] if j[2] is not None and j[3] is not None]
    busy_all = sum(j[3] - j[2] for j in every)
    sandboxes = Counter(str(j[5]) for j in db["jobs"] if j[5])
    d_eff = statistics.fmean(check_s) if check_s else float("nan")
    bound = window_bound(mode.window, args.fail_rate, args.duration) if mode.window else float("nan")
    bound_eff = window_bound(mode.window, args.fail_rate, d_eff) if mode.window and check_s else float("nan")
    errors = [e for r in runs for e in r.errors]
    refusals = [e for r in runs for e in r.refusals]
    return {
        "mode": mode.name, "env": mode.env, "note": mode.note, "window": mode.window,
        "subtasks": args.subtasks, "landed": n, "wall_s": wall, "landings_per_hour": rate,
        "steady_landings_per_hour": steady,
        "push_to_landed_s": {"median": pctl(final_lat, 0.5), "p95": pctl(final_lat, 0.95), "n": len(final_lat)},
        "first_push_to_landed_s": {"median": pctl(first_lat, 0.5), "p95": pctl(first_lat, 0.95)},
        "push_to_agent_saw_landed_s": {"median": pctl(seen, 0.5), "p95": pctl(seen, 0.95)},
        "agent_push_call_s": {"median": pctl(agent_push, 0.5), "p95": pctl(agent_push, 0.95)},
        "verifier_runs": dict(by_purpose), "verifier_outcomes": dict(outcomes),
        "verifier_runs_per_landed": verify_runs / n if n else float("nan"),
        "started_runs_per_landed": started_runs / n if n else float("nan"),
        "check_run_s_mean": d_eff, "checks_at_once_max": max_overlap([(j[2], j[3]) for j in checks]),
        "checks_at_once_mean": busy / wall if wall > 0 else float("nan"), "sandbox": dict(sandboxes),
        "workers_busy_mean": busy_all / wall if wall > 0 else float("nan"),
        # the fleet's warm-up: agents claim, fetch and commit before the first push reaches the queue
        "first_queued_s": first_queued,
        "first_run_s": min((j[2] for j in checks), default=t0) - t0,
        "from_first_push_per_hour": n / (wall - first_queued) * 3600 if n and wall > first_queued else float("nan"),
        "run_queued_s": {"median": pctl(waits, 0.5), "p95": pctl(waits, 0.95)},
        "candidates": dict(statuses), "pushes": len(pushes), "claims": sum(r.claims for r in runs),
        "claim_s_median": pctl([x for r in runs for x in r.claim_s], 0.5),
        "commit_s_median": pctl([x for r in runs for x in r.commit_s], 0.5),
        "bound_per_hour": bound, "vs_bound": rate / bound if bound == bound and bound > 0 else float("nan"),
        "bound_at_measured_check_per_hour": bound_eff,
        "vs_bound_at_measured_check": rate / bound_eff if bound_eff == bound_eff and bound_eff > 0 else float("nan"),
        "subtask_statuses": db["statuses"], "main_red": db["red"][0] if db["red"] else None,
        "findings": [list(f) for f in db["findings"]], "errors": errors[:20], "error_count": len(errors),
        "refused_pushes": len(refusals), "refusals": refusals[:10],
        "calibration": risk.calibration(db["judged"]), "passed_over_max": db["passed_over_max"],
        **cpu,
    }


def run_landing_mode(server: harness.PgServer, tmp: Path, mode: Mode, args: argparse.Namespace,
                     idle: Idle | None = None, run_no: int = 0) -> dict[str, Any]:
    print(f"\n[{mode.name}] setting up: {args.agents} agents, {args.subtasks} subtasks, "
          f"env {' '.join(f'{k}={v}' for k, v in mode.env.items())}"
          + (f", idle agents {idle[0]} {idle[1]:g} s" if idle else ""), file=sys.stderr, flush=True)
    t_setup = time.monotonic()
    base = tmp / (f"{mode.name}-{idle[0]}{idle[1]:g}-{run_no}" if idle else mode.name)
    data = base / "data"
    command = check_command(args.duration)
    env = {"MERGEBOT_VERIFIER_WORKERS": str(args.workers), **mode.env,
           **({} if args.retry_failed else {"MERGEBOT_RETRY_FAILED_CHECKS": "0"}),
           **dict(kv.split("=", 1) for kv in args.server_env)}
    try:
        with server.fresh_db(mode.name, keep=args.keep) as url:
            tokens = asyncio.run(setup_landing(url, data, make_source(base / "source"), args.agents, args.subtasks,
                                               command, max(60, int(args.duration * 20) + 30), args.depends,
                                               mode.risk))
            with harness.Serve(url, data, env) as bot:
                return run_landing_agents(bot, server, url, base, tokens, t_setup, mode, args, idle)
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)


def run_landing_agents(bot: harness.Serve, server: harness.PgServer, url: str, base: Path, tokens: list[str],
                       t_setup: float, mode: Mode, args: argparse.Namespace,
                       idle: Idle | None = None) -> dict[str, Any]:
    wts = agent_worktrees(bot.url, REPO, tokens[0], base / "work", args.agents)
    setup_s = time.monotonic() - t_setup
    load0 = harness.load_average()
    start, stop = threading.Event(), threading.Event()
    runs = [AgentRun() for _ in range(args.agents)]
    deadline = time.time() + args.max_seconds
    threads = [threading.Thread(target=agent_loop, name=f"agent-{i}", daemon=True,
                                args=(bot.url, tokens[i], wts[i]),
                                kwargs={"seed": args.seed, "p": agent_rate(args, i), "deadline": deadline,
                                        "max_pushes": 10, "start": start, "stop": stop, "run": runs[i],
                                        "poll": args.poll, "idle": idle})
               for i in range(args.agents)]
    for t in threads:
        t.start()
    meter = CpuMeter([bot.proc.pid], server.pid)
    t0 = time.time()
    start.set()
    stalled = harness.watch_run(threads, lambda: sum(1 for r in runs for p in r.pushes if p.status == "landed"),
                                subtasks=args.subtasks, deadline=deadline, stall_seconds=args.stall_seconds,
                                label=mode.name, progress=lambda: "")
    ended = time.time()
    stop.set()
    end = meter.reading()
    cpu = meter.read(end)
    span = end.at - meter.start.at
    # Let the last post-land checks finish before reading (they are not part of the figures).
    time.sleep(min(5.0, args.duration * 3 + 0.5))
    db = collect_landing(url)
    figures = landing_figures(mode, args, t0, ended, db, runs, cpu)
    figures["trace"] = asyncio.run(harness.trace_of(url))  # the run's events held to the protocol's model
    figures.update(setup_s=setup_s, run_s=ended - t0, load_start=load0, load_end=harness.load_average(),
                   server_log=bot.log_excerpt(), stalled=stalled, idle=f"{idle[0]} {idle[1]:g} s" if idle else None,
                   empty_claims=sum(r.empty_claims for r in runs),
                   server_cpu_s_per_landed=cpu["server_cores"] * span / max(1, figures["landed"]),
                   postgres_cpu_s_per_landed=cpu["postgres_cores"] * span / max(1, figures["landed"]))
    return figures
