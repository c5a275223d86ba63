"""The words of a new user's first hour (issue 43, friction items 7, 10, 11 and 12): a push to a subtask never
claimed has its own kind and next step, a person's ``git push`` is spared the verdict's JSON, a weakened test's
sentence agrees with its count and tells a skipped test from a removed one, the keeper says who stopped it and keeps
its notes off the board, ``status`` says where HEAD is, and a tree file's errors name the file and what it must be.
Pure where the words are; through real pushes where the item is about one."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from mergebot import agent
from mergebot import messages as say
from mergebot.agent import keeper
from mergebot.agent.worktree import Claim
from mergebot.auth import Role
from mergebot.cli.render import render_worktree
from mergebot.db.database import Database
from mergebot.errors import Invalid, MergebotError
from mergebot.landing.intake.checks import RefUpdate, judge_ref
from mergebot.landing.intake.prereceive import Judgement
from mergebot.landing.judge import verdicts
from mergebot.models import VERDICT_HEADER, VERDICT_LINE, Owner
from mergebot.models.judgement import Judgement as Judged
from mergebot.tree import parse_tree, parse_tree_text, read_tree_file
from tests.support.bot import Fleet, commit, git
from verifier import compare as cmp
from verifier.outcomes import Outcomes
from verifier.runner import Result

SHA = "a" * 40
ZERO = "0" * 40


# -- item 7: a push to a subtask never claimed ------------------------------------------------------------------------


def test_a_never_claimed_subtask_is_not_claimed_with_its_own_next_step() -> None:
    ready = Owner(subtask_id=5, status="ready", owner_id=None, claim_version=0, landing=False)
    refusal = judge_ref(RefUpdate(ZERO, SHA, "refs/heads/subtasks/5/v1"), 7, "main", ready)
    assert refusal is not None and refusal.code == "not_claimed"
    assert "subtask 5 has never been claimed (it is ready)" in refusal.message
    assert "does not exist" not in refusal.message and "mergebot start" in refusal.message
    v = verdicts.for_refusal(refusal.code, refusal.message, 5, 1, SHA, "main", ready)
    assert (v.kind, v.final, v.branch) == ("not_claimed", True, None)
    assert "mergebot start" in v.next and "--carry" not in v.next and "no longer holds" not in v.next


def test_a_claim_version_ahead_of_the_claim_is_not_claimed_and_a_behind_one_stays_stale() -> None:
    mine = Owner(subtask_id=5, status="running", owner_id=7, claim_version=2, landing=False)
    ahead = judge_ref(RefUpdate(ZERO, SHA, "refs/heads/subtasks/5/v3"), 7, "main", mine)
    assert ahead is not None and ahead.code == "not_claimed"
    assert "claim version 3 does not exist yet; subtask 5 is at claim version 2" in ahead.message
    behind = judge_ref(RefUpdate(ZERO, SHA, "refs/heads/subtasks/5/v1"), 7, "main", mine)
    assert behind is not None and behind.code == "stale_claim"
    assert "--carry" in verdicts.for_refusal("stale_claim", behind.message, 5, 1, SHA, "main", mine).next


def test_the_verdict_lines_are_for_a_machine_that_asks_and_the_next_step_for_a_person() -> None:
    v = verdicts.for_refusal("not_claimed", "refs/heads/subtasks/5/v1: never claimed", 5, 1, SHA, "main", None)
    judged = Judgement(False, say.refused_push([v.message]), [], [v, v])
    person = judged.answer()
    assert VERDICT_LINE not in person and "{" not in person
    assert person.count("Next: claim first, `mergebot start") == 1 and len(person) < 400, person
    machine = judged.answer(machine=True)
    assert machine.count(VERDICT_LINE) == 2
    refused = agent.submit.refused(5, 1, SHA, machine)
    assert refused["verdict"]["kind"] == "not_claimed" and VERDICT_LINE not in refused["reason"]
    assert Judgement(True, "", []).answer() == ""


async def test_a_push_to_a_subtask_never_claimed(fleet: Fleet) -> None:
    one, _ = await fleet.db.subtasks.create_subtask(actor_id=None, title="one")
    two, _ = await fleet.db.subtasks.create_subtask(actor_id=None, title="two")
    claim, wt = fleet.start("ann")
    sid = two.id if claim.subtask_id == one.id else one.id  # the one nobody claimed
    commit(wt, {"a.txt": "a\n"})
    ref = f"HEAD:refs/heads/subtasks/{sid}/v1"
    person = git(["push", "origin", ref], wt, check=False)  # as a person pushes: no JSON, the next step in words
    assert person.returncode != 0
    assert f"subtask {sid} has never been claimed (it is ready)" in person.stderr, person.stderr
    assert "Next: claim first, `mergebot start" in person.stderr and VERDICT_LINE not in person.stderr
    assert "--carry" not in person.stderr and "does not exist" not in person.stderr
    machine = subprocess.run(["git", "-c", f"http.extraHeader={VERDICT_HEADER}: 1", "push", "origin", ref], cwd=wt,
                             capture_output=True, text=True, check=False)
    [line] = [x for x in machine.stderr.splitlines() if VERDICT_LINE in x]
    v = json.loads(line.split(VERDICT_LINE, 1)[1])
    assert (v["kind"], v["subtask_id"], v["branch"]) == ("not_claimed", sid, None) and "mergebot start" in v["next"]
    refused = [e for e in await fleet.db.subtasks.events(subtask_id=sid) if e["kind"] == "push_refused"]
    assert [e["detail"]["code"] for e in refused] == ["not_claimed", "not_claimed"]


# -- item 10: a weakened test, one or many, skipped or gone ----------------------------------------------------------


def _weakened(baseline: dict[str, str], now: dict[str, str]) -> str:
    record = cmp.compare(Outcomes(source="pytest", tests=baseline), Outcomes(source="pytest", tests=now)).record()
    j = Judged.from_json({"comparison": record}, "tests_weakened")
    run = Result("m" * 40, "t" * 40, "pytest -q", "pass", 0, 10, "", "", 0, "d" * 64,
                 tests={"source": "pytest", "counts": {"passed": 1}})
    return say.rejection(say.Rejection("tests_weakened", "main", "c" * 40, "pytest -q", merged_sha="e" * 40, run=run,
                                       judgement=j))


def test_one_weakened_test_passes_and_a_skipped_one_is_told_to_take_its_skip_out() -> None:
    said = _weakened({"t.py::a": "passed"}, {"t.py::a": "skipped"})
    assert said.startswith("1 test that passes on main does not pass on the merged commit"), said
    assert "is not a removed one: take out what skips it" in said and "skip or xfail mark" in said
    many = _weakened({"t.py::a": "passed", "t.py::b": "passed"}, {"t.py::a": "failed"})
    assert many.startswith("2 tests that pass on main do not pass")
    assert "not a removed one" not in many  # failed and missing tests have no skip to take out
    nxt = verdicts.KINDS["tests_weakened"].next
    assert "skipping" in nxt and "a skipped test is not a removed one" in nxt
    assert nxt.index("skipp") < nxt.index("--test-removal") and "delete it" in nxt


# -- item 11: the keeper's reasons and notes, and where HEAD is -------------------------------------------------------


class _Server:
    """What the keeper asks of the server: a heartbeat that holds, and the notes it posts."""

    def __init__(self) -> None:
        self.notes: list[str] = []

    def post(self, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        if path.endswith("/notes"):
            self.notes.append(str((body or {})["body"]))
        return {"lease_expires_at": None}

    def get(self, path: str, **_: Any) -> dict[str, Any]:
        return {}


def _worktree(tmp_path: Path) -> Path:
    wt = tmp_path / "wt"
    git(["init", "-q", "-b", "subtasks/5/v1", str(wt)], tmp_path)
    for key, value in (("mergebot.subtask", "5"), ("mergebot.claimVersion", "1"), ("mergebot.repo", "demo"),
                       ("mergebot.server", "http://127.0.0.1:9")):
        git(["config", key, value], wt)
    return wt


@pytest.mark.parametrize(("stopped", "words"), [
    (keeper.Stopped(), "asked to stop (`mergebot stop`"),
    (keeper.Stopped(say.KEEPER_REPLACED), "`mergebot start` was run again in this worktree"),
])
def test_the_keeper_says_who_stopped_it(tmp_path: Path, stopped: keeper.Stopped, words: str) -> None:
    server = _Server()

    def interrupted(_: float) -> None:
        raise stopped

    claim = Claim(5, 1, "demo", "http://127.0.0.1:9")
    kept = keeper.Keeper(_worktree(tmp_path), server, claim, lease=3.0, idle=1e9,  # type: ignore[arg-type]
                         sleep=interrupted)
    assert words in kept.run()
    [note] = server.notes
    assert note.startswith("[keeper] stopped keeping the claim on subtask 5 v1: ") and words in note
    assert ("was run again" in note) == (stopped.why == say.KEEPER_REPLACED)
    assert keeper.REPLACED != signal.SIGTERM  # so the keeper can tell a new start from `mergebot stop`


def test_the_boards_queries_leave_out_what_the_keeper_writes() -> None:
    queries = Path(__file__).resolve().parents[1] / "mergebot" / "db" / "queries"
    for name in ("pages.sql", "subtasks.sql"):
        assert f"starts_with(n.body, '{say.KEEPER_NOTE_PREFIX}')" in (queries / name).read_text(), name
    assert say.keeper_note(5, 1, "why").startswith(say.KEEPER_NOTE_PREFIX)


async def test_keepers_notes_stay_on_their_subtask_and_off_the_board(db: Database) -> None:
    ann, _ = await db.agents.add_agent(name="ann", role=Role.AGENT)
    sub, _ = await db.subtasks.create_subtask(actor_id=None, title="t")
    await db.subtasks.add_note(author_id=ann.id, subtask_id=sub.id, body=say.keeper_note(sub.id, 1, "idle"))
    await db.subtasks.add_note(author_id=ann.id, subtask_id=sub.id, body="plan: add mul first")
    await db.subtasks.add_note(author_id=ann.id, body="board: who takes the parser?")
    board = [n["body"] for n in await db.subtasks.notes()]
    assert board == ["plan: add mul first", "board: who takes the parser?"], board
    page = [n["body"] for n in await db.pages.notes_page(subtask_id=None, group_name=None, before_id=None)]
    assert not any(b.startswith("[keeper]") for b in page) and len(page) == 2
    own = [n["body"] for n in await db.subtasks.notes(subtask_id=sub.id)]
    assert own[0].startswith("[keeper]") and len(own) == 2  # the next owner still reads why the keeper stopped
    mine = await db.pages.notes_page(subtask_id=sub.id, group_name=None, before_id=None)
    assert len(mine) == 2


def test_status_names_both_branches_when_head_is_elsewhere(tmp_path: Path) -> None:
    view = {"subtask": 5, "claim_version": 1, "branch": "subtasks/5/v1", "head": "scratch", "status": "running",
            "current_version": 1, "owner": "ann", "lease_expires_at": None, "keeper": {}, "verdict": None}
    shown = render_worktree(view)
    assert "on subtasks/5/v1" in shown and "HEAD is on scratch, not on the claim's branch subtasks/5/v1" in shown
    assert "`mergebot submit` pushes HEAD to subtasks/5/v1" in shown
    assert "HEAD is" not in render_worktree({**view, "head": "subtasks/5/v1"})
    assert "HEAD is detached" in render_worktree({**view, "head": None})
    wt = _worktree(tmp_path)
    commit(wt, {"a.txt": "a\n"})
    assert agent.worktree.head_branch(wt) == "subtasks/5/v1"
    git(["switch", "-q", "-c", "scratch"], wt)
    assert agent.worktree.head_branch(wt) == "scratch"


# -- item 12: a directory that is not there, and tree files -------------------------------------------------------


def test_a_missing_directory_is_told_so(tmp_path: Path) -> None:
    with pytest.raises(MergebotError) as gone:
        agent.current_claim(tmp_path / "no" / "such" / "dir")
    assert "does not exist" in gone.value.message and "not in a git worktree" not in gone.value.message
    with pytest.raises(MergebotError) as plain:
        agent.current_claim(tmp_path)
    assert "is not in a git worktree" in plain.value.message


def test_a_missing_tree_file_is_named_without_errno(tmp_path: Path) -> None:
    with pytest.raises(Invalid) as e:
        read_tree_file(tmp_path / "tree.yaml")
    assert e.value.message == f"cannot read the task tree {tmp_path / 'tree.yaml'}: No such file or directory"
    with pytest.raises(Invalid) as far:
        read_tree_file(tmp_path / "nope" / "tree.yaml")
    assert "[Errno" not in far.value.message and "its folder does not exist either" in far.value.message


def test_a_yaml_error_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "tree.yaml"
    path.write_text("subtasks:\n  - key: a\n    title: [unclosed\n")
    with pytest.raises(Invalid) as e:
        read_tree_file(path)
    assert str(path) in e.value.message and "<unicode string>" not in e.value.message
    assert "line 3" in e.value.message or "line 4" in e.value.message
    with pytest.raises(Invalid) as text:
        parse_tree_text("- key: a\n  title: [x\n", "plan.yaml")
    assert "plan.yaml" in text.value.message and "<unicode string>" not in text.value.message
    broken = tmp_path / "tree.json"
    broken.write_text('{"subtasks": [}')
    with pytest.raises(Invalid) as js:
        read_tree_file(broken)
    assert js.value.message.startswith(f"{broken}: not valid YAML/JSON")


def test_tasks_is_pointed_to_subtasks_and_accept_is_an_allowed_key() -> None:
    with pytest.raises(Invalid) as tasks:
        parse_tree({"tasks": [{"key": "a", "title": "A"}]})
    assert "this file has tasks: did you mean `subtasks:`?" in tasks.value.message
    with pytest.raises(Invalid) as empty:
        parse_tree(None)
    assert "a mapping with a `subtasks:` list" in empty.value.message
    with pytest.raises(Invalid) as misspelt:
        parse_tree([{"key": "a", "title": "A", "prio": 3, "accept": []}])
    assert "unknown key 'prio'" in misspelt.value.message and misspelt.value.message.endswith("paths, accept")
    with pytest.raises(Invalid) as api:
        parse_tree([{"key": "a", "title": "A", "accept": ["t.py:tests/t.py"]}])
    assert "mergebot create --file" in api.value.message and "/acceptance" in api.value.message
