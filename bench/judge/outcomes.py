"""What collecting each test's outcome costs a check, and what holding them to main's costs a candidate (issue 32).

1. **Collection** (``--rounds``, 3): on generated repositories of 2,000 small pytest tests (about 5 s in all) and
   200 tests (about 3 s), ``verifier.runner.run_check`` in the sandbox this machine gives, once with our pytest
   plugin streaming every outcome (``report="pytest"``, the default) and once without it (``report`` set to a JUnit
   file the check never writes, so no plugin is loaded), alternating A and B in each round so drift falls on both.
   Printed: the median wall time of each and the ratio with / without (target: at most 1.05).
2. **Comparison** at 5,000 tests (``--compare-rounds``, 50): what the queue does per candidate once the runs are in:
   decode the baseline's and the candidate's stored records (``verifier.outcomes.unpack``, from the JSON a job
   result holds), compare them (``verifier.compare.compare``), and read the deleted definitions of 50 tests that
   went missing from two 250-test files (``deleted_tests``). Printed: the median and p95 in ms (target: at most
   50 ms). The database read of the baseline's job is one indexed row and is not in this figure.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from verifier import compare, outcomes, runner


def make_repo(path: Path, tests: int, seconds: float) -> str:
    """A repository of ``tests`` tests in files of 100, each sleeping so the suite takes about ``seconds``."""
    path.mkdir(parents=True)
    (path / "tests").mkdir()
    nap = seconds / tests
    for f in range(0, tests, 100):
        body = "import time\n\n" + "".join(f"def test_{i}():\n    time.sleep({nap:.5f})\n    assert {i} == {i}\n\n"
                                            for i in range(f, min(tests, f + 100)))
        (path / "tests" / f"test_{f // 100:03d}.py").write_text(body)
    for args in (["init", "-q", "-b", "main"], ["add", "-A"],
                 ["-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm", "suite"]):
        subprocess.run(["git", *args], cwd=path, check=True)
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=path, capture_output=True, text=True,
                          check=True).stdout.strip()


def collection(work: Path, tests: int, seconds: float, rounds: int, sandbox: str) -> dict[str, object]:
    repo = work / f"repo-{tests}"
    sha = make_repo(repo, tests, seconds)
    # autoload off: the plugins of a development venv would add seconds to both sides and flatter the ratio
    command = f"PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 {sys.executable} -m pytest -q -p no:cacheprovider tests"
    times: dict[str, list[float]] = {"with": [], "without": []}
    counted = 0
    for r in range(rounds + 1):  # the first round warms the slot and the page cache, and is not counted
        for mode in (("with", "without") if r % 2 == 0 else ("without", "with")):
            t0 = time.perf_counter()
            got = runner.run_check(repo, sha, runner.CheckSpec(command, 600,
                                   report="pytest" if mode == "with" else "junit:never-written.xml"),
                                   slot=work / f"slot-{tests}", sandbox=sandbox)
            took = time.perf_counter() - t0
            assert got.passed, got.log_tail[-2000:]
            if mode == "with":
                counted = int((got.tests or {}).get("total") or 0)
            if r:
                times[mode].append(took)
    med = {k: statistics.median(v) for k, v in times.items()}
    return {"tests": tests, "counted": counted, "with": med["with"], "without": med["without"],
            "ratio": med["with"] / med["without"]}


def comparison(rounds: int) -> dict[str, float]:
    n = 5000
    base = outcomes.Outcomes({f"tests/test_{i // 250:02d}.py::test_{i}": "passed" for i in range(n)}, source="pytest",
                             sessions=1)
    now_tests = dict(base.tests)
    gone = [f"tests/test_00.py::test_{i}" for i in range(0, 50)]
    for t in gone:
        del now_tests[t]
    now_tests.update({f"tests/test_new.py::test_{i}": "passed" for i in range(100)})
    now = outcomes.Outcomes(now_tests, source="pytest", sessions=1)
    stored = [json.dumps(base.record()), json.dumps(now.record())]  # what two job results hold
    before = {"tests/test_00.py": "".join(f"def test_{i}():\n    pass\n" for i in range(250))}
    after = {"tests/test_00.py": "".join(f"def test_{i}():\n    pass\n" for i in range(50, 250))}
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        b, c = (outcomes.unpack(json.loads(s)) for s in stored)
        slipped = [t for t, o in b.tests.items() if o == "passed" and c.tests.get(t) != "passed"]
        deleted = compare.deleted_tests(slipped, before, after)
        result = compare.compare(b, c, deleted=deleted)
        times.append((time.perf_counter() - t0) * 1000)
        assert result.verdict == "tests_weakened" and len(result.weakened) == 50
    times.sort()
    return {"median_ms": statistics.median(times), "p95_ms": times[int(len(times) * 0.95) - 1],
            "stored_kb": sum(len(s) for s in stored) / 2 / 1024}


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.judge.outcomes",
                                 description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--compare-rounds", type=int, default=50)
    ap.add_argument("--quick", action="store_true", help="one round, and 20 comparisons")
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.compare_rounds = 1, 20
    from verifier import sandbox as sb

    mode = "bwrap" if sb.bwrap_usable() else "none"
    print(f"sandbox {mode}; {os.cpu_count()} cores; load {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory(prefix="mb-bench-outcomes-", dir="/var/tmp") as tmp:
        for tests, seconds in ((2000, 5.0), (200, 3.0)):
            got = collection(Path(tmp), tests, seconds, args.rounds, mode)
            print(f"{tests:>5} tests: with the plugin {got['with']:.2f} s, without {got['without']:.2f} s, "
                  f"ratio {got['ratio']:.3f} (target <= 1.05: {'met' if got['ratio'] <= 1.05 else 'MISSED'}); "
                  f"{got['counted']} outcomes collected")
    c = comparison(args.compare_rounds)
    print(f"comparison at 5,000 tests: median {c['median_ms']:.1f} ms, p95 {c['p95_ms']:.1f} ms "
          f"(target <= 50 ms: {'met' if c['p95_ms'] <= 50 else 'MISSED'}); a stored record is {c['stored_kb']:.1f} KiB")


if __name__ == "__main__":
    main()
