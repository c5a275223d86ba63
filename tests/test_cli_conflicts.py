"""A conflict as a worktree's user meets it (issue 43's friction list, items 8 and 9): the real ``mergebot`` as a
fresh process against a real server, two subtasks' pushes that conflict for real.

``submit`` prints each conflicting path with its hunks; ``git rebase`` as the verdict says stops on the conflict, and
``submit`` then refuses (exit 2, nothing pushed) with the commands that finish the rebase; once it is finished the
change lands. The candidate's page shows the hunks and the words its agent was told when it was rejected (today's
advice beside them, and only today's, said so, for a row from before they were kept). The next step a worktree's
user reads has the repository, directory and ids filled in and names the worktree's flow, never ``mergebot claim``.
"""

from __future__ import annotations

import html
import os
import subprocess
import sys

import httpx

from mergebot import messages as say
from mergebot.cli.render import render_worktree
from mergebot.messages import kinds
from tests.support.bot import Fleet, git

MERGEBOT = [sys.executable, "-m", "mergebot"]
PLACEHOLDERS = ("REPO", "DIR", " ID", "`mergebot claim`")


def as_agent(fleet: Fleet, who: str, *args: str) -> subprocess.CompletedProcess[str]:
    out = subprocess.run([*MERGEBOT, *args], capture_output=True, text=True, check=False, timeout=120,
                         env={**os.environ, "MERGEBOT_URL": fleet.bot.url, "MERGEBOT_TOKEN": fleet.tokens[who]})
    assert "Traceback" not in out.stderr, out.stderr
    return out


def next_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.startswith("next: ")]
    assert len(lines) == 1, stderr
    return lines[0]


async def candidate_page(fleet: Fleet, cand_id: int) -> str:
    """The candidate's page as the lead sees it, its HTML entities read back as text."""
    async with httpx.AsyncClient(base_url=fleet.bot.url, timeout=30) as web:
        r = await web.post("/login", data={"token": fleet.tokens["lead"], "next": "/ui/queue"},
                           headers={"Origin": fleet.bot.url})
        assert r.status_code == 303, r.text
        got = await web.get(f"/ui/candidates/{cand_id}")
        assert got.status_code == 200, got.text
        return html.unescape(got.text)


async def test_a_conflict_is_shown_with_its_hunks_the_rebase_is_finished_first_and_the_page_keeps_what_was_told(
        fleet: Fleet) -> None:
    bob, wt = await fleet.bob_conflicts_with_ann()  # ann's change of notes.txt's line 2 landed; bob's is not pushed

    # 8. submit: the conflict names its path and shows the hunk, both sides of it
    out = as_agent(fleet, "bob", "submit", "--dir", str(wt))
    assert out.returncode == 5, out.stdout + out.stderr
    err = out.stderr
    assert any(line.startswith("conflict: ") for line in err.splitlines()), err
    assert "  " + say.conflict_path("notes.txt", [2], None) in err.splitlines(), err
    hunk = [line.strip() for line in err.splitlines() if line.startswith("    ")]
    assert hunk[0].startswith("<<<<<<<") and "ANN" in hunk and "=======" in hunk and "BOB" in hunk, err
    assert hunk.index("ANN") < hunk.index("=======") < hunk.index("BOB"), err  # main's above, the change's below
    step = next_line(err)
    assert "git rebase --continue" in step and not any(p in step for p in PLACEHOLDERS), step
    [rejected] = [c for c in await fleet.db.landing.candidates(subtask_id=bob.subtask_id)]
    out = as_agent(fleet, "bob", "status", "--dir", str(wt))  # status shows the same paths and hunks
    assert out.returncode == 0 and "latest verdict: conflict; next: `git fetch origin main" in out.stdout, out.stdout
    assert "    " + say.conflict_path("notes.txt", [2], None) in out.stdout.splitlines(), out.stdout
    assert "      BOB" in out.stdout.splitlines(), out.stdout
    assert (rejected["status"], rejected["verdict"]["kind"]) == ("rejected", "conflict"), rejected

    # the rebase the verdict asks for stops on the conflict; submit then refuses, pushing nothing
    git(["fetch", "-q", "origin", "main"], wt)
    assert git(["rebase", "origin/main"], wt, check=False).returncode != 0
    branch = f"refs/heads/{bob.branch}"
    before = str(fleet.bare().references[branch].target)
    out = as_agent(fleet, "bob", "submit", "--dir", str(wt))
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stderr.splitlines() == ["mergebot: " + say.submit_unfinished(str(wt), "rebase")], out.stderr
    assert "git rebase --continue" in out.stderr and "git rebase --abort" in out.stderr
    assert str(fleet.bare().references[branch].target) == before
    assert len(await fleet.db.landing.candidates(subtask_id=bob.subtask_id)) == 1

    # finished as told, it lands
    (wt / "notes.txt").write_text("line 1\nANN\nBOB\nline 3\n")
    git(["add", "notes.txt"], wt)
    assert git(["-c", "core.editor=true", "rebase", "--continue"], wt, check=False).returncode == 0
    out = as_agent(fleet, "bob", "submit", "--dir", str(wt))
    assert out.returncode == 0 and out.stdout.startswith("landed"), out.stdout + out.stderr

    # 9. status: the landed verdict's next step, with the repository and the directory filled in
    out = as_agent(fleet, "bob", "status", "--dir", str(wt))
    assert out.returncode == 0, out.stderr
    latest = next(line for line in out.stdout.splitlines() if "latest verdict:" in line)
    assert f"`mergebot start --repo demo --dir {wt}`" in latest, latest
    assert not any(p in latest for p in PLACEHOLDERS), latest

    # the candidate's page: the hunks, and the words bob was told when it was rejected (today's advice differs:
    # the subtask has landed since)
    told = kinds.KINDS["conflict"].next.format(target="main", sid=bob.subtask_id)
    page = await candidate_page(fleet, rejected["id"])
    assert say.conflict_path("notes.txt", [2], None) in page and "ANN\n=======\nBOB" in page, page
    assert say.CONFLICT_SIDES in page
    assert f"<code>{told}</code>" in page and say.CANDIDATE_TOLD_THEN in page, page
    assert 'id="next-now"' in page and "no longer holds" in page and say.CANDIDATE_TOLD_UNKNOWN not in page
    api = fleet.client("bob").get(f"/api/v1/candidates/{rejected['id']}")["verdict"]
    assert api["told"] == {"message": rejected["reason"], "next": told, "branch": f"refs/heads/{bob.branch}"}, api
    assert api["next"] != told and api["hunks"][0]["path"] == "notes.txt"

    # a row from before the words were kept: today's advice, and the page says so
    async with fleet.db.pool.connection() as conn:
        await conn.execute("UPDATE candidates SET verdict = verdict - 'told' WHERE id = %s", (rejected["id"],))
    page = await candidate_page(fleet, rejected["id"])
    assert say.CANDIDATE_TOLD_UNKNOWN in page and say.CANDIDATE_TOLD_THEN not in page and f"<code>{told}</code>" \
        not in page, page
    assert "ANN\n=======\nBOB" in page  # the hunks were recorded all along


def test_a_worktree_users_next_step_names_the_worktree_flow_with_what_it_knows() -> None:
    """Every placeholder the server leaves in a worktree's ``status`` is filled, and ``mergebot claim`` (the no-git
    flow) becomes ``mergebot start`` in that directory."""
    for step in (kinds.claim_gone(7, "cancelled", 2), kinds.claim_gone(7, "ready", 2),
                 kinds.KINDS["not_owner"].next, kinds.KINDS["unknown_subtask"].next,
                 kinds.KINDS["claim_superseded"].next.format(sid=7, target="main")):
        view = {"subtask": 7, "claim_version": 2, "branch": "subtasks/7/v2", "head": "subtasks/7/v2",
                "status": "cancelled", "current_version": 2, "owner": None, "lease_expires_at": None, "keeper": {},
                "repo": "app", "dir": "../my wt", "verdict": {"kind": "conflict", "next": step, "subtask_id": 7}}
        line = next(x for x in render_worktree(view).splitlines() if "latest verdict" in x)
        assert "`mergebot start --repo app --dir '../my wt'" in line, line
        assert not any(p in line for p in PLACEHOLDERS), line
