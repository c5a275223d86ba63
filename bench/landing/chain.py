"""Where the time between landings goes: a chain of dependent subtasks, step by step.

A real ``mergebot serve`` (serial queue), real git pushes over HTTP, a check that is ``sleep D`` (``--duration``,
1 s) under the sandbox ``auto`` picks. ``N`` subtasks (``--steps``, 15) each depend on the one before, so only one
is ever ready; ``--agents`` agents (3; threads, as LLM agents' drivers would be, each with its own worktree)
loop: ``mergebot.agent.start`` waiting for work (``wait``: the claim answers when the dependency lands), commit a
file, ``agent.push`` and wait for the verdict, until the chain has landed. Each step is read back from the
database's own timestamps (so nothing is timed by the agent's clock):

* **released**: the previous subtask's ``landed_at`` -> this one's ``ready`` event (the landing's transaction);
* **claimed**: ``ready`` -> ``claimed_at`` (the waiting claim wakes, claims);
* **pushed**: ``claimed_at`` -> the candidate's ``pushed_at`` (the worktree moved to the claim's branch, the
  commit, ``git push`` until its request reaches the bot);
* **to the queue**: ``pushed_at`` -> ``queued_at`` (receive-pack, the pre-receive judgement, post-receive);
* **merged**: ``queued_at`` -> ``merged_at`` (the queue takes it, merges it in memory);
* **picked up**: ``merged_at`` -> the verify job's ``created_at``;
* **dispatched**: the job's ``created_at`` -> ``started_at`` (a worker claims it);
* **check**: ``started_at`` -> ``finished_at``, of which ``D`` is the check's own time and the rest the verifier's
  (the slot moved to the commit, the sandbox started, the overlay read);
* **landed**: the job's ``finished_at`` -> ``landed_at`` (the verdict, the intent, main's compare-and-swap, the
  landed row).

``--repo-size`` runs it on a repository of a real project's size (``bench/landing/realsize.py``: about 300 files, 5 MB
of history, a pytest suite of 240 tests taking about 3 s) with that suite as the check; ``--workers`` sets the verifier
workers (1). Printed: the median of each step over the chain (the first step, which has no previous landing, is left
out), the whole step (landing to landing), the bot's share (the whole step minus the check's own time: ``D``, or the
suite's measured time), and the issue's figure: (wall - N x check) / N, the wall from the agents' start to the last
landing (target: at most 0.4 s per step). Prints figures; asserts nothing about timing. Run from the repository root::

    python -m bench.landing.chain         # 15 steps, D = 1 s
    python -m bench.landing.chain --steps 8 --duration 0.5
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import psycopg

from bench.common import harness
from bench.common.gitenv import agent_worktrees, commit_all, git_env, run_git
from bench.landing import realsize
from mergebot import agent
from mergebot.client import Client
from mergebot.landing.main.repos import repos_root

REPO = "chain"
STEPS = ("released", "claimed", "pushed", "to the queue", "merged", "picked up", "dispatched", "check", "landed")


def make_source(path: Path) -> Path:
    (path / "chain").mkdir(parents=True)
    (path / "chain" / ".keep").write_text("")
    return commit_all(path)


TARGET = 0.4  # seconds per step beyond the check (issue 34; it was 0.5)


def agent_loop(url: str, token: str, wt: Path, done: threading.Event, landed: list[int], errors: list[str],
               steps: int) -> None:
    client = Client(url, token, timeout=120.0)
    try:
        while not done.is_set():
            got = agent.start(client, url, token, REPO, wt, wait=2)
            if got is None:
                continue  # the chain's next step is someone else's, or not ready yet
            sid = got[0].subtask_id
            (wt / "chain").mkdir(exist_ok=True)  # the real-size repository has no chain/ yet
            (wt / "chain" / f"{sid}.txt").write_text(f"step {sid}\n")
            run_git(["add", "-A"], wt)
            run_git(["commit", "-q", "-m", f"step {sid}"], wt)
            res = agent.push(client, wt, wait=120, progress=False)
            if res.get("status") != "landed":
                errors.append(f"subtask {sid}: {res.get('status')} {res.get('reason')}")
                done.set()
                return
            landed.append(sid)
            if len(landed) >= steps:
                done.set()
    finally:
        client.close()


def steps_of(url: str) -> list[dict[str, float]]:
    """Each chain step's parts, in seconds, from the database's timestamps."""
    q = """
    SELECT s.id,
           extract(epoch FROM (SELECT min(e.at) FROM events e WHERE e.subtask_id = s.id AND e.to_status = 'ready')),
           extract(epoch FROM s.claimed_at),
           extract(epoch FROM coalesce(c.pushed_at, c.queued_at)), extract(epoch FROM c.queued_at),
           extract(epoch FROM coalesce(c.merged_at, c.queued_at)),
           extract(epoch FROM j.created_at), extract(epoch FROM j.started_at), extract(epoch FROM j.finished_at),
           extract(epoch FROM l.landed_at), coalesce((j.result->>'duration_ms')::float8 / 1000, 0)
    FROM subtasks s
    JOIN landed l ON l.subtask_id = s.id
    JOIN candidates c ON c.subtask_id = s.id AND c.status = 'landed'
    JOIN LATERAL (SELECT * FROM verify_jobs v WHERE v.candidate_id = c.id AND v.purpose = 'candidate'
                  ORDER BY v.id LIMIT 1) j ON true
    ORDER BY s.id"""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(q).fetchall()
    out = []
    for prev, row in itertools.pairwise(rows):
        _, ready, claimed, pushed, queued, merged, created, started, finished, landed, own = (float(x) for x in row)
        out.append(dict(zip(STEPS, (ready - float(prev[9]), claimed - ready, pushed - claimed, queued - pushed,
                                    merged - queued, created - merged, started - created, finished - started,
                                    landed - finished), strict=True),
                        whole=landed - float(prev[9]), own=own))
    return out


async def setup(url: str, data: Path, source: Path, steps: int, command: str, agents: int) -> list[str]:
    async with harness.store_on(url, statement_timeout_ms=60_000) as store:
        tokens = [(await harness.add_agent(store, f"chain-agent-{i}")).token for i in range(agents)]
        previous: list[int] = []
        for i in range(steps):
            sub, _ = await store.subtasks.create_subtask(actor_id=None, title=f"chain step {i}", depends_on=previous)
            previous = [sub.id]
        await harness.add_bench_repo(store, repos_root(data), name=REPO, source=source,
                                     command=command, timeout_s=120)
        return tokens


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.landing.chain", description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=15)
    ap.add_argument("--duration", type=float, default=1.0, help="the check's seconds")
    ap.add_argument("--agents", type=int, default=3)
    ap.add_argument("--workers", type=int, default=1, help="verifier workers in mergebot serve")
    ap.add_argument("--repo-size", action="store_true", dest="repo_size",
                    help="a repository of a real project's size, its pytest suite as the check "
                         "(bench/landing/realsize.py)")
    args = ap.parse_args(argv)
    command = realsize.CHECK if args.repo_size else f"sleep {args.duration:g}"
    print(f"chain: {args.steps} dependent subtasks, {args.agents} agents, {args.workers} worker(s), check "
          f"`{command}`{' on the real-size repository' if args.repo_size else ''}; {harness.machine()}, "
          f"load {harness.load_average()}")
    with harness.scratch("mb-chain-") as tmp:
        git_env(tmp / "home")
        with harness.PgServer(tmp, prefix="mb_bench_chain") as server, server.fresh_db("chain") as url:
            data = tmp / "data"
            source = realsize.make(tmp / "source") if args.repo_size else make_source(tmp / "source")
            tokens = asyncio.run(setup(url, data, source, args.steps, command, args.agents))
            env = {"MERGEBOT_SPECULATION_WINDOW": "1", "MERGEBOT_VERIFIER_WORKERS": str(args.workers)}
            with harness.Serve(url, data, env) as bot:
                wts = agent_worktrees(bot.url, REPO, tokens[0], tmp / "work", args.agents)
                errors: list[str] = []
                landed: list[int] = []
                done = threading.Event()
                t0 = time.time()
                threads = [threading.Thread(target=agent_loop, args=(bot.url, tokens[i], wts[i], done, landed,
                                                                      errors, args.steps))
                           for i in range(args.agents)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                parts = steps_of(url)
                with psycopg.connect(url, autocommit=True) as conn:
                    last = conn.execute("SELECT extract(epoch FROM max(landed_at))::float8 FROM landed").fetchone()
                wall = (float(last[0]) if last and last[0] else time.time()) - t0
    if errors:
        print("errors:", errors)
    if not parts:
        print("no chain steps landed")
        return
    med: dict[str, Any] = {k: statistics.median(p[k] for p in parts) for k in (*STEPS, "whole", "own")}
    check = med["own"] if args.repo_size else args.duration  # the check's own time: the suite's, as measured
    print(f"\n{len(parts) + 1} steps landed in {wall:.1f} s; per step (median of {len(parts)}):")
    for k in STEPS:
        extra = f"   (the check's own {check:.3f} s + {med[k] - check:.3f} s of the verifier)" \
            if k == "check" else ""
        print(f"  {k:14} {med[k]:7.3f} s{extra}")
    print(f"  {'whole step':14} {med['whole']:7.3f} s;  the bot's share (not the check's own time): "
          f"{med['whole'] - check:.3f} s")
    beyond = (wall - args.steps * check) / args.steps
    print(f"(wall - N x check) / N = ({wall:.2f} - {args.steps} x {check:.3f}) / {args.steps} = {beyond:.3f} s "
          f"per step beyond the check (target <= {TARGET:g} s): {'met' if beyond <= TARGET else 'NOT met'}")


if __name__ == "__main__":
    main()
