"""A fleet that does not trip over itself: the conflict forecast, through real pushes and a real server."""

from __future__ import annotations

import subprocess

from mergebot import agent
from mergebot.cli.views import worktree_view
from tests.support.bot import Fleet, commit


async def test_the_forecast_names_the_candidate_that_touches_the_same_file(fleet: Fleet) -> None:
    """Two agents change calc.py. While ann's push waits in the queue, bob's worktree status names her candidate
    before he pushes (from his paths alone), and his push's answer says it conflicts with his change (from an
    in-memory merge), so he can talk to her or rebase before the queue says no."""
    for title in ("make add commutative", "make add explicit"):
        await fleet.db.subtasks.create_subtask(actor_id=None, title=title)
    _, ann_wt = fleet.start("ann")
    bob_claim, bob_wt = fleet.start("bob")
    await fleet.db.repos.set_paused(repo="demo", paused=True, reason="holding the queue")
    commit(ann_wt, {"calc.py": "def add(a, b):\n    return b + a\n"})
    ann = agent.push(fleet.client("ann"), ann_wt, wait=1, progress=False)
    assert ann["status"] == "waiting", ann
    commit(bob_wt, {"calc.py": "def add(a, b):\n    return a + b + 0\n", "bob.txt": "bob\n"})
    before = worktree_view(fleet.client("bob"), bob_wt)
    assert before is not None
    assert [c["id"] for c in before["forecast"]["candidates"]] == [ann["id"]]
    assert before["forecast"]["candidates"][0]["shared"] == ["calc.py"]
    assert any(f"candidate {ann['id']} of subtask" in line and "ann" in line for line in before["forecast_lines"])
    out = subprocess.run(["git", "push", "--force", "origin", f"HEAD:refs/heads/{bob_claim.branch}"], cwd=bob_wt,
                         capture_output=True, text=True, check=True)
    said = out.stderr.replace("remote: ", "")
    assert f"forecast: candidate {ann['id']} of subtask" in said and "conflicts with this change" in said, said
    after = worktree_view(fleet.client("bob"), bob_wt)
    assert after is not None and after["forecast"]["candidates"][0]["conflicts"] is True
    assert after["forecast"]["conflicts_with_main"] == []  # main itself has not moved: only ann's change is in the way


async def test_a_claimer_s_own_estimate_names_who_else_works_there(fleet: Fleet) -> None:
    """``mergebot start --touch`` adds the claimer's estimate to the footprint, and the answer names the subtasks
    in flight whose footprints overlap it, with their owners."""
    calc, _ = await fleet.db.subtasks.create_subtask(actor_id=None, title="rework calc", paths=["calc.py"])
    await fleet.db.subtasks.create_subtask(actor_id=None, title="tidy the tests")
    ann_claim, _ = fleet.start("ann")
    assert ann_claim.subtask_id == calc.id
    got = agent.start(fleet.client("bob"), fleet.bot.url, fleet.tokens["bob"], "demo", fleet.work / "bob",
                      touch_paths=["calc.py", "tests/"])
    assert got is not None
    _, body = got
    assert body["subtask"]["paths"] == ["calc.py", "tests/"]
    assert [(o["id"], o["owner"]) for o in body["overlaps"]] == [(calc.id, "ann")]


async def test_claims_through_the_server_keep_apart_while_they_can(fleet: Fleet) -> None:
    """Through the real server: with equal work ready, the claim avoids a footprint in flight; once only
    overlapping work is left it is taken, and the answer names who holds the overlapping subtask."""
    calc1, _ = await fleet.db.subtasks.create_subtask(actor_id=None, title="calc part one", paths=["calc.py"])
    calc2, _ = await fleet.db.subtasks.create_subtask(actor_id=None, title="calc part two", paths=["calc.py"])
    docs, _ = await fleet.db.subtasks.create_subtask(actor_id=None, title="write the docs", paths=["docs/"])
    ann = fleet.client("ann").post("/api/v1/subtasks/claim")
    assert ann["subtask"]["id"] == calc1.id and ann["overlaps"] == []
    bob = fleet.client("bob").post("/api/v1/subtasks/claim")
    assert bob["subtask"]["id"] == docs.id  # not calc part two: calc.py is in flight
    again = fleet.client("bob").post("/api/v1/subtasks/claim")
    assert again["subtask"]["id"] == calc2.id  # nothing else is ready
    assert [(o["id"], o["owner"]) for o in again["overlaps"]] == [(calc1.id, "ann")]
