"""The offered-load fleet (``python -m bench.fleet --offered 1,10``): the seeds' scale, 1,000 agents, offering a
multiple of the verifier's capacity, with admission control off or on (issue 45).

Each run: a fresh database and server (``MERGEBOT_VERIFIER_WORKERS=W``, the mode's settings, and
``MERGEBOT_ADMISSION=on|off``; a server without that setting ignores it, and the output says so), ``--subtasks``
independent subtasks, ``--agents`` agents (OS threads in this one process; ``bench/fleet/offered.py`` says how they
pace, pipeline, heartbeat and honour typed refusals) each with ``--pipeline`` clones copied before the clock
starts. A run ends when every subtask has landed, when nothing landed for ``--stall-seconds``, or at
``--max-seconds``. The figures (``bench/fleet/offered_report.py``) come from what the agents saw and from the
database after the run.

``--compare-admission`` runs every offered factor with admission off, then on, in one sitting, and prints the
ratios issue 45 asks for (p95 claim -> landed on/off, p95 at the highest factor over the lowest, Jain on/off).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psycopg

from bench.common import harness
from bench.common.gitenv import agent_worktrees
from bench.common.measure import CpuMeter
from bench.fleet.agents import REPO, agent_rate, check_command, make_source
from bench.fleet.landing import Mode, server_settings, setup_landing
from bench.fleet.offered import IDLE_WAIT, Fleet, Keepers, Log, Watcher, offered_agent
from bench.fleet.offered_report import offered_figures
from mergebot.settings import Settings


def add_options(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--offered", default="", metavar="F[,F...]",
                    help="scenario 1 at the seeds' scale: agents paced to offer F x the verifier's capacity (e.g. "
                         "1,10; one run per factor); agents keep their claims with heartbeats and honour typed "
                         "refusals (modes default to 'defaults')")
    ap.add_argument("--pipeline", type=int, default=2, metavar="K",
                    help="--offered: claims an agent holds at once (pushed ones waiting for a verdict included)")
    ap.add_argument("--greedy", default="", metavar="SHARE:G",
                    help="--offered: a share of the agents thinks G times faster (same offered total), e.g. 0.1:10")
    ap.add_argument("--heartbeat", choices=["on", "off"], default="on",
                    help="--offered: the agents' keepers renew their claims at a third of the lease (off: never)")
    ap.add_argument("--admission", choices=["on", "off"], default="on",
                    help="--offered: start the server with MERGEBOT_ADMISSION=on|off (on: the server's default)")
    ap.add_argument("--compare-admission", action="store_true",
                    help="--offered: every factor with admission off, then on, in one sitting, and their ratios")


def factors(args: argparse.Namespace) -> list[float]:
    try:
        out = [float(v) for v in args.offered.split(",") if v.strip()]
    except ValueError as e:
        raise SystemExit(f"--offered takes factors like 1,10 ({e})") from e
    if any(f <= 0 for f in out):
        raise SystemExit("--offered: factors must be over 0")
    return out


def greedy(args: argparse.Namespace) -> tuple[float, float]:
    if not args.greedy:
        return 0.0, 1.0
    try:
        share, g = (float(v) for v in args.greedy.split(":"))
    except ValueError as e:
        raise SystemExit(f"--greedy takes SHARE:G, like 0.1:10 ({e})") from e
    return share, g


def think_times(agents: int, duration: float, workers: int, factor: float, share: float = 0.0,
                g: float = 1.0) -> list[float]:
    """Each agent's mean think time, so that the fleet offers ``factor x workers`` verifier-seconds per second:
    ``sum(duration / think_i) = factor x workers``; the first ``share`` of the agents think ``g`` times faster."""
    fast = round(share * agents)
    base = duration * (agents - fast + fast * g) / (factor * workers)
    return [base / g if i < fast else base for i in range(agents)]


def lease_seconds(env: dict[str, str]) -> float:
    default = Settings.model_fields["lease_seconds"].default
    return float(env.get("MERGEBOT_LEASE_SECONDS", default))


def clones(bot_url: str, token: str, work: Path, agents: int, pipeline: int) -> list[list[Path]]:
    """``pipeline`` clones per agent, copied from one clone before the clock starts."""
    flat = agent_worktrees(bot_url, REPO, token, work, agents * pipeline)
    return [flat[i * pipeline:(i + 1) * pipeline] for i in range(agents)]


def run_offered(server: harness.PgServer, tmp: Path, modes: list[Mode], args: argparse.Namespace
                ) -> list[dict[str, Any]]:
    if args.pipeline < 1:
        raise SystemExit("--pipeline: an agent holds at least one claim")
    settings = ["off", "on"] if args.compare_admission else [args.admission]
    results = []
    for mode in modes:
        for admission in settings:
            for factor in factors(args):
                t = time.monotonic()
                r = run_one(server, tmp, mode, args, factor, admission)
                r["total_s"] = time.monotonic() - t
                print(f"[{mode.name} {factor:g}x admission {admission}] done in {r['total_s']:.0f} s: "
                      f"{r['landed']}/{r['subtasks']} landed", file=sys.stderr, flush=True)
                results.append(r)
    return results


def run_one(server: harness.PgServer, tmp: Path, mode: Mode, args: argparse.Namespace, factor: float,
            admission: str) -> dict[str, Any]:
    name = f"{mode.name}-{factor:g}x-adm-{admission}"
    print(f"\n[{name}] setting up: {args.agents} agents x {args.pipeline} clones, {args.subtasks} subtasks",
          file=sys.stderr, flush=True)
    t_setup = time.monotonic()
    base = tmp / name
    env = {"MERGEBOT_VERIFIER_WORKERS": str(args.workers), **mode.env, "MERGEBOT_ADMISSION": admission,
           **({} if args.retry_failed else {"MERGEBOT_RETRY_FAILED_CHECKS": "0"}),
           **dict(kv.split("=", 1) for kv in args.server_env)}
    try:
        with server.fresh_db(name.replace("-", "_").replace(".", "_"), keep=args.keep) as url:
            tokens = asyncio.run(setup_landing(url, base / "data", make_source(base / "source"), args.agents,
                                               args.subtasks, check_command(args.duration),
                                               max(60, int(args.duration * 20) + 30), 0, mode.risk))
            with harness.Serve(url, base / "data", env) as bot:
                wts = clones(bot.url, tokens[0], base / "work", args.agents, args.pipeline)
                setup_s = time.monotonic() - t_setup
                out = drive(bot, server, url, tokens, wts, mode, args, factor, env)
                note = "" if "admission" in server_settings() else (
                    "this server has no admission setting: MERGEBOT_ADMISSION is ignored")
                out.update(name=name, mode=mode.name, factor=factor, admission=admission, setup_s=setup_s,
                           note=note, server_log=bot.log_excerpt())
            out["trace"] = asyncio.run(harness.trace_of(url))  # the server stopped: its events against the model
            return out
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)


def drive(bot: harness.Serve, server: harness.PgServer, url: str, tokens: list[str], wts: list[list[Path]],
          mode: Mode, args: argparse.Namespace, factor: float, env: dict[str, str]) -> dict[str, Any]:
    share, g = greedy(args)
    thinks = think_times(args.agents, args.duration, args.workers, factor, share, g)
    stop, start = threading.Event(), threading.Event()
    log = Log()
    lease = lease_seconds(env)
    keepers = Keepers(bot.url, lease, log, stop, on=args.heartbeat == "on", agents=args.agents * args.pipeline)
    fleet = Fleet(bot.url, keepers, Watcher(url, stop, keepers, log), log, stop, time.time() + args.max_seconds,
                  args.seed)
    threads = [threading.Thread(target=offered_agent, name=f"agent-{i}", daemon=True,
                                args=(fleet, i, tokens[i], wts[i]),
                                kwargs={"think": thinks[i], "p": agent_rate(args, i), "start": start})
               for i in range(args.agents)]
    t_threads = time.monotonic()
    for t in threads:
        t.start()
    threads_s = time.monotonic() - t_threads
    meter = CpuMeter([bot.proc.pid], server.pid)
    load0 = harness.load_average()
    t0 = time.time()
    start.set()
    stalled = harness.watch_run(
        threads, lambda: sum(1 for e in log.events if e.kind == "landed"), subtasks=args.subtasks,
        deadline=fleet.deadline, stall_seconds=args.stall_seconds, label=f"{mode.name} {factor:g}x",
        progress=lambda: f", {sum(1 for e in log.events if e.kind == 'claim')} claims, {len(log.refusals)} refusals")
    ended = time.time()
    stop.set()
    cpu = meter.read(meter.reading())
    for t in [fleet.watcher.thread, *keepers.threads]:  # their connections end before the database is dropped
        t.join(timeout=10.0)
    db = collect(url)
    # the agents end while the server still answers (an idle claim's long poll ends within IDLE_WAIT): stopped
    # under them, a thousand agents would each tidy a clone at once and hold up the next run
    t_end = time.monotonic()
    for t in threads:
        t.join(timeout=max(0.0, IDLE_WAIT + 10 - (time.monotonic() - t_end)))
    figures = offered_figures(args, t0, ended, db, log, thinks, lease)
    figures.update(run_s=ended - t0, stalled=stalled, agents_ended_s=time.monotonic() - t_end,
                   agents_still_running=sum(t.is_alive() for t in threads), threads_start_s=threads_s, load_start=load0,
                   load_end=harness.load_average(), heartbeat=args.heartbeat, pipeline=args.pipeline,
                   concurrency=f"{args.agents} OS threads (one process), {len(fleet.keepers.threads)} keeper "
                               "thread(s), 1 verdict watcher", **cpu)
    return figures


def collect(url: str) -> dict[str, Any]:
    """What the database says after the run (read-only queries of the bench's own)."""
    with psycopg.connect(url, autocommit=True) as conn:
        def rows(sql: str, *params: Any) -> list[tuple[Any, ...]]:
            return conn.execute(sql, params).fetchall()

        return {
            "agents": dict(rows("SELECT id, name FROM agents WHERE name LIKE 'agent-%%'")),
            "landed": rows("SELECT subtask_id, claim_version, extract(epoch FROM landed_at)::float8 FROM landed "
                           "WHERE repo = %s AND kind = 'land'", REPO),
            "candidates": rows("SELECT id, subtask_id, claim_version, owner_id, status::text, "
                               "extract(epoch FROM queued_at)::float8, extract(epoch FROM started_at)::float8, "
                               "extract(epoch FROM finished_at)::float8 FROM candidates WHERE repo = %s", REPO),
            "jobs": rows("SELECT purpose, extract(epoch FROM created_at)::float8, "
                         "extract(epoch FROM started_at)::float8, extract(epoch FROM finished_at)::float8 "
                         "FROM verify_jobs WHERE repo = %s AND NOT is_group", REPO),
            # each run with the candidates it was started for (a window's batch: ``covers``), and its seconds
            "runs": rows("SELECT coalesce(covers, ARRAY[candidate_id]), "
                         "greatest(0, extract(epoch FROM finished_at - started_at))::float8 FROM verify_jobs "
                         "WHERE repo = %s AND NOT is_group AND candidate_id IS NOT NULL AND started_at IS NOT NULL "
                         "AND finished_at IS NOT NULL", REPO),
            # a batch's run names one candidate; each member it landed is charged to that member's own owner
            "charges": rows("SELECT rc.run_id, CASE WHEN rc.charge = 'landing_run' THEN l.owner_id "
                            "ELSE rc.pusher_id END, rc.seconds, rc.charge, rc.purpose FROM run_charges rc "
                            "LEFT JOIN landed l ON l.id = rc.landed_id WHERE rc.repo = %s", REPO),
            # the recovery loop's moves of a claim whose lease ran out (no actor), as subtask_fence_state reads them
            "lapsed": rows("SELECT subtask_id, claim_version FROM events WHERE kind = 'status' "
                           "AND from_status = 'running' AND to_status IN ('ready', 'failed') AND actor_id IS NULL"),
            "statuses": dict(rows("SELECT status::text, count(*) FROM subtasks GROUP BY 1")),
        }
