"""A tamper signal: the lines a change adds to non-test Python that reach into the machinery that checks it.

A reward-hacking agent can make the verifier's pytest run pass without fixing anything: its non-test code notices
the test run, exits early, forges outcomes, swaps modules or builtins, or makes every comparison true. ``scan`` names
each such line (a ``Finding`` under one of ``RULES``) so that a reviewer looks at it; it judges and blocks nothing.

The rules of ``scan``:
  1. Only ``.py`` files that are not tests (``is_test(path)`` is false) and that the candidate keeps are read. A
     version over ``MAX_BYTES`` is never parsed: the candidate's is skipped, main's counts as having no findings.
  2. Each version is parsed and matched on its tree, never run (``mergebot.landing.intake.tamper_rules``, which says how
     each rule is matched). What a name or an expression stands for is resolved statically
     (``mergebot.landing.intake.tamper_resolve``: imports, aliases, ``getattr``, ``__import__``, and constants folded
     through concatenation, slicing, base64 and the like), so a name spelt in pieces is still that name.
  3. Source handed to ``exec``/``eval``/``compile`` that folds to a constant is scanned too (two levels deep), and
     what it would do is reported on the call's line.
  4. A version that does not parse is read line by line for the string rules only (the names of the outcome channel,
     of pytest's variables and of the held-out checks).
  5. A finding is new unless main's version of the same file has one with the same rule and the same stripped line
     text: moving or re-indenting a line adds nothing. Only new findings are returned.
  6. One finding per line and rule, sorted by path, line and rule, at most ``MAX_FINDINGS`` in all. A string rule
     matched in a multi-line string (a docstring) is reported on the line that matches.

How each rule is matched. "At import" is outside any function (module level, including module-level ``if``,
``try``, ``with`` and ``for`` blocks, class bodies, decorators and default values: all run on import) and outside
``if __name__ == "__main__":``. A *unit* is one function, else one module-level statement.
  * outcome_channel: a string naming VERIFIER_OUTCOMES, mergebot_outcomes, /proc/<pid>/fd or /dev/fd/; writing to,
    opening or duplicating a descriptor that folds to 3..255, or a loop variable running over one.
  * pytest_env: a string naming a PYTEST_* variable; an environment read of a key starting PYTEST; importing pytest or
    _pytest (also by ``__import__``, importlib, ``find_spec``); a "pytest" word compared with or searched for in
    sys.argv, sys.modules or os.environ, or in a unit that reads one of them; a stack or frame read (``inspect.stack``,
    ``sys._getframe``...) in a unit holding a string with "test" in it (docstrings do not count).
  * held_out: a string naming /held-out or VERIFIER_HELD_OUT; "held-out"/"held_out" in a path (next to a slash), an
    upper-case name, an environment key, a path joined with ``/``, or handed to ``open``, ``Path``, ``os.listdir``...
  * sys_modules_write: setting, deleting or replacing items of sys.modules (also its mutators, ``operator.setitem``,
    ``dict.update`` on it); setting an attribute of, or in the ``__dict__`` of, a module taken from it, unless it is
    the module's own (``sys.modules[__name__]``).
  * builtins_write: setting or deleting attributes or items of builtins or ``__builtins__`` (also ``setattr``,
    ``vars(builtins)``, ``builtins.__dict__.update``); at import, setting an attribute of a standard-library module or
    class, but for upper-case constants and a few hooks honest code sets (``sys.stdout``, ``sys.excepthook``...).
  * exit_at_import: at import, os._exit, sys.exit, exit, quit, os.abort, ``os.kill(os.getpid(), ...)``,
    ``raise SystemExit``, a call of one of the file's defs that hard-exits (a few calls deep), or a hard exit handed
    to anything (``threading.Timer``, ``signal.signal``); anywhere, ``atexit.register`` (a call or a decorator) of
    something that exits.
  * constant_eq: a comparison method whose every return folds to one same constant and that cannot fall off its end
    (a def or lambda in a class body, set on a class, or under that key in a dict literal: ``type(...)``); using
    ``unittest.mock.ANY``, which equals everything.
  * dynamic_code: exec, eval or compile of anything but a plain string literal; marshal.loads, types.FunctionType or
    CodeType; pickle.loads of constant bytes. What exec'd source folds to is analysed in turn.
  * trace_hook: sys.settrace, setprofile, addaudithook, threading's, sys.monitoring, ``PyFrame_*`` through ctypes;
    setting a frame's f_locals, f_globals, f_lineno or f_trace; gc's heap searches in a unit that touches functions or
    frames (``__code__``, ``f_back``, ``types.FunctionType``...).

Pure: no I/O, nothing imported from the code it reads, the standard library only.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from mergebot.landing.intake.tamper_rules import analyse

MAX_FINDINGS = 200
MAX_BYTES = 1 << 20
TEXT_CHARS = 200
_LINE_BREAK = re.compile(r"\r\n|\r|\n")  # what ends a line for Python's parser, so numbers agree with ``ast``'s


@dataclass(frozen=True)
class Finding:
    path: str
    line: int  # 1-based, in the candidate's version of the file
    rule: str  # a key of RULES
    text: str  # that line, stripped, cut to TEXT_CHARS characters


RULES: dict[str, str] = {
    "outcome_channel": "Names the verifier's outcome pipe or plugin (VERIFIER_OUTCOMES, mergebot_outcomes), or writes "
    "to a raw file descriptor 3..255 or /proc/self/fd: test outcomes forged around the test run.",
    "pytest_env": "Notices that pytest is running (PYTEST_* variables, pytest in sys.modules or sys.argv, importing "
    "pytest, stack frames searched for tests): code that behaves differently while it is checked.",
    "held_out": "Names the held-out checks (/held-out, VERIFIER_HELD_OUT, a held-out path or variable): code looking "
    "for the tests it must never see.",
    "sys_modules_write": "Writes to sys.modules, or into a module reached through it: swaps the code the tests import.",
    "builtins_write": "Assigns to builtins, or at import time to the standard library (os._exit, "
    "unittest.TestCase.assertEqual): changes what the tests' own calls do.",
    "exit_at_import": "Exits the process at import time (os._exit, sys.exit, raise SystemExit, killing itself) or "
    "from an atexit hook: ends the run before a failure is counted, or rewrites its exit status.",
    "constant_eq": "A comparison method (__eq__, __ne__, __lt__, ..., __contains__) returning one constant on every "
    "path, or mock.ANY: every assertion on such a value passes.",
    "dynamic_code": "exec, eval or compile of anything but a plain string literal (built, decoded, loaded): hides "
    "from review what runs.",
    "trace_hook": "Installs a trace, profile or audit hook, rewrites a frame, or searches the heap (gc) for functions "
    "or frames: reaches into the running tests.",
}


def scan(changes: Sequence[tuple[str, str | None, str | None]], *, is_test: Callable[[str], bool]) -> list[Finding]:
    """The suspicious lines ``changes`` add: (path, main's text or None if new, the candidate's or None if deleted)."""
    found: list[Finding] = []
    for path, old, new in changes:
        if new is None or not path.endswith(".py") or is_test(path) or _too_big(new):
            continue
        known = set() if old is None or _too_big(old) else {(f.rule, f.text) for f in _findings(path, old)}
        found += [f for f in _findings(path, new) if (f.rule, f.text) not in known]
    found.sort(key=lambda f: (f.path, f.line, f.rule))
    return found[:MAX_FINDINGS]


def _too_big(text: str) -> bool:
    return len(text) > MAX_BYTES or len(text.encode("utf-8", "surrogatepass")) > MAX_BYTES


def _findings(path: str, text: str) -> list[Finding]:
    lines = _LINE_BREAK.split(text)
    return [Finding(path, n, rule, lines[n - 1].strip()[:TEXT_CHARS] if 0 < n <= len(lines) else "")
            for n, rule in sorted(analyse(text))]
