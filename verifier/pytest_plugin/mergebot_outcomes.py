"""A pytest plugin the verifier loads into every pytest a check runs: it streams each test's outcome as it happens.

Loaded through ``PYTEST_ADDOPTS=-p mergebot_outcomes`` with this directory on ``PYTHONPATH`` (``verifier.outcomes``
sets both), so any shell command that runs pytest gets it. It writes one JSON object per line to the file
descriptor named by ``VERIFIER_OUTCOMES_FD``, the write end of a pipe the runner reads outside the checkout: once a
line is written the runner has it, and nothing the check does at exit can take it back.

Lines: ``{"t": "session", "pid": ..., "root": ROOTDIR, "plugins": [NAME, ...]}`` when a session starts (node ids
are relative to its rootdir; ``plugins`` are the entry-point plugins it loaded, by entry point name);
``{"t": "r", "id": NODEID, "when": PHASE, "o": OUTCOME, "line": N, "xfail": BOOL}`` for every phase report (setup,
call, teardown); ``{"t": "deselected", "id": NODEID}``; ``{"t": "collect_error", "id": NODEID}``;
``{"t": "end", "exit": STATUS}``. ``verifier.outcomes`` turns them into one outcome per test. A pytest started
inside a test (pytester, a subprocess that inherits the environment) reports nothing: only the outermost session
in a process tree speaks.

How the verifier starts the interpreter (``verifier.outcomes.start_env``), and what this plugin does about it:
  * ``PYTHONSAFEPATH``: no directory of the checkout is on ``sys.path`` while Python and pytest start, so a
    ``pytest.py``, ``json.py`` or ``*.dist-info`` in the checkout cannot stand in for what they import. Once the
    entry-point plugins are loaded (``pytest_load_initial_conftests``, first), the directory ``python -m pytest``
    or ``python -c`` would have put first is put back, but after the standard library: the checkout's modules are
    importable, and shadow installed packages as they did, never the standard library. The variable is then
    dropped from the environment, so that what the tests start runs as it always did.
  * The pipe's descriptor is duplicated into one that child processes do not inherit, the original is closed and
    its variable dropped: a process the tests start cannot write lines of its own.
  * ``VERIFIER_ONLY`` (a JSON list of paths): the session collects exactly those files, whatever the command named
    (the candidate's own tests, run apart from main's).
Everything the plugin needs is imported here, before any file of the checkout can be imported.

Imports nothing from mergebot or the verifier: it runs inside the check, on the check's interpreter.
"""

from __future__ import annotations

import json
import os
import sys
import sysconfig
from typing import Any

import pytest

_NESTED = "VERIFIER_OUTCOMES_NESTED"
_FD = "VERIFIER_OUTCOMES_FD"
_ONLY = "VERIFIER_ONLY"
_SAFE = "PYTHONSAFEPATH"
_out: Any = None
_started_here = bool(sys.flags.safe_path) and (
    sys.argv[:1] == ["-c"] or sys.argv[0].replace("\\", "/").endswith("pytest/__main__.py"))
_invoked_in = os.getcwd()
_stdlib = {os.path.realpath(p) for p in (sysconfig.get_path("stdlib"), sysconfig.get_path("platstdlib")) if p}
_sites = {os.path.realpath(p) for p in (sysconfig.get_path("purelib"), sysconfig.get_path("platlib")) if p}


def _send(**line: Any) -> None:
    if _out is None:
        return
    try:
        _out.write(json.dumps(line, separators=(",", ":")) + "\n")
        _out.flush()
    except (OSError, ValueError):
        pass


def _after_stdlib(path: str) -> None:
    """Put ``path`` on ``sys.path`` just after the standard library's directories (before site-packages)."""
    if path in sys.path:
        return
    at = 0
    for i, entry in enumerate(sys.path):
        real = os.path.realpath(entry or ".")
        if real in _sites or any(real.startswith(s + os.sep) for s in _sites):
            break  # site-packages (under the standard library's folder outside a virtual environment)
        if real in _stdlib or any(real.startswith(s + os.sep) for s in _stdlib) or real.endswith(".zip"):
            at = i + 1
    sys.path.insert(at, path)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: Any) -> None:
    # Runs after the entry-point plugins were loaded, and before any conftest or test module is imported.
    if _started_here:
        _after_stdlib(_invoked_in)
    os.environ.pop(_SAFE, None)


def pytest_configure(config: Any) -> None:
    global _out
    if _out is not None or os.environ.get(_NESTED):
        return
    try:
        fd = int(os.environ.pop(_FD, ""))
        _out = os.fdopen(os.dup(fd), "w", encoding="utf-8")  # a dup is not inherited by child processes
        os.close(fd)
    except (ValueError, OSError):
        return
    os.environ[_NESTED] = "1"  # a pytest this one starts (pytester, a subprocess) stays silent
    only = os.environ.pop(_ONLY, None)
    if only is not None:
        try:
            files = [str(p) for p in json.loads(only)]
        except (ValueError, TypeError):
            files = []
        config.args = files


def _plugins(config: Any) -> list[str]:
    """The entry-point plugins this session loaded, by entry point name."""
    manager = config.pluginmanager
    from_dists = {id(plugin) for plugin, _ in manager.list_plugin_distinfo()}
    return sorted(name for name, plugin in manager.list_name_plugin() if id(plugin) in from_dists)


def pytest_sessionstart(session: Any) -> None:
    try:
        plugins = _plugins(session.config)
    except Exception:  # a pluggy without these calls: the plugins are unknown, not none
        plugins = None
    _send(t="session", pid=os.getpid(), root=str(session.config.rootpath), plugins=plugins)


def _why(report: Any) -> str | None:
    """Why a test was skipped (its skip's message) or expected to fail (its xfail's reason), at most 200
    characters; None for anything else."""
    if hasattr(report, "wasxfail"):
        return str(report.wasxfail)[:200]
    longrepr = getattr(report, "longrepr", None)
    if report.outcome == "skipped" and isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])[:200]
    return None


def pytest_runtest_logreport(report: Any) -> None:
    line = report.location[1] if getattr(report, "location", None) else None
    _send(t="r", id=report.nodeid, when=report.when, o=report.outcome, line=line,
          xfail=hasattr(report, "wasxfail"), why=_why(report))


def pytest_deselected(items: Any) -> None:
    for item in items:
        _send(t="deselected", id=item.nodeid)


def pytest_collectreport(report: Any) -> None:
    if report.failed:
        _send(t="collect_error", id=report.nodeid)


def pytest_sessionfinish(session: Any, exitstatus: Any) -> None:
    _send(t="end", exit=int(exitstatus))
