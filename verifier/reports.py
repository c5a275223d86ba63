"""Which tests failed: from the JUnit XML reports a check leaves (pytest's ``--junitxml``), else from its log.

Rules:
  * Reports are the ``*.xml`` files the run wrote (in a sandbox, its overlay's upper layer; without one, the files
    of the checkout that are not tracked), at most ``MAX_DEPTH`` folders deep, each at most ``MAX_BYTES``; a file
    that is not a JUnit report (its root is not ``testsuites`` or ``testsuite``) is ignored.
  * A failing test is a ``testcase`` with a ``failure`` or ``error`` child, named ``classname::name`` as pytest
    writes them (``tests.test_calc::test_add``), at most ``MAX_TESTS`` of them.
  * With no report, pytest's short summary in the log (``FAILED tests/test_calc.py::test_add - ...``) names them.
  * Pure but for reading the files given; nothing here decides a verdict.
"""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET  # bounded local reports; expat (2.4+) caps entity expansion
from collections.abc import Iterable
from pathlib import Path

MAX_DEPTH = 3
MAX_BYTES = 10 << 20
MAX_TESTS = 50
SKIP = frozenset({".git", "node_modules", ".venv", "__pycache__"})
_PYTEST_SUMMARY = re.compile(r"^(?:FAILED|ERROR) (\S+::\S+?)(?: - .*)?$", re.MULTILINE)


def candidate_reports(root: Path, *, skip: Iterable[str] = ()) -> list[Path]:
    """``*.xml`` files under ``root`` (``skip``: paths relative to it that are tracked, never the run's)."""
    tracked = set(skip)
    out: list[Path] = []
    base = len(root.parts)
    for folder, dirs, files in os.walk(root):
        depth = len(Path(folder).parts) - base
        dirs[:] = [] if depth >= MAX_DEPTH else [d for d in dirs if d not in SKIP and not d.startswith(".")]
        for name in files:
            path = Path(folder) / name
            if name.endswith(".xml") and str(path.relative_to(root)) not in tracked:
                out.append(path)
    return sorted(out)


def failing_in_junit(paths: Iterable[Path]) -> list[str] | None:
    """The failing tests the reports name; None when none of the files is a JUnit report."""
    found: list[str] = []
    any_report = False
    for path in paths:
        try:
            if path.stat().st_size > MAX_BYTES:
                continue
            root = ET.parse(path).getroot()  # noqa: S314 (see the import)
        except (OSError, ET.ParseError):
            continue
        if root.tag not in ("testsuites", "testsuite"):
            continue
        any_report = True
        for case in root.iter("testcase"):
            if case.find("failure") is not None or case.find("error") is not None:
                name, cls = case.get("name", "?"), case.get("classname")
                found.append(f"{cls}::{name}" if cls else name)
                if len(found) >= MAX_TESTS:
                    return found
    return found if any_report else None


def failing_in_log(log: str) -> list[str]:
    """pytest's short test summary, read from a log's text."""
    return list(dict.fromkeys(_PYTEST_SUMMARY.findall(log)))[:MAX_TESTS]
