"""Agents that pick overlapping work: footprints off and on, in one sitting.

A real ``mergebot serve`` (serial queue unless ``--window``), real git pushes over HTTP, a real check (``sleep D``).
The repository has ``F`` files ``area/f<k>.txt``; ``S`` subtasks are created in runs of ``S/F`` per file (related
work is created together, so the claim's natural order hands out the same file to agents working at once). Each
subtask rewrites its file's first line. ``A`` agents (threads) loop: ``mergebot.agent.start`` (claim + worktree),
think for ``--think`` seconds, edit, commit, ``agent.push`` and wait for the verdict; a conflict is redone on the
new main (fetch, reset, edit again) and pushed again, as an agent does what the verdict says.

Variants, each on a fresh database and repository, alternated ``--rounds`` times:

* ``off``: subtasks without footprints;
* ``on``: each subtask carries its file as its footprint (``paths``), so the claim prefers work whose footprint
  overlaps no running subtask's.

Printed per variant (medians over the rounds): conflict rejections per landing (candidates rejected with kind
``conflict``), wasted verifier runs per landing (runs for candidates that did not land), landings per hour, and
``on`` against ``off``. Target: footprints cut conflict rejections per landing by at least half at equal
landings/h (this machine drifts about 8% between runs: "equal" is within 10%). Prints figures; asserts nothing
about timing. Run from the repository root::

    python -m bench.fleet.coordination               # A=8, F=8, S=48, think 2 s, check 0.5 s, 2 rounds
    python -m bench.fleet.coordination --quick       # A=4, F=4, S=16, 1 round
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg

from bench.common import harness
from bench.common.gitenv import agent_worktrees, commit_all, git_env, run_git
from mergebot import agent
from mergebot.client import ApiError, Client
from mergebot.landing.main.repos import repos_root

REPO = "coord"
TARGET_CUT = 0.5  # footprints: conflict rejections per landing at most half of what they are without
EQUAL = 0.10  # landings/h within 10% counts as equal (the machine drifts about 8% between runs)


def make_source(path: Path, files: int) -> Path:
    (path / "area").mkdir(parents=True)
    for k in range(files):
        (path / "area" / f"f{k}.txt").write_text(f"file {k}: initial\nline 2\nline 3\n")
    return commit_all(path)


@dataclass
class AgentRun:
    landed: int = 0
    redone: int = 0
    errors: list[str] = field(default_factory=list)


def edit(wt: Path, path: str, sid: int, attempt: int) -> None:
    f = wt / path
    lines = f.read_text().splitlines()
    lines[0] = f"{lines[0].split(':')[0]}: set by subtask {sid} (attempt {attempt})"
    f.write_text("\n".join(lines) + "\n")
    run_git(["add", "-A"], wt)
    run_git(["commit", "-q", "-m", f"subtask {sid}: {path}"], wt)


def agent_loop(url: str, token: str, wt: Path, files: dict[int, str], think: float, deadline: float,
               start: threading.Event, run: AgentRun) -> None:
    client = Client(url, token, timeout=120.0)
    start.wait()
    try:
        while time.time() < deadline:
            try:
                got = agent.start(client, url, token, REPO, wt)
            except (RuntimeError, ApiError, httpx.HTTPError) as e:
                run.errors.append(f"start: {str(e)[:200]}")
                time.sleep(1.0)
                continue
            if got is None:
                return
            claim = got[0]
            path = files[claim.subtask_id]
            time.sleep(think)  # the agent thinks, then writes
            edit(wt, path, claim.subtask_id, 0)
            for attempt in range(1, 20):
                res = agent.push(client, wt, wait=max(1.0, deadline - time.time()), progress=False)
                kind = (res.get("verdict") or {}).get("kind")
                if res.get("status") == "landed":
                    run.landed += 1
                    break
                if kind == "conflict":  # what the verdict says: redo the change on the new main
                    run.redone += 1
                    run_git(["fetch", "-q", "origin"], wt)
                    run_git(["reset", "-q", "--hard", "origin/main"], wt)
                    edit(wt, path, claim.subtask_id, attempt)
                    continue
                run.errors.append(f"subtask {claim.subtask_id}: {res.get('status')} {kind}: "
                                  f"{str(res.get('reason'))[:200]}")
                break
    finally:
        client.close()


async def setup(url: str, data: Path, source: Path, args: argparse.Namespace, footprints: bool
                ) -> tuple[list[str], dict[int, str]]:
    async with harness.store_on(url, statement_timeout_ms=60_000) as store:
        tokens = [(await harness.add_agent(store, f"agent-{i:03d}")).token for i in range(args.agents)]
        per_file = args.subtasks // args.files
        files: dict[int, str] = {}
        for k in range(args.files):
            path = f"area/f{k}.txt"
            for j in range(per_file):
                sid = await harness.add_subtask(store, f"change file {k}, part {j}",
                                                paths=[path] if footprints else ())
                files[sid] = path
        await harness.add_bench_repo(store, repos_root(data), name=REPO, source=source,
                                     command=f"sleep {args.duration:g}", timeout_s=60)
        return tokens, files


def collect(url: str) -> dict[str, Any]:
    with psycopg.connect(url, autocommit=True) as conn:
        landed = conn.execute("SELECT count(*) FROM landed WHERE repo = %s", (REPO,)).fetchone()[0]  # type: ignore[index]
        conflicts = conn.execute("SELECT count(*) FROM candidates WHERE repo = %s AND status = 'rejected' "
                                 "AND verdict->>'kind' = 'conflict'", (REPO,)).fetchone()[0]  # type: ignore[index]
        wasted = conn.execute(
            "SELECT count(*) FROM verify_jobs j JOIN candidates c ON c.id = j.candidate_id "
            "WHERE j.repo = %s AND j.purpose IN ('candidate', 'retry') AND c.status <> 'landed'",
            (REPO,)).fetchone()[0]  # type: ignore[index]
        runs = conn.execute("SELECT count(*) FROM verify_jobs WHERE repo = %s AND purpose IN ('candidate', 'retry')",
                            (REPO,)).fetchone()[0]  # type: ignore[index]
    return {"landed": landed, "conflicts": conflicts, "wasted_runs": wasted, "runs": runs}


def run_variant(server: harness.PgServer, tmp: Path, name: str, args: argparse.Namespace, n: int) -> dict[str, Any]:
    base = tmp / f"{name}-{n}"
    data = base / "data"
    env = {"MERGEBOT_VERIFIER_WORKERS": str(args.workers), "MERGEBOT_SPECULATION_WINDOW": str(args.window),
           "MERGEBOT_RETRY_FAILED_CHECKS": "0"}
    try:
        with server.fresh_db(f"{name}{n}") as url:
            tokens, files = asyncio.run(setup(url, data, make_source(base / "source", args.files), args,
                                              footprints=name == "on"))
            with harness.Serve(url, data, env) as bot:
                wts = agent_worktrees(bot.url, REPO, tokens[0], base / "work", args.agents)
                start = threading.Event()
                runs = [AgentRun() for _ in tokens]
                deadline = time.time() + args.max_seconds
                threads = [threading.Thread(target=agent_loop, daemon=True,
                                            args=(bot.url, tokens[i], wts[i], files, args.think, deadline, start,
                                                  runs[i])) for i in range(args.agents)]
                for t in threads:
                    t.start()
                t0 = time.time()
                start.set()
                for t in threads:
                    t.join()
                wall = time.time() - t0
                figures = collect(url)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    landed = max(1, figures["landed"])
    out = {"variant": name, "round": n, **figures, "wall_s": wall, "landings_per_h": figures["landed"] / wall * 3600,
           "conflicts_per_landing": figures["conflicts"] / landed,
           "wasted_per_landing": figures["wasted_runs"] / landed,
           "errors": [e for r in runs for e in r.errors][:5]}
    print(f"[{name} #{n}] {figures['landed']}/{args.subtasks} landed in {wall:.1f} s: "
          f"{out['conflicts_per_landing']:.2f} conflict rejections/landing, "
          f"{out['wasted_per_landing']:.2f} wasted runs/landing, {out['landings_per_h']:.0f} landings/h"
          + (f"; errors: {out['errors']}" if out["errors"] else ""), flush=True)
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench.fleet.coordination", description=__doc__.split("\n\n")[0])
    ap.add_argument("--agents", type=int, default=8)
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--subtasks", type=int, default=48)
    ap.add_argument("--think", type=float, default=2.0, help="seconds an agent thinks between claim and push")
    ap.add_argument("--duration", type=float, default=0.5, help="the check's seconds")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--window", type=int, default=1, help="MERGEBOT_SPECULATION_WINDOW")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-seconds", type=float, default=900.0, dest="max_seconds")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    if args.quick:
        args.agents, args.files, args.subtasks, args.rounds = 4, 4, 16, 1
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    print(f"coordination: {args.agents} agents, {args.files} files, {args.subtasks} subtasks, think {args.think:g} s, "
          f"check {args.duration:g} s, {args.workers} workers, window {args.window}, {args.rounds} round(s); "
          f"{harness.machine()}, load {harness.load_average()}")
    results: list[dict[str, Any]] = []
    with harness.scratch("mb-coord-") as tmp:
        git_env(tmp / "home")
        with harness.PgServer(tmp, prefix="mb_bench_coord") as server:
            for n in range(args.rounds):
                for name in ("off", "on") if n % 2 == 0 else ("on", "off"):
                    results.append(run_variant(server, tmp, name, args, n))

    def med(name: str, key: str) -> float:
        return float(statistics.median(r[key] for r in results if r["variant"] == name))

    print("\nvariant  conflicts/landing  wasted runs/landing  landings/h   (medians)")
    for name in ("off", "on"):
        print(f"{name:7}  {med(name, 'conflicts_per_landing'):17.2f}  {med(name, 'wasted_per_landing'):19.2f}  "
              f"{med(name, 'landings_per_h'):10.0f}")
    off_c, on_c = med("off", "conflicts_per_landing"), med("on", "conflicts_per_landing")
    ratio = on_c / off_c if off_c else float("nan")
    speed = med("on", "landings_per_h") / med("off", "landings_per_h")
    print(f"\nfootprints on / off: conflict rejections per landing {ratio:.2f}x (target <= {TARGET_CUT:g}x), "
          f"landings/h {speed:.2f}x (equal: >= {1 - EQUAL:.2f}x)")
    met_cut = off_c > 0 and ratio <= TARGET_CUT
    print(f"target {'met' if met_cut and speed >= 1 - EQUAL else 'NOT met'}")


if __name__ == "__main__":
    main()
