"""Lint and strict typing are part of the suite, so CI refuses what a reviewer would."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def _tool(name: str) -> str:
    path = BIN / name
    if path.exists():
        return str(path)
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: pip install -e '.[dev]'")
    return found


def test_ruff() -> None:
    r = subprocess.run([_tool("ruff"), "check", "."], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_mypy_strict() -> None:
    r = subprocess.run([_tool("mypy")], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


# Modules a newcomer reads in one sitting: one job each, at most this many lines. The two exempt ones are each one
# job that does not split well: the forge's webhook parser (sans-I/O, one format per forge) and the sandbox's
# command line (every bubblewrap argument and the reason for it, in one place).
MAX_LINES = 400
EXEMPT = {"mergebot/forge/sansio.py", "verifier/sandbox.py"}


def test_every_module_and_benchmark_is_at_most_400_lines() -> None:
    files = [p for top in ("mergebot", "verifier", "bench") for p in (ROOT / top).rglob("*.py")]
    assert len(files) > 100  # the scan saw the code
    long = {str(p.relative_to(ROOT)): n for p in files
            if (n := len(p.read_text().splitlines())) > MAX_LINES and str(p.relative_to(ROOT)) not in EXEMPT}
    assert long == {}, f"over {MAX_LINES} lines (split by job): {long}"
