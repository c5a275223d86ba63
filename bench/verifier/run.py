"""Verifier overhead: a reused, sandboxed slot against a fresh ``git clone`` per run, with a no-op check.

Everything runs in one process and one temporary directory (on the same disk as ``/tmp``), on a generated
repository of ``--files`` small text files (100 files per directory, deterministic content) with two
commits: the second changes one file in every directory, deletes one file and adds one. The check is
``true``, so every millisecond measured is the verifier's own overhead.

1. **Verifier, per run** (``--runs``, 30, after one untimed run that creates the slot): ``run_check`` on one
   slot, alternating between the two commits so that every run really moves the checkout, once with the
   sandbox ``auto`` picks here (bwrap when usable) and once more with ``sandbox="none"``. The wall time of
   ``run_check`` is the run (materialize and prove the tree, start the sandbox, run, read the overlay, record);
   the steps are timed by wrapping the slot's and the runner's own functions (nothing is changed). The first
   run, which creates the slot from nothing, is shown apart.
2. **libgit2's own move, for comparison** (``--runs``): on a third slot, ``checkout_tree`` with
   ``FORCE | REMOVE_UNTRACKED | REMOVE_IGNORED``, a detached ``set_head`` and a ``status`` (the before-run
   check that way), alternating the same way — what ``Slot.prepare`` replaces with applying the tree diff.
3. **Fresh clone, per run** (``--clones``, 10): ``git clone --no-checkout`` of the same repository (a plain
   local clone), ``git checkout --detach`` of the commit (alternating the same way), then ``sh -c true`` in
   it. Deleting the clone afterwards is shown but not counted.

Printed: medians, p95 and max of each, the ratio fresh clone / verifier (target >= 10x) and whether the
sandboxed verifier stays under 150 ms per run.

Run from the repository root::

    python -m bench.verifier                # 5,000 files, 30 runs, 10 clones
    python -m bench.verifier --quick        # 1,000 files, 10 runs, 3 clones
    python -m bench.verifier --files 20000 --runs 50
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pygit2
from pygit2.enums import CheckoutStrategy, FileMode

from bench.common.measure import Steps
from verifier import runner, sandbox
from verifier.checkout import Slot

NOOP = "true"
TARGET_RATIO = 10.0
TARGET_MS = 150.0
GIT_ENV = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_TERMINAL_PROMPT": "0"}


def stats(xs: list[float]) -> dict[str, float]:
    if not xs:
        return {"median": float("nan"), "p95": float("nan"), "max": float("nan")}
    ordered = sorted(xs)
    p95 = ordered[min(len(ordered) - 1, max(0, round(0.95 * len(ordered)) - 1))]
    return {"median": statistics.median(ordered), "p95": p95, "max": ordered[-1]}


def row(label: str, xs: list[float]) -> str:
    s = stats(xs)
    return f"  {label:<56} {s['median']:>9.1f} {s['p95']:>9.1f} {s['max']:>9.1f}   n={len(xs)}"


def header(first: str) -> str:
    line = f"  {first:<56} {'median':>9} {'p95':>9} {'max':>9}"
    return line + "\n  " + "-" * (len(line) - 2)


def make_repo(path: Path, files: int) -> tuple[str, str]:
    """A bare repository with two commits on main; the second touches every directory."""
    repo = pygit2.init_repository(str(path), bare=True)
    sig = pygit2.Signature("Bench", "bench@example.com", 1_700_000_000, 0)
    contents = {f"pkg{i // 100:03d}/mod{i:05d}.py": (f"# module {i}\n" + f"VALUE_{i} = {i}\n" * 8).encode()
                for i in range(files)}

    def commit(tree_files: dict[str, bytes], parents: list[pygit2.Oid]) -> pygit2.Oid:
        index = pygit2.Index()
        for name, data in tree_files.items():
            index.add(pygit2.IndexEntry(name, repo.create_blob(data), FileMode.BLOB))
        return repo.create_commit("refs/heads/main", sig, sig, "bench", index.write_tree(repo), parents)

    first = commit(contents, [])
    changed = dict(contents)
    for name in list(changed)[::100]:
        changed[name] = changed[name] + b"CHANGED = True\n"
    del changed[next(iter(changed))]
    changed["added/new.py"] = b"NEW = 1\n"
    second = commit(changed, [first])
    return str(first), str(second)


@contextlib.contextmanager
def instrumented(steps: Steps) -> Iterator[None]:
    with contextlib.ExitStack() as stack:
        for name, owner, attr in (("prepare", Slot, "prepare"), ("command", runner, "_run"),
                                  ("after_overlay", Slot, "changed_in_overlay"),
                                  ("after_in_place", Slot, "changed_in_place"), ("end_run", Slot, "end_run")):
            stack.enter_context(mock.patch.object(owner, attr, steps.sync(name, getattr(owner, attr))))
        yield


def bench_verifier(repo: Path, shas: tuple[str, str], slot: Path, runs: int, mode: str) -> dict[str, Any]:
    steps = Steps()
    with instrumented(steps):
        t0 = time.perf_counter()
        first = runner.run_check(repo, shas[0], runner.CheckSpec(NOOP, 60), slot=slot, sandbox=mode)
        first_ms = (time.perf_counter() - t0) * 1000
        assert first.passed, first.log_head
        totals = []
        for i in range(runs):
            steps.current = {}
            sha = shas[(i + 1) % 2]
            t0 = time.perf_counter()
            result = runner.run_check(repo, sha, runner.CheckSpec(NOOP, 60), slot=slot, sandbox=mode)
            total = (time.perf_counter() - t0) * 1000
            if not result.passed or result.commit_sha != sha:
                raise SystemExit(f"run {i} did not pass: {result.outcome}\n{result.log_head}")
            totals.append(total)
            steps.close(total=total)
    return {"first": first_ms, "totals": totals, "steps": steps, "sandbox": first.sandbox}


def bench_libgit2(repo: Path, shas: tuple[str, str], slot: Path, runs: int) -> list[float]:
    owned = Slot(slot)
    owned.prepare(repo, shas[0])
    checkout = pygit2.Repository(str(owned.git_dir))
    strategy = CheckoutStrategy.FORCE | CheckoutStrategy.REMOVE_UNTRACKED | CheckoutStrategy.REMOVE_IGNORED
    totals = []
    for i in range(runs):
        commit = checkout[shas[(i + 1) % 2]].peel(pygit2.Commit)
        t0 = time.perf_counter()
        checkout.checkout_tree(commit.tree, strategy=strategy)  # type: ignore[no-untyped-call]
        checkout.set_head(commit.id)
        if checkout.status(untracked_files="all", ignored=True):
            raise SystemExit("libgit2 left the checkout different from the commit")
        totals.append((time.perf_counter() - t0) * 1000)
    return totals


def bench_clone(repo: Path, shas: tuple[str, str], work: Path, clones: int) -> dict[str, list[float]]:
    totals, removals = [], []
    for i in range(clones):
        dest = work / f"clone{i}"
        t0 = time.perf_counter()
        for args in (["clone", "--quiet", "--no-checkout", str(repo), str(dest)],
                     ["-C", str(dest), "checkout", "--quiet", "--detach", shas[i % 2]]):
            subprocess.run(["git", *args], check=True, env=GIT_ENV)
        subprocess.run(["/bin/sh", "-c", NOOP], cwd=dest, check=True)
        totals.append((time.perf_counter() - t0) * 1000)
        t0 = time.perf_counter()
        shutil.rmtree(dest)
        removals.append((time.perf_counter() - t0) * 1000)
    return {"totals": totals, "removals": removals}


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.verifier",
                                 description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--files", type=int, default=5000)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--clones", type=int, default=10)
    ap.add_argument("--quick", action="store_true", help="1,000 files, 10 runs, 3 clones")
    args = ap.parse_args()
    if args.quick:
        args.files, args.runs, args.clones = 1000, 10, 3

    tmp = Path(tempfile.mkdtemp(prefix="mb-bench-verifier-"))
    try:
        t0 = time.perf_counter()
        repo = tmp / "src.git"
        shas = make_repo(repo, args.files)
        print(f"repository: {args.files:,} files in {args.files // 100 + 1} directories, 2 commits "
              f"({(time.perf_counter() - t0):.1f} s to generate); work directory {tmp}")
        problem = sandbox.bwrap_problem()
        print(f"bwrap sandbox: {'usable' if problem is None else 'NOT usable: ' + problem}; "
              f"process limit (pids cgroup): {'yes' if sandbox.process_limit_available() else 'no'}")
        print()

        auto = bench_verifier(repo, shas, tmp / "slot-auto", args.runs, "auto")
        plain = bench_verifier(repo, shas, tmp / "slot-none", args.runs, "none")
        libgit2 = bench_libgit2(repo, shas, tmp / "slot-libgit2", args.runs)
        clone = bench_clone(repo, shas, tmp, args.clones)

        print(header("per run, milliseconds"))
        for label, res in ((f"verifier, sandbox {auto['sandbox']} (run_check total)", auto),
                           ("verifier, sandbox none (run_check total)", plain)):
            steps: Steps = res["steps"]
            print(row(label, res["totals"]))
            print(row("  materialize + tree check before (Slot.prepare)", steps.column("prepare")))
            print(row(f"  sandbox start + `{NOOP}` + log (runner._run)", steps.column("command")))
            after = steps.column("after_overlay") or steps.column("after_in_place")
            print(row("  tree check after (overlay upper / full re-hash)", after))
            print(row("  clean the run's scratch, mark the slot (end_run)", steps.column("end_run")))
            rest = [r["total"] - sum(v for k, v in r.items() if k != "total") for r in steps.rows]
            print(row("  the rest (lock, state, environment, record)", rest))
            print(row("  first run: creates the slot (not in the above)", [res["first"]]))
        print(row("for comparison: checkout_tree + set_head + status", libgit2))
        print(row(f"fresh `git clone` + checkout + `{NOOP}`", clone["totals"]))
        print(row("  deleting the clone afterwards (not counted)", clone["removals"]))
        print()

        ours = stats(auto["totals"])["median"]
        theirs = stats(clone["totals"])["median"]
        ratio = theirs / ours
        print(f"  fresh clone / verifier ({auto['sandbox']}), medians: {ratio:.1f}x "
              f"(target >= {TARGET_RATIO:.0f}x: {'met' if ratio >= TARGET_RATIO else 'MISSED'})")
        print(f"  verifier ({auto['sandbox']}) median {ours:.1f} ms, p95 {stats(auto['totals'])['p95']:.1f} ms "
              f"(target < {TARGET_MS:.0f} ms per run: {'met' if ours < TARGET_MS else 'MISSED'})")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

