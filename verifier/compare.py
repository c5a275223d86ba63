"""Judging a run's tests against main's: what passed on main keeps passing (PASS_TO_PASS). Pure.

Rules:
  * The **baseline** is the outcomes of the same check on the ``main`` the candidate merged onto. Without
    outcomes there (not a pytest suite, no report) there is nothing to compare, and nothing is judged here.
  * With a baseline, a run that has **no outcomes** at all (pytest never reported, the report is missing or
    unreadable) is ``no_report``: whatever stopped the report decided the run, not the tests.
  * Every test that **passed** in the baseline must pass now. Failed, error, skipped, xfailed, xpassed (now marked
    as expected to fail), deselected or missing is ``tests_weakened``, and the comparison names each test with
    what it was and what it is now.
  * A test whose **definition the change deletes** (its file, or its function or class: ``deleted_tests``, read
    from what would land) is ``removed`` where the subtask that deleted it was allowed to remove tests, and
    weakened otherwise (now: ``deleted``), whatever the run gave it: a judging run with main's tests may have run
    main's version of it.
  * A test that is new, or that did not pass on main, is never weakening: adding tests is free.
  * **Changed tests** (``changed_tests``): a test function whose code the change edits is named on the verdict
    (``tests_changed``), so reviewers see it; a repository may refuse them (``--old-tests refuse``).
  * A subtask's **acceptance tests** (FAIL_TO_PASS: files a lead attached, written into the merged commit) must
    pass, every test of every file, and every file must have tests that ran: ``acceptance_failed`` otherwise
    (``accepted``). This holds whether or not main has outcomes.
"""

from __future__ import annotations

import ast
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from verifier.outcomes import Outcomes

SHOWN = 200  # tests named in a comparison's record, at most (the counts are whole)


@dataclass(frozen=True)
class Change:
    id: str
    was: str
    now: str  # an outcome, "missing", or "deleted" (its definition deleted without permission)


@dataclass(frozen=True)
class Comparison:
    verdict: str  # "" (fine), "tests_weakened" or "no_report"
    weakened: tuple[Change, ...] = ()
    removed: tuple[str, ...] = ()  # deleted with permission
    added: tuple[str, ...] = ()  # not on main at all
    passed_before: int = 0
    passed_now: int = 0
    baseline: dict[str, Any] = field(default_factory=dict)  # where the baseline came from (job, commit)

    def record(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "passed_before": self.passed_before, "passed_now": self.passed_now,
                "weakened_count": len(self.weakened), "removed_count": len(self.removed),
                "added_count": len(self.added),
                "weakened": [{"id": c.id, "was": c.was, "now": c.now} for c in self.weakened[:SHOWN]],
                "removed": list(self.removed[:SHOWN]), "added": list(self.added[:SHOWN]), "baseline": self.baseline}


def compare(baseline: Outcomes, now: Outcomes, *, deleted: Collection[str] = (),
            removal_allowed: Collection[str] = (), where: Mapping[str, Any] | None = None) -> Comparison:
    """``deleted``: the baseline's tests whose definition the change deletes; ``removal_allowed``: those of them a
    lead allowed to go."""
    info = dict(where or {})
    if baseline.none:
        return Comparison("", baseline=info)
    passed = sorted(t for t, o in baseline.tests.items() if o == "passed")
    if now.none:
        return Comparison("no_report", passed_before=len(passed), baseline=info)
    weakened, removed = [], []
    allowed, gone = set(removal_allowed), set(deleted)
    for test in passed:
        outcome = now.tests.get(test)
        if test in gone:  # deleted in what would land, whether or not main's version of its file ran
            if test in allowed:
                removed.append(test)
            else:
                weakened.append(Change(test, "passed", "deleted"))
            continue
        if outcome == "passed":
            continue
        weakened.append(Change(test, "passed", outcome or "missing"))
    added = sorted(t for t in now.tests if t not in baseline.tests)
    return Comparison("tests_weakened" if weakened else "", tuple(weakened), tuple(removed), tuple(added),
                      len(passed), sum(1 for o in now.tests.values() if o == "passed"), info)


def accepted(now: Outcomes, files: Collection[str]) -> tuple[Change, ...]:
    """What keeps a run's acceptance tests (in ``files``) from having passed: a test that did not pass, or a file
    none of whose tests ran."""
    wrong: list[Change] = []
    by_file: dict[str, list[str]] = {}
    for test in now.tests:
        by_file.setdefault(split_id(test)[0], []).append(test)
    for path in sorted(set(files)):
        tests = by_file.get(path, [])
        if not tests:
            wrong.append(Change(path, "attached", "missing"))
        wrong += [Change(t, "attached", now.tests[t]) for t in sorted(tests) if now.tests[t] != "passed"]
    return tuple(wrong)


def is_test_file(path: str) -> bool:
    """A file pytest collects by default: ``test_*.py`` or ``*_test.py``."""
    name = path.rsplit("/", 1)[-1]
    return name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py"))


def changed_tests(before: Mapping[str, str | None], after: Mapping[str, str | None]) -> list[str]:
    """The test functions a change edits (present on both sides, with another body or decorators): ``path::name``
    ids, sorted. New and deleted functions are not edits; a file that does not parse on either side names none."""
    out = []
    for path in sorted(set(before) & set(after)):
        old, new = before[path], after[path]
        if old is None or new is None or not is_test_file(path):
            continue
        a, b = _bodies(old), _bodies(new)
        if a is None or b is None:
            continue
        out += [f"{path}::{'::'.join(name)}" for name in sorted(set(a) & set(b)) if a[name] != b[name]
                and name[-1].startswith("test")]
    return out


def _bodies(source: str) -> dict[tuple[str, ...], str] | None:
    """Each function's (and method's) code, without line numbers, by name path."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    found: dict[tuple[str, ...], str] = {}

    def walk(body: list[ast.stmt], prefix: tuple[str, ...]) -> None:
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                found[(*prefix, node.name)] = ast.dump(node, include_attributes=False)
            elif isinstance(node, ast.ClassDef):
                walk(node.body, (*prefix, node.name))

    walk(tree.body, ())
    return found


def split_id(nodeid: str) -> tuple[str, tuple[str, ...]]:
    """``tests/test_a.py::TestX::test_y[1-2]`` -> ``("tests/test_a.py", ("TestX", "test_y"))``."""
    path, _, rest = nodeid.partition("::")
    names = tuple(part.split("[", 1)[0] for part in rest.split("::")) if rest else ()
    return path, names


def definitions(source: str) -> set[tuple[str, ...]] | None:
    """Every function and class a test id can name in a Python file, as name paths (``("TestX", "test_y")``);
    None when the file does not parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    found: set[tuple[str, ...]] = set()

    def walk(body: list[ast.stmt], prefix: tuple[str, ...]) -> None:
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                found.add((*prefix, node.name))
            elif isinstance(node, ast.ClassDef):
                found.add((*prefix, node.name))
                walk(node.body, (*prefix, node.name))

    walk(tree.body, ())
    return found


def deleted_tests(tests: Collection[str], before: Mapping[str, str | None],
                  after: Mapping[str, str | None]) -> set[str]:
    """Which of ``tests`` the change deletes the definition of: its file is gone, or the file no longer defines
    the function (or a class around it) that it did. ``before``/``after``: each test file's text on main and in
    the change (None: no such file)."""
    gone: set[str] = set()
    parsed: dict[tuple[str, str], set[tuple[str, ...]] | None] = {}

    def defs(side: str, path: str, text: str) -> set[tuple[str, ...]] | None:
        key = (side, path)
        if key not in parsed:
            parsed[key] = definitions(text)
        return parsed[key]

    for test in tests:
        path, names = split_id(test)
        old, new = before.get(path), after.get(path)
        if old is None:
            continue  # not a file on main: nothing of it was deleted
        if new is None:
            gone.add(test)
            continue
        if not names:
            continue
        old_defs, new_defs = defs("before", path, old), defs("after", path, new)
        if old_defs is None or new_defs is None:
            continue  # a file that does not parse deletes nothing we can name
        for depth in range(1, len(names) + 1):
            prefix = names[:depth]
            if prefix in old_defs and prefix not in new_defs:
                gone.add(test)
                break
    return gone


def only_deletes(before: str, after: str) -> bool:
    """Whether ``after`` is ``before`` with statements taken out and nothing else changed (a method taken out of a
    class counts; a changed line, an added one or a reordering does not). False when either does not parse."""
    try:
        old, new = ast.parse(before), ast.parse(after)
    except (SyntaxError, ValueError):
        return False
    return _kept_in_order(new.body, old.body)


def _kept_in_order(new: list[ast.stmt], old: list[ast.stmt]) -> bool:
    at = 0
    for stmt in new:
        while at < len(old) and not _same_or_trimmed(stmt, old[at]):
            at += 1
        if at == len(old):
            return False
        at += 1
    return True


def _same_or_trimmed(new: ast.stmt, old: ast.stmt) -> bool:
    if isinstance(new, ast.ClassDef) and isinstance(old, ast.ClassDef) and new.name == old.name:
        head = [ast.dump(x, include_attributes=False) for x in (*new.bases, *new.keywords, *new.decorator_list)]
        was = [ast.dump(x, include_attributes=False) for x in (*old.bases, *old.keywords, *old.decorator_list)]
        return head == was and _kept_in_order(new.body, old.body)
    return ast.dump(new, include_attributes=False) == ast.dump(old, include_attributes=False)
