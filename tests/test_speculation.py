"""Speculative landing, end to end: a real server with a window of 3 and 3 verifier workers, real pushes.

Correctness under speculation: main only ever moves to a commit that a verifier run passed on exactly that
commit; no landed row points at a commit that is not on main; a failing candidate in the middle of a window
lands nothing that was verified on top of it.
"""

from __future__ import annotations

import time

import pygit2

from mergebot.auth import Role
from tests.bot import Fleet, commit, git


async def wait_for(fleet: Fleet, ids: list[int], statuses: set[str], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = [(await fleet.store.get_subtask(i)).status for i in ids]
        if all(status in statuses for status in got):
            return
        time.sleep(0.2)
    raise AssertionError(f"subtasks {ids} never reached {statuses}:\n" + fleet.bot.log.read_text()[-3000:])


async def test_a_failing_candidate_mid_window_lands_nothing_built_on_it(fleet: Fleet) -> None:
    fleet.bot.stop()
    fleet.bot.start(MERGEBOT_SPECULATION_WINDOW="3", MERGEBOT_VERIFIER_WORKERS="3")
    _, fleet.tokens["cat"] = await fleet.store.add_agent(name="cat", role=Role.AGENT)
    subs = [(await fleet.store.create_subtask(actor_id=None, title=t))[0] for t in ("one", "two", "three")]
    start = fleet.main()
    # Hold the queue so all three are queued together and go into one window.
    await fleet.store.set_paused(repo="demo", paused=True, reason="collecting a window")
    shas = {}
    for who, files in (("ann", {"one.txt": "1\n"}),
                       ("bob", {"calc.py": "def add(a, b):\n    return a - b\n"}),  # breaks the suite
                       ("cat", {"three.txt": "3\n"})):
        claim, wt = fleet.start(who)
        shas[claim.subtask_id] = commit(wt, files)
        git(["push", "-q", "origin", f"HEAD:refs/heads/{claim.branch}"], wt)
    await fleet.store.set_paused(repo="demo", paused=False, reason=None)
    one, two, three = (s.id for s in subs)
    await wait_for(fleet, [one, three], {"landed"})
    await wait_for(fleet, [two], {"running"})  # rejected, back to its owner

    bare = fleet.bare()
    head = fleet.main()
    landed = await fleet.store.landed(repo="demo")
    assert {row.subtask_id for row in landed} == {one, three}
    # every landed row's commit is on main, and main's first-parent chain is exactly the landed rows
    chain, cur = [], head
    while cur != start:
        chain.append(cur)
        cur = str(bare[cur].peel(pygit2.Commit).parent_ids[0])
    assert sorted(chain) == sorted(row.merged_sha for row in landed)
    # main moved only to commits a verifier run passed on exactly that commit
    jobs = await fleet.store.jobs(limit=100)
    passed = {j["commit_sha"] for j in jobs if j["status"] == "done" and j["outcome"] in ("pass", "flaky")}
    assert set(chain) <= passed
    # the failing candidate's commit is in no landed commit's history
    for sha in chain:
        assert not bare.descendant_of(sha, shas[two]) and sha != shas[two]
    # it really was speculative: some run was made on top of the failing candidate, and was thrown away
    on_top = [j for j in jobs if j["purpose"] == "candidate" and j["commit_sha"] not in passed
              and j["commit_sha"] in bare and bare.descendant_of(j["commit_sha"], shas[two])
              and j["candidate_id"] is not None]
    assert on_top, "no run was ever made on top of the failing candidate: the window did not speculate"
    # the failing candidate was judged on a main that a run had just passed on: no base run was needed
    assert [j["purpose"] for j in jobs if j["purpose"] == "base"] == []
    assert any(j["purpose"] == "retry" for j in jobs)
    cands = await fleet.store.candidates(repo="demo")
    assert {c["status"] for c in cands} <= {"landed", "rejected", "superseded", "queued"}
    assert await fleet.store.pending_intents("demo") == []
    findings = fleet.client("rita").get("/api/v1/findings", repo="demo")["findings"]
    assert findings == [], findings
