"""The fleet benchmark's agents (``python -m bench.fleet``): the repository and its synthetic check, and the agent loop
that claims, writes, pushes over HTTP, waits for the verdict and fixes what was rejected.
"""

from __future__ import annotations

import argparse
import random
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.common.gitenv import commit_all, run_git
from mergebot import agent
from mergebot.agent.submit import STOPS
from mergebot.client import ApiError, Client

REPO = "fleet"
VERIFY_PURPOSES = ("candidate", "retry", "base")


# -- the fleet's failure rates, its repository and its check ---------------------------------------------------


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


def check_command(duration: float) -> str:
    """``sleep D``, then fail when any ``work/*.fail`` is in the tree (attributable to the candidate adding it)."""
    return (f'sleep {duration:g}; for f in work/*.fail; do if [ -e "$f" ]; then echo "failing marker: $f"; '
            "exit 1; fi; done; exit 0")


def make_source(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "README.md").write_text("The fleet benchmark's repository: each subtask adds work/<id>.txt.\n")
    (path / "work").mkdir()
    (path / "work" / ".keep").write_text("")
    return commit_all(path)


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
