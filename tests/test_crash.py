"""Crash drills for the landing path: SIGKILL the bot at each step, restart it, and check the books balance.

The bot kills itself with SIGKILL at the named step (``MERGEBOT_CRASH_AT``, a test hook in
``mergebot.landing.queue.crash_point``): after verification, after the intent is written, after main moved but
before the database commit, and after the commit. After a restart the reconciler must leave exactly one landed
row per landed commit, main's history fully explained, every intent resolved, and no subtask lost.
"""

from __future__ import annotations

import time

import pygit2
import pytest

from mergebot import agent
from tests.bot import Fleet, commit, git


async def wait_status(fleet: Fleet, subtask_id: int, status: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (await fleet.store.get_subtask(subtask_id)).status == status:
            return
        time.sleep(0.1)
    raise AssertionError(f"subtask {subtask_id} never became {status}; log:\n{fleet.bot.log.read_text()[-3000:]}")


@pytest.mark.parametrize("step", ["after_verify", "after_intent", "after_cas", "after_commit"])
async def test_sigkill_at_each_landing_step(fleet: Fleet, step: str) -> None:
    sub, _ = await fleet.store.create_subtask(actor_id=None, title="work")
    child, _ = await fleet.store.create_subtask(actor_id=None, title="after", depends_on=[sub.id])
    before = fleet.main()

    fleet.bot.stop()
    fleet.bot.start(MERGEBOT_CRASH_AT=step)
    claim, wt = fleet.start("ann")
    sha = commit(wt, {"feature.txt": "done\n"})
    git(["push", "-q", "origin", f"HEAD:refs/heads/{claim.branch}"], wt)
    assert fleet.bot.wait_exit(60) == -9  # the bot died by SIGKILL at that step

    moved = fleet.main() != before
    assert moved == (step in ("after_cas", "after_commit"))

    fleet.bot.start()  # no crash this time: the reconciler runs first, then the queue
    await wait_status(fleet, sub.id, "landed")
    await wait_status(fleet, child.id, "ready")

    landed = await fleet.store.landed(repo="demo")
    head = fleet.main()
    assert [row.merged_sha for row in landed] == [head]  # exactly one landed row, and it is main's head
    assert landed[0].base_sha == before and landed[0].candidate_sha == sha
    bare = fleet.bare()
    assert bare.descendant_of(head, before) or head == before
    assert landed[0].tree_sha == str(bare[head].peel(pygit2.Commit).tree_id)
    # every intent resolved, no candidate stuck mid-flight
    cands = await fleet.store.candidates(repo="demo")
    assert {c["status"] for c in cands} <= {"landed", "superseded"}
    assert sum(c["status"] == "landed" for c in cands) == 1
    assert await fleet.store.pending_intents("demo") == []
    # the reconciler finds main fully explained
    report = fleet.client("lead")  # lead cannot reconcile; reviewers read findings
    findings = report.get("/api/v1/findings", repo="demo")["findings"]
    assert findings == [], findings


async def test_lost_post_receive_is_requeued(fleet: Fleet) -> None:
    """An accepted push whose post-receive never ran (the bot died in between) is queued by the reconciler."""
    sub, _ = await fleet.store.create_subtask(actor_id=None, title="work")
    claim, wt = fleet.start("ann")
    sha = commit(wt, {"f.txt": "x\n"})
    fleet.bot.stop()
    # Simulate the ref moving with no post-receive: write the ref straight into the bare repository.
    git(["push", "-q", str(fleet.bot.data_dir / "repos" / "demo.git"), f"HEAD:refs/heads/{claim.branch}"], wt,
        check=False)
    bare = fleet.bare()
    if f"refs/heads/{claim.branch}" not in bare.references:  # the hook refused the direct push, as it should
        git(["--git-dir", str(fleet.bot.data_dir / "repos" / "demo.git"), "fetch", "-q", str(wt),
             f"HEAD:refs/heads/{claim.branch}"], wt)
    assert str(fleet.bare().references[f"refs/heads/{claim.branch}"].target) == sha
    fleet.bot.start()
    await wait_status(fleet, sub.id, "landed")
    assert (await fleet.store.landed(subtask_id=sub.id))[0].candidate_sha == sha
    _ = agent  # the agent module drives the other drills


async def test_reconciler_reports_commits_no_landed_row_explains(fleet: Fleet) -> None:
    """Someone moves main behind the bot's back: the reconciler reports exactly those commits."""
    fleet.bot.stop()
    bare = fleet.bare()
    head = bare.references["refs/heads/main"]
    parent = bare[head.target].peel(pygit2.Commit)
    sig = pygit2.Signature("Intruder", "intruder@example.com")
    sneaky = bare.create_commit(None, sig, sig, "not through mergebot", parent.tree_id, [parent.id])
    head.set_target(sneaky, "moved by hand")
    fleet.bot.start()
    root = fleet.client("lead")  # any role may read findings
    deadline = time.monotonic() + 30
    findings: list[dict[str, object]] = []
    while time.monotonic() < deadline and not findings:
        findings = root.get("/api/v1/findings", repo="demo")["findings"]
        time.sleep(0.2)
    assert [f["kind"] for f in findings] == ["unexplained_commits"]
    assert findings[0]["detail"] == {"commits": [str(sneaky)], "count": 1}
