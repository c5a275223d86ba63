"""Named checks against the same checks glued into one command (issue 43): push to landed, per landing.

One real ``mergebot serve`` with three verifier workers (``--workers``), two repositories imported from the same
source: ``named`` with three named checks (``sleep 1``, ``sleep 2``, ``sleep 3`` by default: ``--durations``) that run
in parallel, and ``glued`` whose one check runs the same three commands one after another (``a && b && c``). One
agent lands ``--landings`` changes (5) into each, alternating, each with ``agent.push`` waiting for its verdict; a
first landing in each repository (main's baseline run beside it) is left out. Each landing's push to landed time is
read from the database's own timestamps (the candidate's ``pushed_at`` to the landed row's ``landed_at``).

Printed: the median push to landed of each, and the ratio named / glued (expected near max(D) / sum(D) plus the
bot's share). Prints figures; asserts nothing about timing. Run from the repository root (once: the machine may be
shared)::

    python -m bench.landing.named_checks
    python -m bench.landing.named_checks --landings 3 --durations 1,2,3
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
from pathlib import Path

import psycopg

from bench.common import harness
from bench.common.gitenv import agent_worktrees, commit_all, git_env, run_git
from mergebot import agent
from mergebot.client import Client
from mergebot.landing.main.repos import add_repo, repos_root
from mergebot.rules import Rules

REPOS = ("named", "glued")


def make_source(path: Path) -> Path:
    (path / "work").mkdir(parents=True)
    (path / "work" / ".keep").write_text("")
    return commit_all(path)


async def setup(url: str, data: Path, source: Path, durations: list[float]) -> str:
    commands = [f"sleep {d:g} && true" for d in durations]
    checks = [{"name": f"c{i}", "command": c} for i, c in enumerate(commands)]
    async with harness.store_on(url, statement_timeout_ms=60_000) as store:
        token = (await harness.add_agent(store, "named-checks-agent")).token
        await add_repo(store, repos_root(data), name="named", source=str(source),
                       rules=Rules.of(verifier_command=" && ".join(commands), verifier_timeout_s=120, checks=checks))
        await add_repo(store, repos_root(data), name="glued", source=str(source),
                       rules=Rules.of(verifier_command=" && ".join(commands), verifier_timeout_s=120))
        return token


async def new_subtask(url: str, title: str) -> None:
    async with harness.store_on(url) as store:
        await store.subtasks.create_subtask(actor_id=None, title=title)


def land_one(url: str, db_url: str, token: str, repo: str, wt: Path, i: int) -> int:
    """One change into ``repo``: a subtask for it, claim, commit, push, wait for the verdict; the subtask's id."""
    asyncio.run(new_subtask(db_url, f"{repo} {i}"))
    client = Client(url, token, timeout=120.0)
    try:
        got = agent.start(client, url, token, repo, wt, wait=10)
        assert got is not None, "nothing to claim"
        sid = got[0].subtask_id
        (wt / "work" / f"{sid}.txt").write_text(f"change {sid}\n")
        run_git(["add", "-A"], wt)
        run_git(["commit", "-q", "-m", f"change {sid}"], wt)
        res = agent.push(client, wt, wait=120, progress=False)
        if res.get("status") != "landed":
            raise RuntimeError(f"{repo}: subtask {sid} {res.get('status')}: {res.get('reason')}")
        return sid
    finally:
        client.close()


def push_to_landed(url: str) -> dict[str, list[float]]:
    q = """SELECT c.repo, extract(epoch FROM l.landed_at - coalesce(c.pushed_at, c.queued_at))::float8
           FROM landed l JOIN candidates c ON c.subtask_id = l.subtask_id AND c.status = 'landed'
           ORDER BY l.id"""
    out: dict[str, list[float]] = {r: [] for r in REPOS}
    with psycopg.connect(url, autocommit=True) as conn:
        for repo, seconds in conn.execute(q).fetchall():
            out[repo].append(float(seconds))
    return {r: v[1:] for r, v in out.items()}  # the first of each ran beside main's baseline: left out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.landing.named_checks", description=__doc__.split("\n\n")[0])
    ap.add_argument("--landings", type=int, default=5, help="landings measured in each repository")
    ap.add_argument("--durations", default="1,2,3", help="the checks' seconds, comma-separated")
    ap.add_argument("--workers", type=int, default=3, help="verifier workers in mergebot serve")
    args = ap.parse_args(argv)
    durations = [float(d) for d in args.durations.split(",")]
    print(f"named checks vs glued: checks of {durations} s, {args.landings} landings each, {args.workers} workers; "
          f"{harness.machine()}, load {harness.load_average()}")
    with harness.scratch("mb-named-") as tmp:
        git_env(tmp / "home")
        with harness.PgServer(tmp, prefix="mb_bench_named") as server, server.fresh_db("named") as url:
            data = tmp / "data"
            token = asyncio.run(setup(url, data, make_source(tmp / "source"), durations))
            env = {"MERGEBOT_SPECULATION_WINDOW": "1", "MERGEBOT_VERIFIER_WORKERS": str(args.workers)}
            with harness.Serve(url, data, env) as bot:
                wts = {r: agent_worktrees(bot.url, r, token, tmp / "work" / r, 1)[0] for r in REPOS}
                for i in range(args.landings + 1):
                    for r in REPOS:
                        land_one(bot.url, url, token, r, wts[r], i)
                got = push_to_landed(url)
    med = {r: statistics.median(v) for r, v in got.items() if v}
    for r in REPOS:
        print(f"  {r:6} push -> landed, median of {len(got[r])}: {med.get(r, float('nan')):6.2f} s "
              f"({', '.join(f'{x:.2f}' for x in got[r])})")
    if len(med) == 2:
        print(f"named / glued = {med['named'] / med['glued']:.2f} (max/sum of the checks = "
              f"{max(durations) / sum(durations):.2f})")


if __name__ == "__main__":
    main()
