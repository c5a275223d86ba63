"""Warm checks: a real project's check with its tool cache, cold against warm, in one sitting.

The project is this repository's own tree (``git archive HEAD``, committed into a scratch bare repository), and
the check is its own type check, ``python -m mypy mergebot verifier`` (mypy keeps ``.mypy_cache`` in the
checkout). One reused slot, the sandbox ``auto`` picks (bwrap here: the cache is a read-only lower layer only
there), and the repository's cache declared as ``.mypy_cache`` keyed by ``pyproject.toml``:

1. a priming run as a commit on main (``write``): a cold run that writes generation 1 (not timed);
2. ``--rounds`` rounds, alternating: **cold** (no cache: what every run did before) and **warm** (a candidate's
   run: generation 1 read-only; what it writes is thrown away, so every warm run starts from the same cache).

Printed: each run, the medians, and warm against cold (target: warm at least 5x faster). Prints figures;
asserts nothing about timing. Run from the repository root::

    python bench/warm.py              # 3 rounds
    python bench/warm.py --rounds 1
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

if sys.path and os.path.abspath(sys.path[0] or ".") == os.path.dirname(os.path.abspath(__file__)):
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import pygit2

from verifier import cache as caches
from verifier import sandbox
from verifier.runner import Result, run_check

TARGET = 5.0
ROOT = Path(__file__).resolve().parent.parent


def project_repo(path: Path) -> str:
    """This repository's tree at HEAD as the only commit of a scratch bare repository."""
    archive = subprocess.run(["git", "archive", "--format=tar", "HEAD"], cwd=ROOT, capture_output=True,
                             check=True).stdout
    repo = pygit2.init_repository(str(path), bare=True)
    index = pygit2.Index()
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        for member in tar.getmembers():
            if member.isfile():
                data = tar.extractfile(member).read()  # type: ignore[union-attr]
                mode = pygit2.enums.FileMode.BLOB_EXECUTABLE if member.mode & 0o111 else pygit2.enums.FileMode.BLOB
                index.add(pygit2.IndexEntry(member.name, repo.create_blob(data), mode))
    sig = pygit2.Signature("bench", "bench@example.invalid", 1_700_000_000, 0)
    return str(repo.create_commit("refs/heads/main", sig, sig, "the project", index.write_tree(repo), []))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    mode = "bwrap" if sandbox.bwrap_usable() else "none"
    command = f"{sys.executable} -m mypy mergebot verifier"
    print(f"warm checks: `{command}` on this project's tree, sandbox {mode}, {args.rounds} round(s)")
    if mode != "bwrap":
        print(f"the bwrap sandbox is not usable here ({sandbox.bwrap_problem()}): caches are not used without it")
    with tempfile.TemporaryDirectory(prefix="mb-warm-") as tmp:
        base = Path(tmp)
        sha = project_repo(base / "project.git")
        slot = base / "slot"
        root = base / "caches"

        def timed(label: str, req: caches.Request | None) -> float:
            t0 = time.perf_counter()
            result: Result = run_check(base / "project.git", sha, command, 900, slot=slot, sandbox=mode, cache=req)
            took = time.perf_counter() - t0
            used = result.cache or {}
            print(f"  {label:7} {took:7.2f} s  {result.outcome:5}  {used.get('note', 'no cache')}", flush=True)
            if result.outcome != "pass":
                print(result.log_tail[-2000:] or result.log_head[-2000:])
            return took

        def request(write: bool) -> caches.Request:
            return caches.Request(root, (".mypy_cache",), ("pyproject.toml",), write=write)

        timed("prime", request(write=True))
        cold, warm = [], []
        for n in range(args.rounds):
            for label in ("cold", "warm") if n % 2 == 0 else ("warm", "cold"):
                (cold if label == "cold" else warm).append(timed(label, None if label == "cold" else request(False)))
    c, w = statistics.median(cold), statistics.median(warm)
    print(f"\nmedians: cold {c:.2f} s, warm {w:.2f} s; warm is {c / w:.1f}x faster (target >= {TARGET:g}x): "
          f"{'met' if c / w >= TARGET else 'NOT met'}")


if __name__ == "__main__":
    main()
