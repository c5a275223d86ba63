"""A repository of a real project's size for the benchmarks (``--repo-size``): about 300 files, about 5 MB of
history, and a pytest suite of about 200 tests that takes about 3 s.

The project is a package ``proj/`` of modules with a few functions each and ``tests/`` with a test file per module;
each test sleeps a little (``TEST_SLEEP``) so the suite's time is a real suite's, not a no-op's. The history is
``COMMITS`` commits that grow and rewrite a data file and the modules, so a clone, a fetch and a merge walk a
history of that size. Deterministic: the same arguments give the same tree and the same history. Nothing here
times anything.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

from bench.common.gitenv import run_git

MODULES = 120  # proj/mod_NNN.py, each with a test file: 240 files, plus docs and data: about 300
TESTS_PER_MODULE = 2  # 240 tests ...
TEST_SLEEP = 0.0125  # ... of 12.5 ms each: about 3 s in all
COMMITS = 60  # the history
DATA_BYTES = 160_000  # a data file rewritten by each commit (hex of random bytes): about 5 MB of history
DOCS = 50
CHECK = f"PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 {sys.executable} -m pytest -q -p no:cacheprovider -x tests"


def module_text(i: int, version: int) -> str:
    return "".join(f"def f{i}_{k}(x):\n    return x * {k + 1} + {version}\n\n\n" for k in range(3))


def test_text(i: int) -> str:
    body = "".join(f"def test_{i}_{k}():\n    time.sleep({TEST_SLEEP})\n    assert mod.f{i}_{k}(2) >= 2\n\n\n"
                   for k in range(TESTS_PER_MODULE))
    return f"import time\n\nfrom proj import mod_{i:03d} as mod\n\n\n{body}"


def make(path: Path, seed: int = 1) -> Path:
    """The repository at ``path`` (created), with its history; returns ``path``."""
    rng = random.Random(seed)
    (path / "proj").mkdir(parents=True)
    (path / "tests").mkdir()
    (path / "docs").mkdir()
    (path / "data").mkdir()
    (path / "proj" / "__init__.py").write_text("")
    (path / "tests" / "__init__.py").write_text("")
    (path / "pyproject.toml").write_text('[project]\nname = "proj"\nversion = "0"\n')
    (path / "CHANGELOG.md").write_text("# Changelog\n\n")
    for i in range(MODULES):
        (path / "proj" / f"mod_{i:03d}.py").write_text(module_text(i, 0))
        (path / "tests" / f"test_mod_{i:03d}.py").write_text(test_text(i))
    for d in range(DOCS):
        (path / "docs" / f"page_{d:02d}.md").write_text(f"# Page {d}\n\n" + "words " * 200 + "\n")
    run_git(["init", "-q", "-b", "main"], path)
    for c in range(COMMITS):
        blob = rng.randbytes(DATA_BYTES // 2).hex()  # compresses only twofold: history of a real size
        (path / "data" / "table.txt").write_text(blob)
        for i in rng.sample(range(MODULES), 3):
            (path / "proj" / f"mod_{i:03d}.py").write_text(module_text(i, c))
        run_git(["add", "-A"], path)
        run_git(["commit", "-q", "-m", f"history {c}"], path)
    return path
