"""The pure push judge: every rule on its own, with the message an agent reads."""

from __future__ import annotations

import pytest

from mergebot.landing.intake.checks import (
    Content,
    Limits,
    RefUpdate,
    is_protected,
    judge_content,
    judge_ref,
    summary,
)
from mergebot.messages.refs import parse_subtask_ref
from mergebot.models import Owner

A, B, Z = "a" * 40, "b" * 40, "0" * 40
ME, OTHER = 7, 8


def up(ref: str, new: str = B) -> RefUpdate:
    return RefUpdate(A, new, ref)


def owner(status: str = "running", who: int | None = ME, version: int = 2, landing: bool = False) -> Owner:
    return Owner(subtask_id=5, status=status, owner_id=who, claim_version=version, landing=landing)


@pytest.mark.parametrize(("ref", "expected"), [
    ("refs/heads/subtasks/5/v2", (5, 2)),
    ("refs/heads/subtasks/05/v2", None),
    ("refs/heads/subtasks/5/v0", None),
    ("refs/heads/subtasks/5/v2/x", None),
    ("refs/heads/subtasks/$(touch x)/v2", None),
    ("refs/tags/subtasks/5/v2", None),
    ("refs/heads/-5", None),
])
def test_parse_subtask_ref(ref: str, expected: tuple[int, int] | None) -> None:
    assert parse_subtask_ref(ref) == expected


@pytest.mark.parametrize(("update", "row", "code", "words"), [
    (up("refs/heads/main"), None, "protected_ref", "only Mergebot moves main"),
    (up("refs/heads/release"), None, "protected_ref", "this ref is protected"),
    (up("refs/tags/v1"), None, "protected_ref", "this ref is protected"),
    (up("refs/heads/subtasks/5/v2"), None, "unknown_subtask", "does not exist"),
    (up("refs/heads/subtasks/5/v2"), owner(who=OTHER), "not_owner", "not yours"),
    (up("refs/heads/subtasks/5/v2"), owner(status="ready", who=None), "not_running", "subtask 5 is ready"),
    (up("refs/heads/subtasks/5/v2"), owner(status="landed", who=None), "not_running", "mergebot show 5"),
    (up("refs/heads/subtasks/5/v1"), owner(), "stale_claim", "claim version 1 is stale"),
    (up("refs/heads/subtasks/5/v1"), owner(who=OTHER), "stale_claim", "superseded"),
    (up("refs/heads/subtasks/5/v3"), owner(), "not_claimed", "claim version 3 does not exist yet"),
    (up("refs/heads/subtasks/5/v1"), owner(version=0, status="ready", who=None), "not_claimed",
     "subtask 5 has never been claimed (it is ready)"),
    (up("refs/heads/subtasks/5/v2"), owner(landing=True), "landing", "landing right now"),
    (up("refs/heads/subtasks/5/v2", Z), owner(who=OTHER), "not_owner", "only branches of subtasks you own"),
])
def test_judge_ref_refusals(update: RefUpdate, row: Owner | None, code: str, words: str) -> None:
    refusal = judge_ref(update, ME, "main", row)
    assert refusal is not None and refusal.code == code and words in refusal.message
    assert update.ref in refusal.message


def test_judge_ref_accepts_owner_at_current_version() -> None:
    assert judge_ref(up("refs/heads/subtasks/5/v2"), ME, "main", owner()) is None
    assert judge_ref(up("refs/heads/subtasks/5/v2"), ME, "main", owner(status="submitted")) is None
    assert judge_ref(up("refs/heads/subtasks/5/v1", Z), ME, "main", owner()) is None  # delete own old branch


def content(**kw: object) -> Content:
    base: dict[str, object] = dict(changed_paths=["src/a.py"], commit_count=1, roots=[], foreign=[],
                                   largest_file=("src/a.py", 10), push_bytes=100, already_on_target=False)
    base.update(kw)
    return Content(**base)  # type: ignore[arg-type]


LIMITS = Limits(protected_paths=["ci/", ".github/*", "pyproject.toml"], max_file_bytes=1000, max_push_bytes=5000)


@pytest.mark.parametrize(("c", "code", "words"), [
    (content(push_bytes=6000), "too_large", "over this repository's limit"),
    (content(largest_file=("big.bin", 2000)), "too_large", "big.bin is 2000 bytes"),
    (content(commit_count=2000), "history_anomaly", "more than 1000 commits"),
    (content(already_on_target=True), "nothing_to_land", "already on main"),
    (content(roots=["c" * 40]), "history_anomaly", "unrelated to main"),
    (content(foreign=[("d" * 40, 9)]), "history_anomaly", "belongs to subtask 9, which has not landed"),
    (content(changed_paths=["ci/run", "src/a.py"]), "protected_path", "ci/run"),
    (content(changed_paths=[".github/workflows"]), "protected_path", ".github/workflows"),
    (content(changed_paths=["pyproject.toml"]), "protected_path", "pyproject.toml"),
])
def test_judge_content_refusals(c: Content, code: str, words: str) -> None:
    refusal = judge_content(up("refs/heads/subtasks/5/v2"), "main", c, LIMITS)
    assert refusal is not None and refusal.code == code and words in refusal.message


def test_judge_content_accepts_ordinary_work() -> None:
    assert judge_content(up("refs/heads/subtasks/5/v2"), "main", content(), LIMITS) is None


def test_protected_patterns() -> None:
    assert is_protected("ci/x/y.sh", ["ci/"]) and not is_protected("cia/x", ["ci/"])
    assert is_protected("a/b.lock", ["*.lock"]) and not is_protected("a.py", ["*.lock"])


def test_summary_lists_every_reason() -> None:
    r1 = judge_ref(up("refs/heads/main"), ME, "main", None)
    r2 = judge_ref(up("refs/heads/x"), ME, "main", None)
    assert r1 and r2
    text = summary([r1, r2])
    assert text.startswith("Mergebot refused this push:") and "refs/heads/main" in text and "refs/heads/x" in text


def test_what_configures_the_check_is_read_from_the_change() -> None:
    """Rule 7 alone: the globs (a name in any folder, a path), the pytest sections of setup.cfg and pyproject.toml
    compared parsed, the files the command names, and the verifier's own plugin's name."""
    from mergebot.landing.intake.checks import check_config_paths, command_files, is_ours, pytest_sections

    globs = ["conftest.py", "pytest.ini", "ci/*.sh"]
    changed = ["src/conftest.py", "pytest.ini", "ci/check.sh", "ci/notes.md", "README.md", "setup.cfg",
               "pyproject.toml", "sub/pyproject.toml", "Makefile"]
    texts = {"setup.cfg": ("[metadata]\nname = x\n", "[metadata]\nname = y\n"),  # no pytest section changed
             "pyproject.toml": ("[tool.pytest.ini_options]\naddopts = '-q'\n",
                                "[tool.pytest.ini_options]\naddopts = '-x'\n"),
             "sub/pyproject.toml": (None, "[project]\nname = 'sub'\n")}
    named = [p for p in command_files("make check && sh ./ci/run.sh tests") if p in changed]
    assert named == ["Makefile"]
    assert check_config_paths(changed, globs, named, texts) == ["src/conftest.py", "pytest.ini", "ci/check.sh",
                                                               "pyproject.toml", "sub/pyproject.toml", "Makefile"]
    assert pytest_sections("setup.cfg", "[tool:pytest]\naddopts = -x\n") == '{"tool:pytest": {"addopts": "-x"}}'
    assert pytest_sections("pyproject.toml", "[tool.pytest\n") == "unreadable"
    assert pytest_sections("pyproject.toml", None) is None
    assert is_ours("mergebot_outcomes.py") and is_ours("x/mergebot_outcomes/__init__.py") and not is_ours("out.py")
