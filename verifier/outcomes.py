"""Each test's outcome, collected by the verifier for every run: from our pytest plugin's stream, or a JUnit report.

Rules:
  * **pytest**: the runner gives the check the write end of a pipe (``VERIFIER_OUTCOMES_FD``) and loads
    ``verifier/pytest_plugin/mergebot_outcomes.py`` into every pytest it runs (``env``: ``PYTEST_ADDOPTS`` and
    ``PYTHONPATH``). ``Collector`` keeps what arrives (at most ``MAX_BYTES``) and ``parse`` makes one outcome per
    test of its phase reports: a call that failed is ``failed``; a setup or teardown that failed, or a test whose
    phases stop before its teardown (the process died in it), is ``error``; a skip is ``skipped``, or
    ``xfailed`` when the test was expected to fail; a pass of an expected failure is ``xpassed``; ``deselected``
    comes from pytest's own hook; a file that failed to collect is an ``error`` under its node id.
  * **Several pytest sessions** in one check are merged: a test reported by more than one keeps the worst of its
    outcomes (``RANK``: failed, error, then passed before the rest), so a test that ran anywhere beats its
    deselection elsewhere.
  * **JUnit** (``repo add/set --report junit:PATH``, for other runners): the file the check left at PATH; a
    ``testcase`` with ``failure`` is failed, ``error`` is error, ``skipped`` is skipped, else passed.
  * A run with no session at all (the check never started pytest, or something stopped it before its first
    hook) or an unreadable report has **no outcomes**, which is not the same as zero tests: ``Outcomes.none``.
  * **Stored compactly** (``pack``/``unpack``): one letter per outcome (``CODES``), the ids and the lines of the
    tests that did not pass, and why each skipped or xfailed test was (its message, at most ``MAX_REASON``
    characters), as zlib-compressed JSON in base64; the counts stay readable beside it.
  * **Bounded**: at most ``MAX_BYTES`` of stream (or report), ``MAX_LINES`` lines, ``MAX_TESTS`` tests, ids of at
    most ``MAX_ID`` characters and a packed record of at most ``MAX_PACKED`` bytes. A report past any bound is a
    **flood** (``Outcomes.flood`` says which bound): nothing of its outcomes is kept, only the counts read so far
    and why, and the run is judged by that alone (``report_flood``), never by what it claimed.
  * **The start** (``start_env``): the plugin loaded by name, and the entry-point plugins named explicitly with
    auto-loading off when the caller knows which (those ``main``'s own run loaded, ``plugins`` in its first session
    line; only names this interpreter's packages declare are ever passed on);
    ``VERIFIER_ONLY`` limits a session to given files (the candidate's own tests).
Pure but for reading the given report file.
"""

from __future__ import annotations

import base64
import functools
import importlib.metadata
import json
import os
import re
import xml.etree.ElementTree as ET  # bounded local reports; expat (2.4+) caps entity expansion
import zlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verifier.result import storable

PLUGIN_DIR = Path(__file__).resolve().parent / "pytest_plugin"
PLUGIN = "mergebot_outcomes"
FD_ENV = "VERIFIER_OUTCOMES_FD"
ONLY_ENV = "VERIFIER_ONLY"
MAX_BYTES = 64 << 20
MAX_LINES = 1_000_000
MAX_TESTS = 100_000
MAX_ID = 1000
MAX_PACKED = 4 << 20
MAX_REASON = 200  # characters of a skip's or an expected failure's message kept
PLUGIN_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,199}$")  # an entry point name we pass to ``-p`` (no ``no:``)
OUTCOMES = ("passed", "failed", "error", "skipped", "xfailed", "xpassed", "deselected")
CODES = {"passed": "p", "failed": "f", "error": "e", "skipped": "s", "xfailed": "x", "xpassed": "X", "deselected": "d"}
NAMES = {v: k for k, v in CODES.items()}
RANK = {"failed": 0, "error": 1, "passed": 2, "xpassed": 3, "xfailed": 4, "skipped": 5, "deselected": 6}


@dataclass
class Outcomes:
    """One run's tests: node id -> outcome (``OUTCOMES``), the line of each that did not pass, and where from."""

    tests: dict[str, str] = field(default_factory=dict)
    lines: dict[str, int] = field(default_factory=dict)
    source: str = ""  # "pytest", "junit", or "" (none)
    sessions: int = 0
    problem: str = ""  # why there are none, or what was cut
    flood: str = ""  # the bound the report passed ("" when it kept to them): its outcomes are not kept
    plugins: list[str] | None = None  # the entry-point plugins its sessions loaded (None: not known)
    reasons: dict[str, str] = field(default_factory=dict)  # why a skipped or xfailed test was (its message)

    @property
    def none(self) -> bool:
        return not self.source or bool(self.flood)

    def counts(self) -> dict[str, int]:
        c = Counter(self.tests.values())
        return {o: c[o] for o in OUTCOMES if c[o]}

    def record(self) -> dict[str, Any]:
        """What a run's result carries (``Result.tests``): the counts, readable, and the rest packed (nothing of a
        flood: only why)."""
        packed = pack(self) if self.source and not self.flood else ""
        if len(packed) > MAX_PACKED:
            self.flood, packed = f"its outcomes packed to {len(packed)} bytes (at most {MAX_PACKED})", ""
        out: dict[str, Any] = {"source": self.source, "sessions": self.sessions, "counts": self.counts(),
                               "total": len(self.tests), "problem": self.problem, "packed": packed}
        if self.flood:
            out["flood"] = self.flood
        if self.plugins is not None:
            out["plugins"] = list(self.plugins)
        return out


REWRITE_WARNING = "Module already imported so cannot be rewritten; "


@functools.lru_cache(maxsize=1)
def installed_plugins() -> frozenset[str]:
    """The pytest plugins this interpreter's packages declare (``pytest11`` entry points): the only names a check's
    pytest is ever told to load, whatever a report claimed."""
    return frozenset(ep.name for ep in importlib.metadata.entry_points(group="pytest11"))


def start_env(plugins: Sequence[str] | None, only: Sequence[str] | None = None) -> dict[str, str]:
    """How a check's pytest starts (see the module's rules): the plugin, and ``plugins`` by name with auto-loading
    off when they are known (None: auto-loading as the command says; under ``PYTHONSAFEPATH`` it sees only the
    interpreter's own packages); ``only``: the files a session collects."""
    names = [p for p in plugins or () if PLUGIN_NAME.match(p) and p != PLUGIN and p in installed_plugins()]
    # ``-p asyncio`` (pytest-asyncio's entry point) names a module the standard library has already imported, and
    # pytest warns that it cannot rewrite it: a warning in every check's log, and an error under a repository's
    # ``filterwarnings = error``. Only that warning, for the names given here, is let go (-W beats the ini).
    quiet = [f"-W 'ignore:{REWRITE_WARNING}{n}:pytest.PytestAssertRewriteWarning'" for n in names]
    env = {"PYTEST_ADDOPTS": " ".join([*(f"-p {p}" for p in (PLUGIN, *names)), *quiet]),
           "PYTHONPATH": str(PLUGIN_DIR)}
    if plugins is not None:
        env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    if only is not None:
        env[ONLY_ENV] = json.dumps(list(only))
    return env


class Collector:
    """What the plugin streams, kept as it arrives, bounded."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.cut = False

    def feed(self, chunk: bytes) -> None:
        room = MAX_BYTES - len(self.data)
        if len(chunk) > room:
            self.cut = True
        self.data += chunk[:max(0, room)]

    def outcomes(self, checkout: Path | None = None) -> Outcomes:
        out = parse(bytes(self.data).decode("utf-8", "replace"), checkout)
        if self.cut:
            out.flood = f"the outcome stream passed {MAX_BYTES >> 20} MiB"
        return out


def _worst(a: str | None, b: str) -> str:
    return b if a is None or RANK[b] < RANK[a] else a


def parse(text: str, checkout: Path | None = None) -> Outcomes:
    """The plugin's lines (any number of sessions) as one outcome per test. pytest names tests relative to its
    rootdir; with ``checkout``, every id is made relative to the checkout instead (``tests/test_a.py::test_x``
    whichever directory pytest took for its root), so that ids from any session, and a file's path in git, agree.
    A phase reported twice keeps the worse of its two reports (a line written later cannot undo a failure). Past a
    bound (``MAX_LINES``, ``MAX_TESTS``, ``MAX_ID``) the report is a flood and nothing more is read."""
    out = Outcomes()
    phases: dict[str, dict[str, tuple[str, bool]]] = {}  # this session's tests: phase -> (outcome, xfail)
    session_tests: list[dict[str, dict[str, tuple[str, bool]]]] = []
    deselected: set[str] = set()
    errors: set[str] = set()
    plugins: set[str] = set()
    plugins_known = True
    prefix = ""
    tests = 0
    for n, raw in enumerate(text.splitlines()):
        if n >= MAX_LINES:
            out.flood = f"more than {MAX_LINES} lines of outcomes"
            break
        try:
            line = json.loads(raw)
        except ValueError:
            continue  # a line cut by a process that died mid-write
        if not isinstance(line, dict):
            continue
        kind, nodeid = line.get("t"), line.get("id")
        if isinstance(nodeid, str):
            if len(nodeid) > MAX_ID:
                out.flood = f"a test id of {len(nodeid)} characters (at most {MAX_ID})"
                break
            nodeid = prefix + nodeid if prefix and nodeid else nodeid
        if kind == "session":
            out.sessions += 1
            phases = {}
            session_tests.append(phases)
            prefix = _prefix(line.get("root"), checkout)
            named = line.get("plugins")
            if out.sessions > 1:
                pass  # only the first session's word counts: a later line may be anybody's
            elif isinstance(named, list):
                plugins.update(str(p) for p in named[:100] if isinstance(p, str) and PLUGIN_NAME.match(p))
            else:
                plugins_known = False
        elif kind == "r" and isinstance(nodeid, str):
            if nodeid not in phases:
                tests += 1
                if tests > MAX_TESTS:
                    out.flood = f"more than {MAX_TESTS} tests"
                    break
            when, got = str(line.get("when")), (str(line.get("o")), bool(line.get("xfail")))
            seen = phases.setdefault(nodeid, {})
            seen[when] = got if when not in seen or _PHASE_RANK.get(got[0], 0) < _PHASE_RANK.get(seen[when][0], 0) \
                else seen[when]
            if isinstance(line.get("line"), int):
                out.lines[nodeid] = line["line"] + 1
            if isinstance(line.get("why"), str) and got[0] == "skipped":
                out.reasons[nodeid] = line["why"][:MAX_REASON]
        elif kind == "deselected" and isinstance(nodeid, str):
            deselected.add(nodeid)
        elif kind == "collect_error" and isinstance(nodeid, str):
            errors.add(nodeid or "<collection>")
        if len(deselected) + len(errors) > MAX_TESTS:
            out.flood = f"more than {MAX_TESTS} tests"
            break
    if out.flood:
        out.source = "pytest" if out.sessions else ""
        out.lines, out.reasons = {}, {}
        return out
    if not out.sessions:
        out.problem = out.problem or "no pytest session reported (pytest never ran, or was stopped before it began)"
        return out
    out.source = "pytest"
    out.plugins = sorted(plugins) if plugins_known else None
    found: dict[str, str] = {}
    for session in session_tests:
        for nodeid, by_phase in session.items():
            found[nodeid] = _worst(found.get(nodeid), _one(by_phase))
    for nodeid in errors:
        found[nodeid] = _worst(found.get(nodeid), "error")
    for nodeid in deselected:
        found.setdefault(nodeid, "deselected")
    out.tests = found
    out.lines = {k: v for k, v in out.lines.items() if found.get(k) not in (None, "passed")}
    out.reasons = {k: v for k, v in out.reasons.items() if found.get(k) in ("skipped", "xfailed")}
    return out


_PHASE_RANK = {"failed": -2, "skipped": -1, "passed": 0}  # a phase reported twice keeps the lower


def _prefix(root: object, checkout: Path | None) -> str:
    """What puts a node id of a session rooted at ``root`` relative to ``checkout`` ("" when it already is)."""
    if checkout is None or not isinstance(root, str):
        return ""
    rel = os.path.relpath(root, checkout)
    return "" if rel == "." or rel.startswith("..") else rel.replace(os.sep, "/") + "/"


def _one(by_phase: dict[str, tuple[str, bool]]) -> str:
    setup, call, teardown = by_phase.get("setup"), by_phase.get("call"), by_phase.get("teardown")
    if call is not None and call[0] == "failed":
        return "failed"
    for phase in (setup, teardown):
        if phase is not None and phase[0] == "failed":
            return "error"
    if setup is not None and setup[0] == "skipped":
        return "xfailed" if setup[1] else "skipped"
    if call is None or teardown is None:
        return "error"  # it began and never finished: the process died inside it
    if call[0] == "skipped":
        return "xfailed" if call[1] else "skipped"
    return "xpassed" if call[1] else "passed"


def from_junit(path: Path) -> Outcomes:
    """The outcomes a JUnit report names (``testsuite`` or ``testsuites`` root); none when it is unreadable."""
    out = Outcomes()
    try:
        if path.stat().st_size > MAX_BYTES:
            out.source, out.flood = "junit", f"the report {path.name} is over {MAX_BYTES >> 20} MiB"
            return out
        root = ET.parse(path).getroot()  # noqa: S314 (see the import)
    except (OSError, ET.ParseError) as e:
        out.problem = f"the report {path.name} could not be read: {e}"
        return out
    if root.tag not in ("testsuites", "testsuite"):
        out.problem = f"the report {path.name} is not a JUnit report"
        return out
    out.source, out.sessions = "junit", 1
    for case in root.iter("testcase"):
        name, cls = case.get("name", "?"), case.get("classname")
        nodeid = f"{cls}::{name}" if cls else name
        if len(nodeid) > MAX_ID:
            out.tests, out.lines, out.flood = {}, {}, f"a test id of {len(nodeid)} characters (at most {MAX_ID})"
            break
        if case.find("failure") is not None:
            outcome = "failed"
        elif case.find("error") is not None:
            outcome = "error"
        elif case.find("skipped") is not None:
            outcome = "skipped"
        else:
            outcome = "passed"
        out.tests[nodeid] = _worst(out.tests.get(nodeid), outcome)
        if outcome != "passed" and (line := case.get("line")) and line.isdigit():
            out.lines[nodeid] = int(line)
        if len(out.tests) > MAX_TESTS:
            out.tests, out.lines, out.flood = {}, {}, f"more than {MAX_TESTS} tests"
            break
    return out


def pack(out: Outcomes) -> str:
    """The outcomes, compact (see the module's rules); every id made storable first (``verifier.result.storable``),
    since whatever reads them back may store them."""
    data = json.dumps(storable({"t": {k: CODES[v] for k, v in out.tests.items()}, "l": out.lines,
                                **({"r": out.reasons} if out.reasons else {})}), separators=(",", ":"))
    return base64.b64encode(zlib.compress(data.encode(), 6)).decode()


def unpack(record: dict[str, Any] | None) -> Outcomes:
    """A run's ``tests`` record back into ``Outcomes`` (none when the run had none, or the record is damaged)."""
    if record and record.get("flood"):
        return Outcomes(source=str(record.get("source") or ""), problem=str(record.get("problem") or ""),
                        flood=str(record["flood"]))
    if not record or not record.get("source") or not record.get("packed"):
        return Outcomes(problem=str((record or {}).get("problem") or ""))
    try:
        data = json.loads(zlib.decompress(base64.b64decode(record["packed"]), bufsize=1 << 20))
        tests = {str(k): NAMES[v] for k, v in data["t"].items()}
        lines = {str(k): int(v) for k, v in data.get("l", {}).items()}
        reasons = {str(k): str(v)[:MAX_REASON] for k, v in data.get("r", {}).items()}
    except (ValueError, KeyError, TypeError, AttributeError, zlib.error):
        return Outcomes(problem="the stored outcomes could not be read")
    plugins = record.get("plugins")
    return Outcomes(tests, lines, str(record["source"]), int(record.get("sessions") or 1),
                    str(record.get("problem") or ""),
                    plugins=[str(p) for p in plugins] if isinstance(plugins, list) else None, reasons=reasons)


def junit_path(report: str) -> str | None:
    """The path of a ``junit:PATH`` report declaration (relative, inside the checkout), else None."""
    if not report.startswith("junit:"):
        return None
    path = os.path.normpath(report[len("junit:"):])
    if os.path.isabs(path) or path.startswith(".."):
        return None
    return path
