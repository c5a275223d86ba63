"""The files whose sentences moved to ``mergebot.messages`` (issue 42) keep none inline: a ``raise`` there takes its
sentence from ``say``, so no sentence is worded twice or drifts from its siblings.

Read with ``ast``, never by importing. A sentence inline is a ``raise X("…")`` or ``raise X(f"…")`` (or an
exception built as ``SomethingError("…")`` or as one of ``mergebot.errors``' classes, ``NotFound("…")``, anywhere,
to be returned or raised later) whose first argument is a
string literal holding at least ``MIN_WORDS`` words, or an f-string or a sum with one holding at least
``MIN_BUILT_WORDS`` words of its own (its holes are the facts). A file
joins ``CLEANED`` when its sentences have moved; it never leaves. The few inline ones left are programming errors
no user sees, listed in ``INTERNAL`` with the reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

CLEANED = (
    "mergebot/tree.py",
    "mergebot/git/credentials.py",
    "mergebot/cli/agent.py",
    "mergebot/agent/worktree.py",
    "mergebot/git/repo.py",
    "mergebot/git/mirror.py",
    "mergebot/forge/client.py",
    "mergebot/forge/outbox.py",
    "mergebot/demo.py",
    "mergebot/verify/remote.py",
    "mergebot/git/gate.py",
    "mergebot/forge/renewing.py",
    "mergebot/db/views.py",
    "mergebot/landing/main/repos.py",
    "mergebot/cli/admin.py",
    "mergebot/drill/gather.py",
    "mergebot/db/landing.py",
    "mergebot/db/jobs.py",
    "mergebot/db/subtasks.py",
    "mergebot/agent/keeper.py",
    "mergebot/agent/submit.py",
    "mergebot/cli/controls.py",
    "mergebot/landing/intake/admission.py",
    "mergebot/landing/intake/admit.py",
)

# (file, the sentence's literal words): a developer's mistake, caught by the code or never reached by a user.
INTERNAL = {
    ("mergebot/git/gate.py", "a gate needs at least one slot"),  # Gate(0): a bug in the caller
    ("mergebot/forge/client.py", "attempts must be at least 1"),  # post_with_retry(attempts=0): likewise
    ("mergebot/git/repo.py", "more than commits to walk"),  # WalkTooLong is caught by its callers, never shown
}

MIN_WORDS = 3  # "no forge token" is a sentence; "bad" or "unknown query" alone is a developer's label
MIN_BUILT_WORDS = 2  # "dependency cycle: " + the cycle, f"{x} holds {n}": words around facts

# The exceptions of ``mergebot.errors`` (``NotFound``, ``Conflict``, ...): built anywhere, they carry a sentence.
ERRORS = frozenset(node.name for node in ast.walk(ast.parse((ROOT / "mergebot/errors.py").read_text("utf-8")))
                   if isinstance(node, ast.ClassDef))


def _literal_words(node: ast.expr) -> str | None:
    """The literal text of a sentence-like argument (f-string holes dropped), or None if it is not one."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str))
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left = _literal_words(node.left)
        return left if left is not None else _literal_words(node.right)
    return None


def _called_name(call: ast.Call) -> str:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def inline_sentences(source: str) -> list[tuple[int, str]]:
    """Each inline sentence in ``source``: its line and its literal words, spaces squeezed."""
    calls: list[ast.Call] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
            calls.append(node.exc)
        elif isinstance(node, ast.Call) and (_called_name(node).endswith(("Error", "Exception"))
                                             or _called_name(node) in ERRORS):
            calls.append(node)
    found = set()
    for call in calls:
        if not call.args:
            continue
        arg = call.args[0]
        words = _literal_words(arg)
        least = MIN_WORDS if isinstance(arg, ast.Constant) else MIN_BUILT_WORDS
        if words is not None and len(words.split()) >= least:
            found.add((call.lineno, " ".join(words.split())))
    return sorted(found)


def test_the_rule_finds_inline_sentences() -> None:
    """It can fail: a synthetic file with each shape of inline sentence, and the shapes it must let pass."""
    source = '''
from mergebot import messages as say

def f(where, x):
    raise Invalid("a task tree is a list of subtasks", field="subtasks")
    raise Invalid(f"{where} must be an object", field=where)
    raise SystemExit("mergebot create: give a TITLE or --file")
    raise Invalid("dependency cycle: " + " -> ".join(x))
    err = ForgeCallError(f"GitHub unreachable while {x}: {where}", retryable=True)
    raise errors.Conflict(
        f"{where} holds commits "
        "that are not on main")
    raise Invalid(say.node_not_object(where), field=where)
    raise ValueError("bad")
    raise ValueError("unknown query")
    raise ValueError(f"{x} bad")
    raise ValueError(f"{x}: {where}")
    raise RuntimeError(x)
    raise
    return NotFound(f"verify job {x} does not exist")
    return errors.Conflict("a subtask cannot wait for its children")
'''
    assert [line for line, _ in inline_sentences(source)] == [5, 6, 7, 8, 9, 10, 20, 21]
    assert (10, "holds commits that are not on main") in inline_sentences(source)


@pytest.mark.parametrize("path", CLEANED)
def test_cleaned_files_raise_no_inline_sentence(path: str) -> None:
    inline = [(line, words) for line, words in inline_sentences((ROOT / path).read_text("utf-8"))
              if (path, words) not in INTERNAL]
    assert not inline, (f"{path} words a sentence inline again: move it to mergebot/messages (by audience) and "
                        f"raise say.NAME / say.name(facts) instead: {inline}")


def test_the_rule_knows_the_errors_of_mergebot() -> None:
    assert {"Invalid", "NotFound", "Conflict", "Forbidden", "InvalidTransition"} <= ERRORS


def test_internal_exceptions_are_still_there() -> None:
    """An entry of ``INTERNAL`` whose sentence is gone (moved, or reworded) is dropped from it, not left to excuse
    a new one."""
    for path, words in INTERNAL:
        assert words in [w for _, w in inline_sentences((ROOT / path).read_text("utf-8"))], (path, words)
