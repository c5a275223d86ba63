"""Lint and strict typing are part of the suite, so CI refuses what a reviewer would."""

from __future__ import annotations

import re
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


# Modules a newcomer reads in one sitting: one job each, at most this many lines, none exempt (the sandbox is two:
# what a check sees and how it starts, ``verifier/sandbox.py``; running it under its limits, ``verifier/supervise.py``).
MAX_LINES = 400


def test_every_module_and_benchmark_is_at_most_400_lines() -> None:
    files = [p for top in ("mergebot", "verifier", "bench") for p in (ROOT / top).rglob("*.py")]
    assert len(files) > 100  # the scan saw the code
    long = {str(p.relative_to(ROOT)): n for p in files if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}, f"over {MAX_LINES} lines (split by job): {long}"


# Test files read whole by whoever changes what they test; helpers they share live in tests/support/.
MAX_TEST_LINES = 600


def test_every_test_file_is_at_most_600_lines() -> None:
    files = list((ROOT / "tests").rglob("*.py"))
    assert len(files) > 80  # the scan saw the tests
    long = {str(p.relative_to(ROOT)): n for p in files if (n := len(p.read_text().splitlines())) > MAX_TEST_LINES}
    assert long == {}, f"over {MAX_TEST_LINES} lines (split by subject, shared helpers into tests/support/): {long}"


def test_benchmarks_live_in_topic_packages() -> None:
    """``bench/`` holds one package per topic (``bench/__init__.py`` lists them), no loose benchmark files."""
    assert [p.name for p in (ROOT / "bench").glob("*.py")] == ["__init__.py"]
    topics = [d for d in (ROOT / "bench").iterdir() if d.is_dir() and not d.name.startswith(("_", "."))]
    assert len(topics) >= 5 and all((d / "__init__.py").is_file() for d in topics)


def test_every_benchmark_the_docs_name_exists() -> None:
    """A benchmark cited in the README, docs/ or the code, as ``python -m bench.<topic>[.<name>]`` or as a file under
    ``bench/``, is there (the CHANGELOG and the migrations keep old paths: they are history)."""
    texts = [ROOT / "README.md", *(ROOT / "docs").glob("*.md"),
             *(p for top in ("bench", "mergebot", "verifier", "tests") for p in (ROOT / top).rglob("*.py"))]
    text = "\n".join(p.read_text() for p in texts)
    commands = set(re.findall(r"python -m (bench(?:\.\w+)+)", text))
    files = set(re.findall(r"(?<![\w/.])(bench/[\w/]+\.py)", text))
    assert len(commands) > 10 and files  # the scan saw them

    def runs(module: str) -> bool:
        path = ROOT.joinpath(*module.split("."))
        return path.with_suffix(".py").is_file() or (path / "__main__.py").is_file()

    assert sorted(m for m in commands if not runs(m)) + sorted(f for f in files if not (ROOT / f).is_file()) == []
