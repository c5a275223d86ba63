"""A pytest plugin the verifier loads into every pytest a check runs: it streams each test's outcome as it happens.

Loaded through ``PYTEST_ADDOPTS=-p mergebot_outcomes`` with this directory on ``PYTHONPATH`` (``verifier.outcomes``
sets both), so any shell command that runs pytest gets it. It writes one JSON object per line to the file
descriptor named by ``VERIFIER_OUTCOMES_FD``, the write end of a pipe the runner reads outside the checkout: once a
line is written the runner has it, and nothing the check does at exit can take it back.

Lines: ``{"t": "session", "pid": ..., "root": ROOTDIR}`` when a session starts (node ids are relative to
its rootdir); ``{"t": "r", "id": NODEID, "when": PHASE, "o": OUTCOME, "line": N, "xfail": BOOL}`` for every phase
report (setup, call, teardown); ``{"t": "deselected", "id": NODEID}``; ``{"t": "collect_error", "id": NODEID}``;
``{"t": "end", "exit": STATUS}``. ``verifier.outcomes`` turns them into one outcome per test. A pytest started
inside a test (pytester, a subprocess that inherits the environment) reports nothing: only the outermost session
in a process tree speaks.

Imports nothing from mergebot or the verifier: it runs inside the check, on the check's interpreter.
"""

from __future__ import annotations

import json
import os
from typing import Any

_NESTED = "VERIFIER_OUTCOMES_NESTED"
_FD = "VERIFIER_OUTCOMES_FD"
_out: Any = None


def _send(**line: Any) -> None:
    if _out is None:
        return
    try:
        _out.write(json.dumps(line, separators=(",", ":")) + "\n")
        _out.flush()
    except (OSError, ValueError):
        pass


def pytest_configure(config: Any) -> None:
    global _out
    if _out is not None or os.environ.get(_NESTED):
        return
    try:
        fd = int(os.environ.get(_FD, ""))
        _out = os.fdopen(os.dup(fd), "w", encoding="utf-8")
    except (ValueError, OSError):
        return
    os.environ[_NESTED] = "1"  # a pytest this one starts (pytester, a subprocess) stays silent


def pytest_sessionstart(session: Any) -> None:
    _send(t="session", pid=os.getpid(), root=str(session.config.rootpath))


def pytest_runtest_logreport(report: Any) -> None:
    line = report.location[1] if getattr(report, "location", None) else None
    _send(t="r", id=report.nodeid, when=report.when, o=report.outcome, line=line,
          xfail=hasattr(report, "wasxfail"))


def pytest_deselected(items: Any) -> None:
    for item in items:
        _send(t="deselected", id=item.nodeid)


def pytest_collectreport(report: Any) -> None:
    if report.failed:
        _send(t="collect_error", id=report.nodeid)


def pytest_sessionfinish(session: Any, exitstatus: Any) -> None:
    _send(t="end", exit=int(exitstatus))
