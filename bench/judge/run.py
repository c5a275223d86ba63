"""What judging a candidate's code with main's tests costs the verifier (issue 41): the judging run plus the run of
the candidate's own tests, against one run of the whole merged commit (today's way), per landing.

On generated repositories of 2,000 small pytest tests (about 5 s in all) and 200 tests (about 3 s), each with a change
on top: ``--adds`` new tests in a new test file (``tests/test_new.py``) beside a code change. Three commits: ``main``
(the suite), ``merged`` (main + the change, what would land) and ``judged`` (``merged`` with the new test file taken
out: main's tests). Per round, alternating which goes first so drift falls on both:

  * **one run** (today's): ``run_check`` of ``merged``, the whole suite and the new tests in one session;
  * **judged + own** (now): ``run_check`` of ``judged`` with ``own`` = the new test file on ``merged``: two sessions in
    one job and one checkout, as a verifier worker runs a candidate's job.

A change that touches no test has one run either way, and is timed too (``no tests``: the same commit both ways, so
the ratio shows only the noise). Printed: the median wall time of each, the ratio now / today per repository (target:
at most 1.15), and how the extra time splits. Run from the repository root::

    python -m bench.judge                 # 3 rounds after one warm-up, both repositories, 20 new tests
    python -m bench.judge --rounds 5 --adds 100
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.judge.outcomes import make_repo
from verifier import runner
from verifier import sandbox as sb

TARGET = 1.15


def git(path: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=b", "-c", "user.email=b@b", *args], cwd=path, check=True,
                          capture_output=True, text=True).stdout.strip()


def change(path: Path, adds: int) -> tuple[str, str]:
    """(merged, judged): a code change and ``adds`` new tests on top of main, and the same with main's tests."""
    (path / "lib.py").write_text("def double(x):\n    return 2 * x\n")
    (path / "tests" / "test_new.py").write_text("from lib import double\n\n" + "".join(
        f"def test_double_{i}():\n    assert double({i}) == {2 * i}\n\n" for i in range(adds)))
    git(path, "add", "-A")
    git(path, "commit", "-qm", "change")
    merged = git(path, "rev-parse", "HEAD")
    git(path, "rm", "-q", "tests/test_new.py")
    git(path, "commit", "-qm", "main's tests")
    judged = git(path, "rev-parse", "HEAD")
    return merged, judged


def bench(work: Path, tests: int, seconds: float, adds: int, rounds: int, mode: str) -> dict[str, float]:
    repo = work / f"repo-{tests}"
    make_repo(repo, tests, seconds)
    merged, judged = change(repo, adds)
    command = f"PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 {sys.executable} -m pytest -q -p no:cacheprovider tests"
    slot = work / f"slot-{tests}"
    own = runner.Own(merged, ("tests/test_new.py",))
    times: dict[str, list[float]] = {"today": [], "now": [], "own": [], "no tests": [], "no tests, again": []}
    for r in range(rounds + 1):  # the first round warms the slot and the page cache, and is not counted
        order = ("today", "now") if r % 2 == 0 else ("now", "today")
        for way in (*order, "no tests", "no tests, again"):
            t0 = time.perf_counter()
            if way == "now":
                got = runner.run_check(repo, judged, runner.CheckSpec(command, 600, own=own), slot=slot, sandbox=mode)
                assert got.passed and got.own and got.own["outcome"] == "pass", got.own or got.log_tail[-2000:]
                took_own = got.own["duration_ms"] / 1000
            else:
                got = runner.run_check(repo, merged, runner.CheckSpec(command, 600), slot=slot, sandbox=mode)
                assert got.passed, got.log_tail[-2000:]
            took = time.perf_counter() - t0
            if r:
                times[way].append(took)
                if way == "now":
                    times["own"].append(took_own)
    med = {k: statistics.median(v) for k, v in times.items()}
    return {**med, "ratio": med["now"] / med["today"], "noise": med["no tests, again"] / med["no tests"]}


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.judge",
                                 description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--adds", type=int, default=20, help="new tests the change adds [20]")
    ap.add_argument("--quick", action="store_true", help="one round")
    args = ap.parse_args()
    if args.quick:
        args.rounds = 1
    mode = "bwrap" if sb.bwrap_usable() else "none"
    print(f"sandbox {mode}; {os.cpu_count()} cores; load {os.getloadavg()[0]:.2f}; a change adding {args.adds} tests")
    with tempfile.TemporaryDirectory(prefix="mb-bench-judge-", dir="/var/tmp") as tmp:
        for tests, seconds in ((2000, 5.0), (200, 3.0)):
            got = bench(Path(tmp), tests, seconds, args.adds, args.rounds, mode)
            verdict = "met" if got["ratio"] <= TARGET else "MISSED"
            print(f"{tests:>5} tests: one run {got['today']:.2f} s; judged + own {got['now']:.2f} s "
                  f"(the own tests' run {got['own']:.2f} s): ratio {got['ratio']:.3f} (target <= {TARGET}: {verdict}); "
                  f"no test changed: {got['no tests']:.2f} s, again {got['no tests, again']:.2f} s "
                  f"(noise {got['noise']:.3f})")

