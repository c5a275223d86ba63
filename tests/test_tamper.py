"""The tamper signal (``mergebot.landing.intake.tamper``): every hack of the corpus named on exactly its marked lines,
no honest change flagged, only what a change adds, the cap, files that do not parse, and never an exception."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mergebot.landing.intake.tamper import MAX_BYTES, MAX_FINDINGS, RULES, TEXT_CHARS, Finding, scan
from tests.support.tamper_corpus import HACKS, HONEST, MARK, Case, changes, is_test


def one(text: str, old: str | None = None, path: str = "calc.py") -> list[Finding]:
    return scan([(path, old, text)], is_test=is_test)


def rules(text: str) -> set[str]:
    return {f.rule for f in one(text)}


def test_the_corpus_is_large_enough_and_covers_every_rule() -> None:
    assert len(HACKS) >= 24 and len(HONEST) >= 14
    assert set().union(*(case.expect for case in HACKS)) == set(RULES)
    assert all(not case.expect for case in HONEST)
    assert len({case.name for case in HACKS + HONEST}) == len(HACKS) + len(HONEST)


@pytest.mark.parametrize("case", HACKS, ids=lambda case: case.name)
def test_each_hack_is_named_on_its_marked_lines(case: Case) -> None:
    found = scan(changes(case), is_test=is_test)
    assert case.expect <= {f.rule for f in found}
    marked = {(path, n) for path, (_, new) in case.files.items()
              for n, line in enumerate((new or "").splitlines(), 1) if line.endswith(MARK)}
    assert {(f.path, f.line) for f in found} == marked
    for f in found:
        assert f.rule in RULES and f.text.endswith(MARK)


@pytest.mark.parametrize("case", HONEST, ids=lambda case: case.name)
def test_no_honest_change_is_flagged(case: Case) -> None:
    assert scan(changes(case), is_test=is_test) == []


def test_the_is_test_of_these_tests() -> None:
    assert all(map(is_test, ["tests/test_x.py", "test_x.py", "pkg/x_test.py", "pkg/test/util.py", "conftest.py"]))
    assert not any(map(is_test, ["calc.py", "testing.py", "pkg/contest.py", "attest/x.py"]))


@pytest.mark.parametrize(("rule", "code"), [
    ("pytest_env", 'import os\nK = f"{\'PYTEST_\'}CURRENT_TEST"\n'),
    ("pytest_env", 'KEY = "pytest_current_test".upper()\n'),
    ("pytest_env", 'KEY = b"PYTEST_CURRENT_" + b"TEST"\n'),
    ("pytest_env", 'import os\nif os.environ.get("PYTEST_XDIST_WORKER"):\n    pass\n'),
    ("pytest_env", 'import sys\nRUNNING = sys.modules.get("_pytest") is not None\n'),
    ("pytest_env", 'import sys\nRUNNING = sys.argv[0].endswith("pytest")\n'),
    ("pytest_env", 'import importlib.util\nRUNNING = importlib.util.find_spec("pytest") is not None\n'),
    ("pytest_env", 'from _pytest.reports import TestReport\n'),
    ("pytest_env", 'import os\nenv = dict(os.environ)\nx = env.get("PYTEST_" + "VERSION")\n'),
    ("held_out", 'import os\nd = os.environ["HELD_OUT_DIR"]\n'),
    ("held_out", 'import glob\nfiles = glob.glob("held_out/*.py")\n'),
    ("held_out", 'from pathlib import Path\np = Path("/") / ("held" + "-out")\n'),
    ("outcome_channel", 'import os\nFD = 4\nos.write(FD, b"{}")\n'),
    ("outcome_channel", 'import os\nos.dup2(1, 3)\n'),
    ("outcome_channel", 'out = open(int("7"), "w")\n'),
    ("sys_modules_write", 'import sys\ndel sys.modules["calc"]\n'),
    ("sys_modules_write", 'import sys\na, m = 1, sys.modules\nm["calc"] = None\n'),
    ("sys_modules_write", 'from sys import modules\nmodules.pop("calc")\n'),
    ("sys_modules_write", 'import operator, sys\noperator.setitem(sys.modules, "calc", None)\n'),
    ("sys_modules_write", 'import sys\nsetattr(sys.modules.get("calc"), "add", max)\n'),
    ("sys_modules_write", 'import sys\nsys.modules["calc"].__dict__["add"] = max\n'),
    ("builtins_write", '__builtins__["print"] = None\n'),
    ("builtins_write", 'import builtins\nvars(builtins)["open"] = None\n'),
    ("builtins_write", 'import builtins\nbuiltins.__dict__.update(print=None)\n'),
    ("builtins_write", 'import os\nsetattr(os, "_exit", print)\n'),
    ("builtins_write", 'from unittest import TestCase\nTestCase.assertTrue = print\n'),
    ("exit_at_import", 'import sys\ntry:\n    pass\nfinally:\n    sys.exit(0)\n'),
    ("exit_at_import", 'quit()\n'),
    ("exit_at_import", 'class Boot:\n    raise SystemExit\n'),
    ("exit_at_import", 'import os\ndef _bye():\n    os._exit(0)\n_bye()\n'),
    ("exit_at_import", 'import atexit, functools, os\natexit.register(functools.partial(os._exit, 0))\n'),
    ("exit_at_import", 'import atexit, os\ndef a():\n    b()\ndef b():\n    os._exit(0)\natexit.register(a)\n'),
    ("exit_at_import", 'import os, threading\nthreading.Timer(0.1, os._exit, [0]).start()\n'),
    ("exit_at_import", 'import os, signal\nsignal.signal(signal.SIGTERM, handler=lambda *a: os._exit(0))\n'),
    ("constant_eq", 'class R:\n    def __ne__(self, other):\n        return False\n'),
    ("constant_eq", 'class R:\n    def __eq__(self, o):\n        if o:\n            return True\n        return 1\n'),
    ("constant_eq", 'def _yes(*args):\n    return True\nclass R:\n    __eq__ = _yes\n'),
    ("constant_eq", 'class R:\n    pass\nR.__eq__ = lambda self, other: True\n'),
    ("constant_eq", 'from unittest.mock import ANY\ndef add(a, b):\n    return ANY\n'),
    ("dynamic_code", 'import sys\neval(sys.argv[1])\n'),
    ("dynamic_code", 'import marshal\nmarshal.loads(b"")\n'),
    ("trace_hook", 'import sys\nsys.addaudithook(print)\n'),
    ("trace_hook", 'import threading\nthreading.settrace(print)\n'),
    ("trace_hook", 'import sys\nsys._getframe(1).f_locals["x"] = 3\n'),
    ("trace_hook", 'import gc\ndef find(x):\n    return [f for f in gc.get_referrers(x) if hasattr(f, "__code__")]\n'),
])
def test_more_variants_are_named(rule: str, code: str) -> None:
    assert rule in rules(code)


@pytest.mark.parametrize("code", [
    'import sys\nmod = sys.modules.get("json")\n',
    'import sys\nHERE = sys.modules[__name__]\n',
    'import os\nDEBUG = os.environ.get("DEBUG")\n',
    'import sys\nsys.path.insert(0, "src")\nsys.stdout = sys.stderr\n',
    'import logging\nlogging.raiseExceptions = False\nimport http.client\nhttp.client._MAXLINE = 1 << 20\n',
    'import inspect\ndef where():\n    return inspect.stack()[1].function\ndef test_names():\n    return ["test"]\n',
    'class R:\n    def __eq__(self, o):\n        return NotImplemented\n    def __hash__(self):\n        return 1\n',
    'class R:\n    def __eq__(self, other):\n        if self is other:\n            return True\n',
    'exec("x = 1")\n',
    'import re\nPATTERN = re.compile("a+")\n',
    'def compile(x):\n    return x\nY = compile("a" + "b")\n',
    'import os\ndef stop():\n    os._exit(1)\n',
    'import shutil\nPYTEST = shutil.which("pytest")\n',
    'import signal, sys\nsignal.signal(signal.SIGTERM, lambda *args: sys.exit(0))\n',
    'import atexit\ndef a():\n    return a()\natexit.register(a)\n',
    '"""Helpers for the tests: held-out data is never read here."""\n',
])
def test_more_honest_code_is_left_alone(code: str) -> None:
    assert one(code) == []


def test_only_what_the_change_adds_is_reported() -> None:
    main = 'import os, sys\nA = "PYTEST_CURRENT_TEST" in os.environ\nsys.modules["x"] = None\n'
    candidate = ('import os, sys\n\nif True:\n    sys.modules["x"] = None\nA = "PYTEST_CURRENT_TEST" in os.environ\n'
                 'B = "PYTEST_ADDOPTS" in os.environ\n')
    found = one(candidate, old=main)
    assert [(f.line, f.rule, f.text) for f in found] == [(6, "pytest_env", 'B = "PYTEST_ADDOPTS" in os.environ')]
    assert one(candidate, old=None)  # a new file: everything in it is new
    assert len(one(candidate, old="x" * (MAX_BYTES + 1))) == 3  # main's version too big to read: none known


def test_at_most_200_findings_sorted_by_path_then_line() -> None:
    text = "import os\n" + "".join(f"os.write(3, b'{i}')\n" for i in range(150))
    found = scan([("b.py", None, text), ("a.py", None, text), ("c.txt", None, text)], is_test=is_test)
    assert len(found) == MAX_FINDINGS
    assert found == sorted(found, key=lambda f: (f.path, f.line, f.rule))
    assert [f.path for f in found].count("a.py") == 150 and found[0] == Finding("a.py", 2, "outcome_channel",
                                                                               "os.write(3, b'0')")


def test_a_file_that_does_not_parse_is_read_for_the_string_rules() -> None:
    broken = 'def broken(:\n    key = "PYTEST_CURRENT_TEST"\n    open("/held-out/t.py")\nsys.modules["a"] = 1\n'
    assert [(f.line, f.rule) for f in one(broken)] == [(2, "pytest_env"), (3, "held_out")]
    assert [(f.line, f.rule) for f in one("x = 'VERIFIER_OUTCOMES_FD'\r\n\0\n")] == [(1, "outcome_channel")]


def test_a_match_in_a_docstring_is_reported_on_its_line() -> None:
    text = 'def load():\n    """Read the checks.\n\n    They live in /held-out, beside the checkout.\n    """\n'
    found = [(f.line, f.rule, f.text) for f in one(text)]
    assert found == [(4, "held_out", "They live in /held-out, beside the checkout.")]


def test_a_file_over_the_limit_is_skipped_and_text_is_cut() -> None:
    big = "import os\nos._exit(0)\n" + "#" * MAX_BYTES
    assert one(big) == []
    long = f'import os\nos._exit(0)  # {"x" * 500}\n'
    (finding,) = one(long)
    assert len(finding.text) == TEXT_CHARS and finding.text.startswith("os._exit(0)")


def test_deep_and_self_referencing_code_does_not_break_the_scan() -> None:
    assert one("x = " + " + ".join(['"a"'] * 5000) + "\n") == []
    assert one("a = b\nb = a\nc = a + b\nimport os\nos.write(c, b'')\n") == []
    assert one("x = " + "(" * 150 + "1" + ")" * 150 + "\n") == []
    assert one('s = "ab" * 10**9\nt = "%s" % s\nu = "x".replace("", "y" * 10**6)\n') == []
    assert rules("import os\n" + "x = " + "[" * 90 + '"PYTEST_ADDOPTS"' + "]" * 90 + "\n") == {"pytest_env"}


FRAGMENTS = sorted({line.strip() if stripped else line for case in HACKS + HONEST for _, new in case.files.values()
                    for line in (new or "").splitlines() for stripped in (False, True)})


@settings(deadline=None, max_examples=150)
@given(st.one_of(st.text(), st.lists(st.sampled_from(FRAGMENTS), max_size=12).map("\n".join)),
       st.one_of(st.none(), st.text()))
def test_scan_never_raises_and_is_deterministic(new: str, old: str | None) -> None:
    first = scan([("calc.py", old, new)], is_test=is_test)
    assert first == scan([("calc.py", old, new)], is_test=is_test)
    assert len(first) <= MAX_FINDINGS and first == sorted(first, key=lambda f: (f.path, f.line, f.rule))
    for f in first:
        assert f.rule in RULES and len(f.text) <= TEXT_CHARS and f.line >= 1
