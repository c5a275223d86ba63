"""What a judging run takes from main (the reset), and which files are the candidate's own tests. Pure.

Rules:
  * **Test paths** are a repository rule (``repo set --tests GLOB ...``), by default ``DEFAULT_GLOBS``: files named
    ``test_*.py`` or ``*_test.py``, everything under a ``tests/`` or ``test/`` folder, and every ``conftest.py``. A
    glob ending in ``/`` names a folder anywhere in the tree (and everything under it); one with a ``/`` elsewhere
    matches the whole path; one without matches a file's name in any folder.
  * **The commit the checks judge** is the merged commit with every test path as on main: a test path the change
    edited is main's again (``restore``), one it added is absent (``drop``). So main's tests, and only they, judge
    the change's code (PASS_TO_PASS, FAIL_TO_PASS and the held-out checks alike). A test path it deleted stays
    deleted, as it would land: the comparison with main judges a deleted test (``tests_weakened``), and so it does a
    test whose definition an edit deletes, though main's version of the file ran.
  * The subtask's **acceptance tests** are the lead's, written into the merge: they stay as written.
  * **What a lead allowed stays as the change made it** (``kept``): with a behaviour-change permission the change's
    edits of existing test files are used; with a test-removal permission its deletions are (a deleted file stays
    deleted, as always, and a file whose edit only deletes definitions is used as edited: any other edit in it goes
    back to main's, and the deleted definitions are judged by the comparison); with a check-change
    permission its edits of what configures the check (the repository's check-configuration globs, ``conftest.py``
    among them) are.
    Reviewers see which (``kept``, on the record).
  * **The candidate's own tests** (``own``) are the test modules (``test_*.py``, ``*_test.py``) it adds or edits,
    but not kept ones (they are in the judging run already) or acceptance tests: they run apart, on the merged
    commit, and must pass. When the reset takes from main anything else (a helper, data, an ``__init__.py``), main's
    test modules never ran with what would land: the run apart is then the whole suite on the merged commit
    (``whole``), so that what lands was run as a whole, and its outcomes can be main's next baseline.
  * ``extra``: more paths that are tests on main (the files main's own run collected, and the ``__init__.py`` of
    their folders), whatever the globs say.
"""

from __future__ import annotations

import fnmatch
import posixpath
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

DEFAULT_GLOBS = ("test_*.py", "*_test.py", "tests/", "test/", "conftest.py")
MODULES = ("test_*.py", "*_test.py")  # the files pytest collects as test modules by default


@dataclass(frozen=True)
class Change:
    """One path the change (main -> merged) touches: ``added``, ``modified`` or ``deleted``."""

    path: str
    status: str
    subtask_id: int | None = None  # the subtask whose own change touched it (in a batch, the last such member)
    only_deletes: bool = False  # a modification that only deletes definitions the file had on main


@dataclass(frozen=True)
class Allowed:
    """What a lead allowed one subtask to change."""

    behaviour: bool = False
    removal: bool = False
    check: bool = False


@dataclass(frozen=True)
class Reset:
    restore: tuple[str, ...] = ()  # main's version goes back (edited test paths)
    drop: tuple[str, ...] = ()  # absent from the judging run (added test paths)
    kept: tuple[str, ...] = ()  # test paths as the change made them, because a lead allowed it
    own: tuple[str, ...] = ()  # the candidate's own test modules, run apart on the merged commit
    whole: bool = False  # the run apart is the whole suite (the reset took more than test modules from main)

    @property
    def needed(self) -> bool:
        """Whether the judged commit differs from the merged one."""
        return bool(self.restore or self.drop)

    def record(self) -> dict[str, Any]:
        return {"restored": list(self.restore), "dropped": list(self.drop), "kept": list(self.kept),
                "own": list(self.own), **({"whole": True} if self.whole else {})}


def matches(path: str, globs: Sequence[str]) -> bool:
    """Whether ``path`` is matched by one of ``globs`` (see the module's rules)."""
    name = posixpath.basename(path)
    folders = path.split("/")  # the path itself too: a test folder replaced by a file or a symbolic link
    for g in globs:
        if g.endswith("/"):
            folder = g.rstrip("/")
            if "/" in folder:
                if (path + "/").startswith(folder + "/") or fnmatch.fnmatchcase(path, folder + "/*"):
                    return True
            elif any(fnmatch.fnmatchcase(f, folder) for f in folders):
                return True
        elif fnmatch.fnmatchcase(path if "/" in g else name, g):
            return True
    return False


def is_module(path: str) -> bool:
    """A file pytest collects as a test module by default."""
    return path.endswith(".py") and matches(path, MODULES)


def plan(changes: Sequence[Change], *, globs: Sequence[str], accept: Collection[str] = (),
         allowed: dict[int, Allowed] | None = None, check_config: Sequence[str] = (),
         extra: Collection[str] = ()) -> Reset:
    """The reset for a change (see the module's rules). ``check_config``: the globs of what configures the check
    (``conftest.py`` is always among them); ``extra``: more test paths."""
    allowed = allowed or {}
    accept = set(accept)
    restore: list[str] = []
    drop: list[str] = []
    kept: list[str] = []
    own: list[str] = []
    for c in sorted(changes, key=lambda c: c.path):
        if c.path in accept or not (matches(c.path, globs) or c.path in extra):
            continue
        may = allowed.get(c.subtask_id, Allowed()) if c.subtask_id is not None else Allowed()
        config = posixpath.basename(c.path) == "conftest.py" or matches(c.path, check_config)
        if c.status == "added":
            if config and may.check:
                kept.append(c.path)
            else:
                drop.append(c.path)
                if is_module(c.path):
                    own.append(c.path)
        elif c.status == "deleted":
            continue  # absent, as it would land: the comparison judges it
        elif may.behaviour or (config and may.check) or (c.only_deletes and may.removal):
            kept.append(c.path)
        else:
            restore.append(c.path)
            if is_module(c.path):
                own.append(c.path)
    whole = any(p not in own for p in (*restore, *drop))
    return Reset(tuple(restore), tuple(drop), tuple(kept), tuple(own), whole)
