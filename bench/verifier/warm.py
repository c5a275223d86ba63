"""Warm checks: a real project's setup step and check with their caches, cold against warm, in one sitting.

The project is this repository's own tree (``git archive HEAD``, committed into a scratch bare repository) with
a local wheel directory (``wheels/``, one small package built here). The setup step makes a virtual environment
``.venv`` and installs the package from the wheel directory, offline (``python -m venv`` with pip, then ``pip
install --no-index --find-links wheels``), unless ``.venv`` is already there; the check is the project's own type
check, ``python -m mypy mergebot verifier`` (mypy keeps ``.mypy_cache``), and an import through ``.venv``. One
reused slot, the sandbox ``auto`` picks (bwrap here: the cache is a read-only lower layer only there), and the
caches declared as ``.venv`` and ``.mypy_cache`` keyed by ``pyproject.toml`` and the wheel directory's index:

1. a priming run as a commit on main (``write``): a cold run that writes generation 1 (not timed);
2. ``--rounds`` rounds, alternating: **cold** (no cache: what every run did before) and **warm** (a candidate's
   run: generation 1 read-only; what it writes is thrown away, so every warm run starts from the same cache).

Printed: each run, the medians, and warm against cold (target: warm at least 5x faster). Prints figures;
asserts nothing about timing. Run from the repository root::

    python -m bench.verifier.warm     # 3 rounds
    python -m bench.verifier.warm --rounds 1
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path

import pygit2

from verifier import cache as caches
from verifier import sandbox
from verifier.runner import CheckSpec, Result, Setup, run_check

TARGET = 5.0
ROOT = Path(__file__).resolve().parents[2]  # the repository: bench/verifier/warm.py


def tiny_wheel() -> tuple[str, bytes]:
    """A pure-Python wheel of one small package (``warmdep``), built in memory."""
    name = "warmdep-1.0-py3-none-any.whl"
    files = {"warmdep/__init__.py": b"VALUE = 42\n",
             "warmdep-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: warmdep\nVersion: 1.0\n",
             "warmdep-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: bench\nRoot-Is-Purelib: true\n"
                                            b"Tag: py3-none-any\n"}
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append("warmdep-1.0.dist-info/RECORD,,")
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for path, data in files.items():
            z.writestr(path, data)
        z.writestr("warmdep-1.0.dist-info/RECORD", "\n".join(record) + "\n")
    return name, out.getvalue()


def project_repo(path: Path, *, wheels: bool) -> str:
    """This repository's tree at HEAD (with ``wheels/``) as the only commit of a scratch bare repository."""
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
    if wheels:
        name, data = tiny_wheel()
        index.add(pygit2.IndexEntry(f"wheels/{name}", repo.create_blob(data), pygit2.enums.FileMode.BLOB))
    sig = pygit2.Signature("bench", "bench@example.invalid", 1_700_000_000, 0)
    return str(repo.create_commit("refs/heads/main", sig, sig, "the project", index.write_tree(repo), []))


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.verifier.warm", description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-setup", action="store_true", dest="no_setup", help="the type check and its cache only")
    args = ap.parse_args()
    mode = "bwrap" if sandbox.bwrap_usable() else "none"
    command = f"{sys.executable} -m mypy mergebot verifier"
    setup = None
    paths: tuple[str, ...] = (".mypy_cache",)
    if not args.no_setup:
        command += " && .venv/bin/python -c 'import warmdep; assert warmdep.VALUE == 42'"
        setup = Setup("test -x .venv/bin/python || { python -m venv .venv && .venv/bin/python -m pip install -q "
                      "--no-index --find-links wheels warmdep; }")
        paths = (".venv", ".mypy_cache")
    print(f"warm checks: setup `{setup.command if setup else '-'}`, check `{command}` on this project's tree, "
          f"sandbox {mode}, {args.rounds} round(s)")
    if mode != "bwrap":
        print(f"the bwrap sandbox is not usable here ({sandbox.bwrap_problem()}): caches are not used without it")
    with tempfile.TemporaryDirectory(prefix="mb-warm-") as tmp:
        base = Path(tmp)
        sha = project_repo(base / "project.git", wheels=setup is not None)
        slot = base / "slot"
        root = base / "caches"

        def timed(label: str, req: caches.Request | None) -> float:
            t0 = time.perf_counter()
            result: Result = run_check(base / "project.git", sha, CheckSpec(command, 900, setup=setup), slot=slot,
                                       sandbox=mode, cache=req)
            took = time.perf_counter() - t0
            used = result.cache or {}
            step = f"setup {result.setup['duration_ms'] / 1000:5.2f} s" if result.setup else ""
            print(f"  {label:7} {took:7.2f} s  {result.outcome:5}  {step}  {used.get('note', 'no cache')}",
                  flush=True)
            if result.outcome != "pass":
                print(result.log_tail[-2000:] or result.log_head[-2000:])
            return took

        def request(write: bool) -> caches.Request:
            return caches.Request(root, paths, ("pyproject.toml", "wheels"), write=write)

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
