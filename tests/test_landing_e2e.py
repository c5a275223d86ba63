"""End to end: the real server on a loopback port, the real git client over HTTP, real PostgreSQL and pytest.

Each refusal is checked for its reason in git's own output, and every landing for its evidence: the landed
row's merged sha is main's head and its tree is the head's tree.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pygit2
import pytest

from mergebot import agent
from mergebot.client import ApiError
from mergebot.rules import Rules
from tests.support.bot import Fleet, commit, git


async def test_owner_push_lands_and_releases_dependents(fleet: Fleet) -> None:
    parent, _ = await fleet.db.subtasks.create_subtask(actor_id=None, title="add subtract")
    child, _ = await fleet.db.subtasks.create_subtask(actor_id=None, title="use it", depends_on=[parent.id])
    claim, wt = fleet.start("ann")
    assert claim.subtask_id == parent.id
    before = fleet.main()
    commit(wt, {"calc.py": "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"})
    result = agent.push(fleet.client("ann"), wt, wait=60, progress=False)
    assert result["status"] == "landed", result
    landed = (await fleet.db.landing.landed(subtask_id=parent.id))[0]
    head = fleet.main()
    assert landed.merged_sha == head and landed.base_sha == before
    assert landed.tree_sha == str(fleet.bare()[head].peel(pygit2.Commit).tree_id)
    assert landed.verifier_result == "pass" and landed.claim_version == 1 and len(landed.log_digest) == 64
    assert (await fleet.db.subtasks.get_subtask(child.id)).status == "ready"
    assert (await fleet.db.subtasks.get_subtask(parent.id)).status == "landed"


async def test_a_push_verdict_is_one_long_poll(fleet: Fleet) -> None:
    """GET /api/v1/candidates/{id}?wait=S holds until the candidate reaches a verdict (the queue is paused
    here, so it is held for the whole wait), and answers at once for one that already has it."""
    await fleet.db.subtasks.create_subtask(actor_id=None, title="long poll")
    claim, wt = fleet.start("ann")
    commit(wt, {"lp.txt": "x\n"})
    await fleet.db.repos.set_paused(repo="demo", paused=True, reason="holding the queue")
    git(["push", "-q", "origin", f"HEAD:refs/heads/{claim.branch}"], wt)
    cand = fleet.client("ann").get("/api/v1/candidates", subtask=claim.subtask_id)["candidates"][0]
    started = time.monotonic()
    held = fleet.client("ann").get(f"/api/v1/candidates/{cand['id']}", wait=1.5)
    assert held["status"] == "queued" and time.monotonic() - started >= 1.4
    await fleet.db.repos.set_paused(repo="demo", paused=False, reason=None)
    started = time.monotonic()
    done = fleet.client("ann").get(f"/api/v1/candidates/{cand['id']}", wait=60)
    assert done["status"] == "landed", done
    assert time.monotonic() - started < 55  # answered by the verdict's notification, not the timeout
    started = time.monotonic()
    again = fleet.client("ann").get(f"/api/v1/candidates/{cand['id']}", wait=30)
    assert again["status"] == "landed" and time.monotonic() - started < 5
    with pytest.raises(ApiError) as err:
        fleet.client("ann").get(f"/api/v1/candidates/{cand['id']}", wait=61)
    assert err.value.status == 422


async def test_refusals_carry_their_reason(fleet: Fleet) -> None:
    s1, _ = await fleet.db.subtasks.create_subtask(actor_id=None, title="one")
    claim, wt = fleet.start("ann")
    commit(wt, {"a.txt": "a\n"})
    # to main directly
    out = git(["push", "origin", "HEAD:refs/heads/main"], wt, check=False)
    assert out.returncode != 0 and "only Mergebot moves main" in out.stderr
    # a tag, another branch name
    out = git(["push", "origin", "HEAD:refs/heads/feature"], wt, check=False)
    assert out.returncode != 0 and "this ref is protected" in out.stderr
    # a future claim version
    out = git(["push", "origin", f"HEAD:refs/heads/subtasks/{s1.id}/v9"], wt, check=False)
    assert out.returncode != 0 and "does not exist" in out.stderr
    # bob pushes to ann's subtask: not the owner (bob's identity comes from his token)
    _, _ = await fleet.db.subtasks.create_subtask(actor_id=None, title="two")
    _, bob_wt = fleet.start("bob")
    commit(bob_wt, {"b.txt": "b\n"})
    out = git(["push", "origin", f"HEAD:refs/heads/subtasks/{s1.id}/v1"], bob_wt, check=False)
    assert out.returncode != 0 and f"subtask {s1.id} is not yours" in out.stderr
    # a protected path
    commit(wt, {"ci/check.sh": "exit 0\n"})
    out = git(["push", "origin", f"HEAD:refs/heads/{claim.branch}"], wt, check=False)
    assert out.returncode != 0 and "changes protected paths (ci/check.sh)" in out.stderr
    # a reviewer cannot push at all
    rita = fleet.work / "rita"
    git(["clone", "-q",
         f"http://x:{fleet.tokens['rita']}@127.0.0.1:{fleet.bot.port}/git/demo.git", str(rita)], fleet.work)
    commit(rita, {"r.txt": "r\n"})
    out = git(["push", "origin", f"HEAD:refs/heads/subtasks/{s1.id}/v1"], rita, check=False)
    assert out.returncode != 0 and "may not push" in out.stderr
    # nothing above moved main or queued anything, and every refusal was recorded
    events = await fleet.db.subtasks.events(limit=1000)
    refused = [e for e in events if e["kind"] == "push_refused"]
    assert {e["detail"]["code"] for e in refused} >= {"protected_ref", "not_claimed", "not_owner", "protected_path"}
    assert await fleet.db.landing.candidates(repo="demo") == []


async def test_a_push_to_a_subtask_that_does_not_exist_is_refused_with_its_reason(fleet: Fleet) -> None:
    """Once answered 422 with the database's foreign-key text: the refusal's event named a subtask that is not
    there. git must show the rule's own sentence, and the refusal must reach ``mergebot queue``."""
    await fleet.db.subtasks.create_subtask(actor_id=None, title="one")
    _, wt = fleet.start("ann")
    commit(wt, {"a.txt": "a\n"})
    out = git(["push", "origin", "HEAD:refs/heads/subtasks/999999/v1"], wt, check=False)
    assert out.returncode != 0
    assert "subtask 999999 does not exist" in out.stderr, out.stderr
    assert "refers to something" not in out.stderr and "Key (" not in out.stderr
    refusals = fleet.client("lead").queue_view(repo="demo")["refusals"]
    assert [(r["subtask_id"], r["reason"]) for r in refusals] == [(999999, "unknown_subtask")]
    assert "subtask 999999 does not exist" in refusals[0]["message"]
    assert await fleet.db.landing.candidates(repo="demo") == []


async def test_stale_claim_version_refused(fleet: Fleet) -> None:
    sub, _ = await fleet.db.subtasks.create_subtask(actor_id=None, title="t")
    claim, wt = fleet.start("ann")
    fleet.client("ann").post(f"/api/v1/subtasks/{sub.id}/release", {"claim_version": 1})
    fleet.start("ann", "ann2")  # the same agent claims it again: version 2
    commit(wt, {"x.txt": "x\n"})
    result = agent.push(fleet.client("ann"), wt, wait=5, progress=False)
    assert result["status"] == "refused"
    assert "claim version 1 is stale" in result["reason"] and "at claim version 2" in result["reason"]
    assert not (fleet.bare().references.get(f"refs/heads/{claim.branch}"))


async def test_conflict_rejected_with_paths_and_back_to_running(fleet: Fleet) -> None:
    c2, wt2 = await fleet.bob_conflicts_with_ann()
    head = fleet.main()
    result = agent.push(fleet.client("bob"), wt2, wait=60, progress=False)
    assert result["status"] == "rejected" and "conflicts with main in: notes.txt" in result["reason"]
    assert fleet.main() == head
    back = await fleet.db.subtasks.get_subtask(c2.subtask_id)
    assert (back.status, back.owner, back.claim_version) == ("running", "bob", 1)
    assert "notes.txt" in (back.status_reason or "")
    # bob resolves (merge main), pushes again, and lands
    git(["fetch", "-q", "origin"], wt2)
    git(["merge", "-q", "origin/main", "-X", "theirs", "-m", "merge main"], wt2)
    assert agent.push(fleet.client("bob"), wt2, wait=60, progress=False)["status"] == "landed"


async def test_failing_suite_keeps_main_and_subtask_unlanded(fleet: Fleet) -> None:
    sub, _ = await fleet.db.subtasks.create_subtask(actor_id=None, title="break it")
    _, wt = fleet.start("ann")
    head = fleet.main()
    commit(wt, {"calc.py": "def add(a, b):\n    return a - b\n"})
    result = agent.push(fleet.client("ann"), wt, wait=60, progress=False)
    assert result["status"] == "rejected"
    assert "gave fail" in result["reason"] and "assert" in result["reason"]
    assert fleet.main() == head
    s = await fleet.db.subtasks.get_subtask(sub.id)
    assert s.status == "running" and await fleet.db.landing.landed(subtask_id=sub.id) == []
    assert result["verifier"]["outcome"] == "fail" and result["verifier"]["exit_code"] == 1


async def test_newer_push_supersedes_queued_candidate(fleet: Fleet) -> None:
    await fleet.db.subtasks.create_subtask(actor_id=None, title="t")
    claim, wt = fleet.start("ann")
    first = commit(wt, {"a.txt": "1\n"})
    second = commit(wt, {"a.txt": "2\n"})
    # Queue two candidates back to back; whichever the queue has not taken yet is superseded.
    git(["push", "-q", "origin", f"{first}:refs/heads/{claim.branch}"], wt)
    result = agent.push(fleet.client("ann"), wt, wait=60, progress=False)
    assert result["status"] == "landed" and result["sha"] == second
    statuses = {c["sha"]: c["status"] for c in await fleet.db.landing.candidates(subtask_id=claim.subtask_id)}
    assert statuses[second] == "landed" and statuses[first] in ("superseded", "rejected")
    assert len(await fleet.db.landing.landed(subtask_id=claim.subtask_id)) == 1


async def test_history_anomalies_refused(fleet: Fleet) -> None:
    await fleet.db.subtasks.create_subtask(actor_id=None, title="ann's")
    await fleet.db.subtasks.create_subtask(actor_id=None, title="bob's")
    ann_claim, ann_wt = fleet.start("ann")
    bob_claim, bob_wt = fleet.start("bob")
    # ann's work fails its check, so her branch stays unlanded
    commit(ann_wt, {"calc.py": "def add(a, b):\n    return 0\n"}, "ann: wip")
    verdict = agent.push(fleet.client("ann"), ann_wt, wait=60, progress=False)
    assert verdict["status"] == "rejected", verdict.get("verifier")
    # bob merges ann's unlanded branch into his and pushes
    commit(bob_wt, {"bob.txt": "bob\n"}, "bob: work")
    git(["fetch", "-q", "origin", f"refs/heads/{ann_claim.branch}:refs/remotes/origin/ann"], bob_wt)
    git(["merge", "-q", "--no-edit", "origin/ann"], bob_wt)
    out = git(["push", "origin", f"HEAD:refs/heads/{bob_claim.branch}"], bob_wt, check=False)
    assert out.returncode != 0
    assert f"belongs to subtask {ann_claim.subtask_id}, which has not landed" in out.stderr
    # an unrelated history (a new root commit) is refused too
    git(["checkout", "-q", "--orphan", "elsewhere"], bob_wt)
    commit(bob_wt, {"other.txt": "x\n"}, "unrelated root")
    out = git(["push", "origin", f"HEAD:refs/heads/{bob_claim.branch}"], bob_wt, check=False)
    assert out.returncode != 0 and "unrelated to main" in out.stderr
    assert str(fleet.bare().references["refs/heads/main"].target) == fleet.main()
    assert [c["subtask_id"] for c in await fleet.db.landing.candidates(repo="demo")] == [ann_claim.subtask_id]


async def test_reviewer_reruns_a_landed_check(fleet: Fleet, tmp_path: Path) -> None:
    """`mergebot verify` reproduces a landed row from another machine: fetch over HTTP, same tree, same verdict."""
    sub, _ = await fleet.db.subtasks.create_subtask(actor_id=None, title="t")
    _, wt = fleet.start("ann")
    commit(wt, {"r.txt": "r\n"})
    assert agent.push(fleet.client("ann"), wt, wait=60, progress=False)["status"] == "landed"
    landed = (await fleet.db.landing.landed(subtask_id=sub.id))[0]
    elsewhere = tmp_path / "reviewer-machine"  # no data directory here: the commit comes over HTTP
    out = subprocess.run(
        [sys.executable, "-m", "mergebot", "verify", landed.merged_sha, "--repo", "demo", "--json",
         "--data-dir", str(elsewhere), "--server", fleet.bot.url, "--token", fleet.tokens["rita"]],
        capture_output=True, text=True, check=False, timeout=120)
    assert out.returncode == 0, out.stderr
    record = json.loads(out.stdout)
    assert record["outcome"] == "pass" and record["commit_sha"] == landed.merged_sha
    assert record["tree_sha"] == landed.tree_sha and record["command"] == landed.verifier_command


async def test_handoff_note_reaches_the_next_owner(fleet: Fleet) -> None:
    sub, _ = await fleet.db.subtasks.create_subtask(actor_id=None, title="hand me over")
    claim, wt = fleet.start("ann")
    # half-done work that does not pass yet: pushed (so it is on ann's branch) and rejected
    commit(wt, {"half.txt": "half done\n", "calc.py": "def add(a, b):\n    raise NotImplementedError\n"},
           "first half")
    assert agent.push(fleet.client("ann"), wt, wait=60, progress=False)["status"] == "rejected"
    note = agent.handoff_note(wt, done="parsed the input", remains="write the output",
                              tried=["pytest -k out: fails on unicode"], checks=["pytest -q: 1 failed"])
    ann = fleet.client("ann")
    ann.post(f"/api/v1/subtasks/{sub.id}/notes", {"body": note, "claim_version": claim.claim_version})
    ann.post(f"/api/v1/subtasks/{sub.id}/release", {"claim_version": claim.claim_version, "reason": "out of time"})
    got = agent.start(fleet.client("bob"), fleet.bot.url, fleet.tokens["bob"], "demo", fleet.work / "bob2")
    assert got is not None
    bob_claim, body = got
    assert bob_claim.subtask_id == sub.id and bob_claim.claim_version == claim.claim_version + 1
    [handoff] = [n["body"] for n in body["handoff"]["notes"]]
    for part in ("## Handoff", "### Done", "parsed the input", "### Commits", "first half",
                 "### What remains", "write the output", "### Failed attempts", "fails on unicode"):
        assert part in handoff
    assert body["handoff"]["last_reason"] == "out of time"
    # bob's worktree starts from ann's pushed branch: her half is there
    assert (fleet.work / "bob2" / "half.txt").read_text() == "half done\n"


async def test_one_broken_repository_does_not_hold_the_others(fleet: Fleet, tmp_path: Path) -> None:
    """A repository whose directory is gone fails its reconcile and its queue every pass; the other
    repositories' queues go on, and the broken one is retried with a back-off, not dropped."""
    import shutil

    from mergebot.landing.main.repos import add_repo, repos_root
    from tests.support.bot import make_project

    data = fleet.bot.data_dir
    await add_repo(fleet.db, repos_root(data), name="broken", source=str(make_project(tmp_path / "src2")),
                   rules=Rules.of(verifier_command="true"))
    fleet.bot.stop()
    shutil.rmtree(repos_root(data) / "broken.git")
    fleet.bot.start()
    sub, _ = await fleet.db.subtasks.create_subtask(actor_id=None, title="work")
    _, wt = fleet.start("ann")
    commit(wt, {"feature.txt": "done\n"})
    assert agent.push(fleet.client("ann"), wt, wait=60, progress=False)["status"] == "landed"
    assert (await fleet.db.subtasks.get_subtask(sub.id)).status == "landed"
    log = fleet.bot.log.read_text()
    assert "queue of broken failed, retrying it in" in log
    assert "queue pass failed" not in log  # the whole pass never failed for it
