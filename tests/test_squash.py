"""A repository's merge method ``squash`` (issue 43): one commit per landing on main, whose only parent is the
previous main, its message the subtask's title and description with trailers naming what landed, and exactly the
commit the checks passed on.

End to end on a real server with real pushes: two subtasks, each a branch of two commits (one of them a broken
work-in-progress commit), verified together as one batch of two, land as two squash commits in order; their agent
starts its next subtask in the same worktree (its landed commits are not on main by ancestry, the landed rows say
they landed) and its one-commit push, a fast-forward under ``merge``, lands as a squash commit too. The git layer's
squash and the rule's refusal of an unknown method are tested on their own.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import httpx
import pygit2
import pytest

from mergebot import agent
from mergebot import messages as say
from mergebot.auth import Role
from mergebot.cli import main as cli_main
from mergebot.drill.invariants import check_history
from mergebot.git import repo as git
from mergebot.rules import Rules, RulesChange
from tests.support.bot import Fleet, commit

BROKEN = "def add(a, b):\n    return a - b\n"  # fails the suite: on a branch, never on main


def trailers(message: str) -> dict[str, str]:
    """The message's last paragraph as ``Key: value`` pairs."""
    last = message.strip().split("\n\n")[-1]
    return dict(line.split(": ", 1) for line in last.splitlines())


async def wait_landed(fleet: Fleet, ids: list[int], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if [(await fleet.db.subtasks.get_subtask(i)).status for i in ids] == ["landed"] * len(ids):
            return
        time.sleep(0.2)
    raise AssertionError(f"subtasks {ids} never landed:\n" + fleet.bot.log.read_text()[-3000:])


async def test_squash_lands_one_single_parent_commit_per_landing_exactly_as_verified(fleet: Fleet) -> None:
    _, root = await fleet.db.agents.add_agent(name="root", role=Role.ADMIN)
    # the rule through the API, as `mergebot repo set demo --merge-method squash` sends it; one run at a time of
    # batches of two (risk-aware, as shipped)
    r = httpx.patch(f"{fleet.bot.url}/api/v1/repos/demo/rules", headers={"Authorization": f"Bearer {root}"},
                    json={"merge_method": "squash", "speculation_window": 1, "batch_size": 2})
    assert r.status_code == 200 and r.json()["repo"]["merge_method"] == "squash", r.text
    r = httpx.patch(f"{fleet.bot.url}/api/v1/repos/demo/rules", headers={"Authorization": f"Bearer {root}"},
                    json={"merge_method": "rebase"})
    assert r.status_code == 422 and r.json()["error"]["field"] == "merge_method", r.text
    assert "--merge-method is merge or squash, not 'rebase'" in r.json()["error"]["message"]

    one, _ = await fleet.db.subtasks.create_subtask(actor_id=None, title="Add one.txt",
                                                    description="A file holding one.\nSecond line.")
    two, _ = await fleet.db.subtasks.create_subtask(actor_id=None, title="Add two.txt")
    start = fleet.main()
    await fleet.db.repos.set_paused(repo="demo", paused=True, reason="collecting a batch")
    tips, worktrees = {}, {}
    for who, sub, name in (("ann", one, "one"), ("bob", two, "two")):
        claim, wt = fleet.start(who)
        assert claim.subtask_id == sub.id
        commit(wt, {"calc.py": BROKEN, f"{name}.txt": "wip\n"}, "WIP: broken add")
        tips[sub.id] = commit(wt, {"calc.py": "def add(a, b):\n    return a + b\n", f"{name}.txt": f"{name}\n"},
                              f"Finish {name}")
        worktrees[sub.id] = wt
        git.run_git(["push", "-q", "origin", f"HEAD:refs/heads/{claim.branch}"], cwd=wt)
    await fleet.db.repos.set_paused(repo="demo", paused=False, reason=None)
    await wait_landed(fleet, [one.id, two.id])

    bare = fleet.bare()
    landed = {row.subtask_id: row for row in await fleet.db.landing.landed(repo="demo")}
    landed_candidate = {c["subtask_id"]: c["id"] for c in await fleet.db.landing.candidates(repo="demo")
                        if c["status"] == "landed"}
    chain = git.first_parents(bare, fleet.main(), {start})
    assert chain == [landed[two.id].merged_sha, landed[one.id].merged_sha]  # one commit per landing, in order
    for sub in (one, two):
        row = landed[sub.id]
        c = bare[row.merged_sha].peel(pygit2.Commit)
        assert len(c.parent_ids) == 1 and str(c.tree_id) == row.tree_sha
        assert not bare.descendant_of(row.merged_sha, tips[sub.id])  # the branch's commits are not on main
        assert c.message.startswith(f"{sub.title}\n\n")
        assert trailers(c.message) == {"Mergebot-Subtask": str(sub.id), "Mergebot-Claim-Version": "1",
                                       "Mergebot-Candidate": str(landed_candidate[sub.id]),
                                       "Mergebot-Branch-Tip": tips[sub.id]}
        assert row.candidate_sha == tips[sub.id]
    assert "A file holding one.\nSecond line.\n\nMergebot-Subtask" in bare[landed[one.id].merged_sha].message
    assert str(bare[landed[one.id].merged_sha].peel(pygit2.Commit).parent_ids[0]) == start
    assert str(bare[landed[two.id].merged_sha].peel(pygit2.Commit).parent_ids[0]) == landed[one.id].merged_sha
    # one run verified both, on exactly the commit main moved to: the second squash commit
    assert landed[one.id].batch_id == landed[two.id].batch_id and landed[two.id].batch_size == 2
    jobs = {j["id"]: j for j in await fleet.db.jobs.jobs(limit=100)}
    run = jobs[landed[two.id].run_id]
    assert landed[two.id].main_sha == landed[two.id].merged_sha == fleet.main()
    assert (run["status"], run["outcome"], run["commit_sha"]) == ("done", "pass", landed[two.id].merged_sha)
    assert "WIP" not in "".join(bare[sha].message for sha in chain)
    main_calc = bare[fleet.main()].peel(pygit2.Commit).tree["calc.py"]
    assert bare[main_calc.id].data.decode() != BROKEN

    # ann starts her next subtask in the same worktree: her landed (squashed) commits are not "unlanded"
    three, _ = await fleet.db.subtasks.create_subtask(actor_id=None, title="Add three.txt")
    got = agent.start(fleet.client("ann"), fleet.bot.url, fleet.tokens["ann"], "demo", worktrees[one.id])
    assert got is not None and got[0].subtask_id == three.id and not got[1].get("carried")
    tip = commit(worktrees[one.id], {"three.txt": "3\n"}, "Add three")  # on main as it is: a fast-forward
    assert agent.push(fleet.client("ann"), worktrees[one.id], wait=60, progress=False)["status"] == "landed"
    row = (await fleet.db.landing.landed(repo="demo", subtask_id=three.id))[0]
    c = bare[row.merged_sha].peel(pygit2.Commit)
    assert row.merged_sha != tip and [str(p) for p in c.parent_ids] == [landed[two.id].merged_sha]
    assert trailers(c.message)["Mergebot-Branch-Tip"] == tip and str(c.tree_id) == row.tree_sha
    assert any(j["commit_sha"] == row.merged_sha and j["outcome"] == "pass"
               for j in await fleet.db.jobs.jobs(limit=100))

    # the reconciler and the drills' invariants read the history through the landed rows: nothing unexplained
    reports = httpx.post(f"{fleet.bot.url}/api/v1/reconcile", headers={"Authorization": f"Bearer {root}"}).json()
    demo = next(r for r in reports["reports"] if r["repo"] == "demo")
    assert (demo["unexplained"], demo["landed_not_on_main"]) == ([], []), demo
    rows = [dataclasses.asdict(r) for r in await fleet.db.landing.landed(repo="demo")]
    repo = await fleet.db.repos.get_repo("demo")
    assert check_history(bare, fleet.main(), repo.root_sha, rows) == []


def test_squash_in_memory_keeps_the_tree_and_one_parent(tmp_path: Path) -> None:
    """``git.squash`` of a merge: one commit on the base with the merge's tree, authored as the candidate was;
    files written into it after (acceptance tests) keep it one commit on the base; a fast-forward of one commit
    that already says the message (the bot's revert) stays that commit."""
    repo = pygit2.init_repository(str(tmp_path / "r.git"), bare=True)
    sig = pygit2.Signature("ann", "ann@example.com", 1_700_000_000, 0)

    def put(parent: str | None, files: dict[str, str], message: str) -> str:
        tb = repo.TreeBuilder(repo[parent].peel(pygit2.Commit).tree) if parent else repo.TreeBuilder()
        for name, text in files.items():
            tb.insert(name, repo.create_blob(text.encode()), pygit2.enums.FileMode.BLOB)
        parents = [pygit2.Oid(hex=parent)] if parent else []
        return str(repo.create_commit(None, sig, sig, message, tb.write(), parents))

    base = put(None, {"a.txt": "a\n"}, "root")
    main = put(base, {"m.txt": "m\n"}, "main moved")
    wip = put(base, {"b.txt": "wip\n"}, "WIP")
    tip = put(wip, {"b.txt": "b\n"}, "done")
    merge = git.merge_onto(repo, main, tip, "merge")
    assert merge.kind == "merge" and merge.candidate == tip
    squashed = git.squash(repo, main, merge, "Title\n\nMergebot-Branch-Tip: x\n")
    c = repo[squashed.sha].peel(pygit2.Commit)
    assert squashed.kind == "squash" and squashed.applies and squashed.tree == merge.tree
    assert [str(p) for p in c.parent_ids] == [main] and c.author.email == "ann@example.com"
    assert c.committer.name == "Mergebot" and c.message.startswith("Title")
    accepted = git.with_files(repo, main, squashed, [("tests/test_acc.py", b"def test(): pass\n")], "with tests")
    a = repo[accepted.sha].peel(pygit2.Commit)
    assert accepted.kind == "squash" and [str(p) for p in a.parent_ids] == [main] and "tests" in a.tree
    # a fast-forward: still a commit of its own, unless it is one commit on the base saying the message already
    ff = git.merge_onto(repo, base, tip, "merge")
    assert ff.kind == "fast-forward" and git.squash(repo, base, ff, "Title\n").sha != tip
    revert = put(main, {"m.txt": ""}, "Revert subtask 1\n")
    kept = git.merge_onto(repo, main, revert, "merge")
    assert git.squash(repo, main, kept, "Revert subtask 1\n") == kept
    # the message: title, then the trailers, the acceptance tests' after them in the same paragraph
    words = say.with_acceptance(say.squash_message(7, 2, "Title", "", tip, 9), ["tests/test_acc.py"])
    assert words.startswith("Title\n\nMergebot-Subtask: 7\n") and trailers(words) == {
        "Mergebot-Subtask": "7", "Mergebot-Claim-Version": "2", "Mergebot-Candidate": "9",
        "Mergebot-Branch-Tip": tip, "Mergebot-Acceptance": "tests/test_acc.py"}


@pytest.mark.parametrize("command", [["repo", "set", "demo"], ["repo", "add", "demo", "--verifier", "true"]])
def test_an_unknown_merge_method_is_refused_with_the_choices(command: list[str],
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        cli_main([*command, "--merge-method", "bogus"])
    assert e.value.code == 2
    assert "mergebot: --merge-method is merge or squash, not 'bogus'" in capsys.readouterr().err
    assert Rules.of(verifier_command="true").merge_method == "merge"  # the default: today's merge commits
    assert RulesChange.of(merge_method="squash").given() == ["merge_method"]
