"""Every verdict kind, produced for real and read as a record.

Each test makes its verdict happen through a real push (or the API call that stands for one) against a real
server and repository, and checks the fields an agent acts on: ``kind``, ``final``, ``next`` and ``branch`` (the
exact ref to push to while the claim holds, else none), with ``paths``, ``hunks`` and ``failing_tests`` where
the kind has them. ``tests/test_agents.py`` covers the kinds it already needs (conflict, check_failed,
pre_existing, landed, unchanged and the push rules), ``tests/test_judged.py`` the ones a run's tests decide
(tests_weakened, no_report); ``test_every_kind_is_produced_by_some_test`` checks that
together they cover ``KINDS``.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from mergebot import agent
from mergebot.client import ApiError
from mergebot.db.locks import SessionLocks
from mergebot.errors import BeingLanded
from mergebot.landing.judge.verdicts import KINDS
from tests.support.bot import Fleet, check_command, commit, git, until
from verifier import limits
from verifier import sandbox as sb

SANDBOXED = pytest.mark.skipif(not sb.bwrap_usable(), reason=f"the bwrap sandbox is not usable: {sb.bwrap_problem()}")


def candidate(fleet: Fleet, who: str, cand_id: int) -> dict[str, Any]:
    out: dict[str, Any] = fleet.client(who).get(f"/api/v1/candidates/{cand_id}")
    return out


def push(fleet: Fleet, who: str, wt: Path, wait: float = 90) -> dict[str, Any]:
    return agent.push(fleet.client(who), wt, wait=wait, progress=False)


async def test_waiting_superseded_and_after_landing(make_fleet: Callable[..., Any], tmp_path: Path) -> None:
    go = tmp_path / "go"
    fleet: Fleet = await make_fleet(f"while [ ! -e {go} ]; do sleep 0.05; done", MERGEBOT_VERIFIER_SANDBOX="none")
    sub, _ = await fleet.db.subtasks.create_subtask(actor_id=None, title="waits its turn")
    claim, wt = fleet.start("ann")
    branch = f"refs/heads/{claim.branch}"
    await fleet.db.repos.set_paused(repo="demo", paused=True, reason="holding the queue")
    commit(wt, {"a.txt": "first\n"})
    first = push(fleet, "ann", wt, wait=1)
    v = first["verdict"]
    assert first["status"] == "waiting" and v["kind"] == "queued", first
    assert (v["final"], v["branch"]) == (False, branch) and "mergebot wait" in v["next"]

    commit(wt, {"a.txt": "second\n"})
    second = push(fleet, "ann", wt, wait=1)
    v = candidate(fleet, "ann", first["id"])["verdict"]
    assert (v["kind"], v["final"], v["branch"]) == ("superseded", True, branch), v
    assert "follows your newest push" in v["next"]

    await fleet.db.repos.set_paused(repo="demo", paused=False, reason=None)

    async def verifying() -> bool:
        return bool(candidate(fleet, "ann", second["id"])["status"] == "verifying")

    await until(verifying, timeout=30)
    v = candidate(fleet, "ann", second["id"])["verdict"]
    assert (v["kind"], v["final"], v["branch"]) == ("verifying", False, branch) and "mergebot wait" in v["next"]
    go.touch()
    landed = agent.submit.follow(fleet.client("ann"), sub.id, 1, second["sha"], second["id"], wait=60)
    assert landed["verdict"]["kind"] == "landed" and landed["verdict"]["branch"] is None

    commit(wt, {"a.txt": "after it landed\n"})
    late = push(fleet, "ann", wt)
    v = late["verdict"]
    assert late["status"] == "refused" and (v["kind"], v["final"], v["branch"]) == ("not_running", True, None), late
    assert f"subtask {sub.id} is landed at claim version 1" in v["next"] and "claim other work" in v["next"]


@pytest.mark.bot_env(MERGEBOT_CRASH_AT="after_intent")  # the bot dies at that step of its landing
async def test_a_push_while_the_last_one_is_landing(fleet: Fleet, e2e_db_url: str) -> None:
    """The bot dies between writing its landing intent and moving main, and comes back while another process
    leads the repository (so nothing reconciles it yet): the candidate is ``landing``, and a new push of the
    subtask is refused until that landing is settled."""
    sub, _ = await fleet.db.subtasks.create_subtask(actor_id=None, title="lands slowly")
    claim, wt = fleet.start("ann")
    branch = f"refs/heads/{claim.branch}"
    commit(wt, {"f.txt": "one\n"})
    git(["push", "-q", "origin", f"HEAD:{branch}"], wt)
    assert fleet.bot.wait_exit(60) == -9
    other_leader = SessionLocks(e2e_db_url)
    assert await other_leader.try_queue_lock("demo")
    try:
        fleet.bot.start()
        [row] = await fleet.db.landing.candidates(subtask_id=sub.id)
        v = candidate(fleet, "ann", row["id"])["verdict"]
        assert (v["kind"], v["final"], v["branch"]) == ("landing", False, branch) and "mergebot wait" in v["next"]
        commit(wt, {"f.txt": "two\n"})
        refused = push(fleet, "ann", wt)
        v = refused["verdict"]
        assert (v["kind"], v["final"], v["branch"]) == ("landing_now", True, branch), refused
        assert f"mergebot wait {sub.id}" in v["next"]
    finally:
        await other_leader.close()

    async def landed() -> bool:
        return (await fleet.db.subtasks.get_subtask(sub.id)).status == "landed"

    await until(landed, timeout=60)  # the bot leads now: it reconciles (rolls the intent back) and lands it


@pytest.mark.bot_env(MERGEBOT_CRASH_AT="after_cas")  # the bot dies at that step of its landing
async def test_a_cancel_under_a_landing_the_bot_did_not_record_is_refused_and_the_landing_recorded(
        fleet: Fleet) -> None:
    """main moved, then the bot died before recording the landing: a lead's cancel meanwhile is refused (the
    candidate is being landed: ``being_landed``, naming it and what to do), and the restarted bot's reconciler records
    the landing main already holds. Before the protocol model's cancel finding the cancel went through and the
    reconciler had to cancel a candidate whose commit was on main (a ``landed_without_claim`` finding)."""
    sub, _ = await fleet.db.subtasks.create_subtask(actor_id=None, title="cancelled under a landing")
    claim, wt = fleet.start("ann")
    commit(wt, {"f.txt": "one\n"})
    git(["push", "-q", "origin", f"HEAD:refs/heads/{claim.branch}"], wt)
    assert fleet.bot.wait_exit(60) == -9
    lead = await fleet.db.agents.agent_by_name("lead")
    [row] = await fleet.db.landing.candidates(subtask_id=sub.id)
    with pytest.raises(BeingLanded) as refused:
        await fleet.db.subtasks.cancel(actor_id=lead.id, subtask_id=sub.id, reason="not needed after all")
    assert f"candidate {row['id']} is being landed" in str(refused.value), refused.value
    assert f"mergebot wait {sub.id}" in str(refused.value)
    fleet.bot.start()

    async def landed() -> bool:
        return (await fleet.db.subtasks.get_subtask(sub.id)).status == "landed"

    await until(landed, timeout=60)
    v = candidate(fleet, "ann", row["id"])["verdict"]
    assert (v["kind"], v["final"]) == ("landed", True), v

    # a candidate taken out of the queue by its owner (a pull request's `@mergebot cancel`) is told it was cancelled
    await fleet.db.subtasks.create_subtask(actor_id=None, title="taken out while queued")
    await fleet.db.repos.set_paused(repo="demo", paused=True, reason="holding the queue")
    _, wt = fleet.start("ann", "ann-again")
    commit(wt, {"g.txt": "two\n"})
    queued = push(fleet, "ann", wt, wait=1)
    ann = await fleet.db.agents.agent_by_name("ann")
    assert await fleet.db.forge.withdraw(candidate_id=queued["id"], reason="taken out", actor_id=ann.id)
    v = candidate(fleet, "ann", queued["id"])["verdict"]
    assert (v["kind"], v["final"], v["message"]) == ("cancelled", True, "taken out"), v
    assert v["next"] == f"`mergebot show {v['subtask_id']}`, then claim other work"


HOLD_HOOK = """#!/bin/sh
# Test hook: hold a subtask push after git moved its ref and before post-receive, while {hold} exists.
input=$(cat)
[ "$1" = committed ] || exit 0
case "$input" in *refs/heads/subtasks/*) ;; *) exit 0 ;; esac
[ -e {hold} ] || exit 0
touch {held}
while [ -e {hold} ]; do sleep 0.05; done
"""


async def test_a_claim_that_moves_during_the_push_is_refused_after_git_took_it(fleet: Fleet, tmp_path: Path) -> None:
    sub, _ = await fleet.db.subtasks.create_subtask(actor_id=None, title="released mid-push")
    claim, wt = fleet.start("ann")
    hold, held = tmp_path / "hold", tmp_path / "held"
    hook = fleet.bot.data_dir / "repos" / "demo.git" / "hooks" / "reference-transaction"
    hook.write_text(HOLD_HOOK.format(hold=hold, held=held))
    hook.chmod(0o755)
    hold.touch()
    sha = commit(wt, {"f.txt": "taken, never queued\n"})
    answer: dict[str, Any] = {}
    pushing = threading.Thread(target=lambda: answer.update(push(fleet, "ann", wt, wait=30)))
    pushing.start()
    deadline = time.monotonic() + 30
    while not held.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert held.exists(), "the push never reached its ref update"
    fleet.client("ann").post(f"/api/v1/subtasks/{sub.id}/release", {"claim_version": claim.claim_version})
    hold.unlink()
    pushing.join(60)
    v = answer["verdict"]
    assert answer["status"] == "refused" and (v["kind"], v["final"], v["branch"]) == ("claim_superseded", True,
                                                                                        None), answer
    assert "--carry" in v["next"] and v["sha"] == sha
    refusals = [e for e in await fleet.db.subtasks.events(subtask_id=sub.id) if e["kind"] == "push_refused"]
    assert [(e["detail"]["code"], e["detail"]["stage"]) for e in refusals] == [("claim_superseded", "post-receive")]
    assert await fleet.db.landing.candidates(subtask_id=sub.id) == []


async def test_a_check_past_its_time_limit(make_fleet: Callable[..., Any]) -> None:
    fleet: Fleet = await make_fleet("if [ -e slow.txt ]; then sleep 60; fi", repo={"verifier_timeout_s": 2},
                                    MERGEBOT_RETRY_FAILED_CHECKS="0")
    await fleet.db.subtasks.create_subtask(actor_id=None, title="hangs")
    claim, wt = fleet.start("ann")
    commit(wt, {"slow.txt": "sleep\n"})
    v = push(fleet, "ann", wt)["verdict"]
    assert (v["kind"], v["final"], v["branch"]) == ("check_timeout", True, f"refs/heads/{claim.branch}"), v
    assert "finish in time" in v["next"]


@SANDBOXED
async def test_a_check_that_writes_or_holds_too_much_reaches_its_limit(make_fleet: Callable[..., Any]) -> None:
    """The repository's disk and memory limits, each reached by a candidate's own test: a verdict of its own kind,
    final, never retried (the server retries failures here, and the run count says it did not)."""
    fleet: Fleet = await make_fleet(check_command(), repo={"disk_limit_mb": 16, "memory_limit_mb": 256})
    hogs = {"disk": "def test_writes():\n    open('/tmp/big', 'wb').write(b'0' * (64 << 20))\n",
            "memory": ("import os, time\n\ndef test_holds():\n    for _ in range(4):\n        if os.fork() == 0:\n"
                       "            b = bytearray(150 << 20)\n            for i in range(0, len(b), 4096):\n"
                       "                b[i] = 1\n            time.sleep(30)\n            os._exit(0)\n"
                       "    time.sleep(30)\n")}
    got: dict[str, tuple[dict[str, Any], str, list[str]]] = {}
    for what, who in (("disk", "ann"), ("memory", "bob")):
        await fleet.db.subtasks.create_subtask(actor_id=None, title=f"too much {what}")
        claim, wt = fleet.start(who)
        commit(wt, {f"tests/test_{what}.py": hogs[what]})
        out = push(fleet, who, wt)
        runs = fleet.client(who).get("/api/v1/verify-jobs", candidate=out["id"])["jobs"]
        got[what] = (out["verdict"], f"refs/heads/{claim.branch}", [r["purpose"] for r in runs])
    v, branch, purposes = got["disk"]
    assert (v["kind"], v["final"], v["branch"]) == ("disk_limit", True, branch), v
    assert "reached its disk limit (16 MiB" in v["message"] and "write less" in v["next"], v
    assert v["sandbox"] == "bwrap" and "disk=tmpfs" in v["limits"] and "candidate" in purposes, v
    assert "retry" not in purposes, purposes  # the server retries failures, but never a limit
    v, branch, purposes = got["memory"]
    if limits.machine().has("memory"):
        assert (v["kind"], v["final"], v["branch"]) == ("memory_limit", True, branch), v
        assert "reached its memory limit (256 MiB" in v["message"] and "use less memory" in v["next"], v
        assert "memory=cgroup" in v["limits"] and "retry" not in purposes, (v, purposes)
    else:  # no resident limit here: each process alone fits its address space, so the suite passes
        assert v["kind"] == "landed", v


async def test_a_check_that_cannot_judge_is_a_verifier_error(make_fleet: Callable[..., Any]) -> None:
    # a check that rewrites a tracked file vouches for nothing: its outcome is an error, twice
    fleet: Fleet = await make_fleet("echo changed >> calc.py")
    await fleet.db.subtasks.create_subtask(actor_id=None, title="no verdict")
    claim, wt = fleet.start("ann")
    commit(wt, {"b.txt": "b\n"})
    v = push(fleet, "ann", wt)["verdict"]
    assert (v["kind"], v["final"], v["branch"]) == ("verifier_error", True, f"refs/heads/{claim.branch}"), v
    assert v["next"] == "`mergebot submit --again`" and "modified tracked files" in v["log_tail"]


async def test_flaky_then_failed_on_the_second_verification(make_fleet: Callable[..., Any], tmp_path: Path) -> None:
    """In the speculation window a failing candidate is judged apart: its retry passes (flaky), so it goes back
    to the queue to be verified again, and fails then: ``flaky_then_failed``."""
    runs = tmp_path / "runs"
    check = (f"if [ -e x.txt ]; then n=$(( $(cat {runs} 2>/dev/null || echo 0) + 1 )); echo $n > {runs}; "
             "[ $n -eq 2 ]; fi")
    fleet: Fleet = await make_fleet(check, MERGEBOT_VERIFIER_SANDBOX="none", MERGEBOT_SPECULATION_WINDOW="2")
    await fleet.db.subtasks.create_subtask(actor_id=None, title="flaky")
    claim, wt = fleet.start("ann")
    commit(wt, {"x.txt": "x\n"})
    out = push(fleet, "ann", wt, wait=120)
    v = out["verdict"]
    assert (v["kind"], v["final"], v["branch"]) == ("flaky_then_failed", True, f"refs/heads/{claim.branch}"), out
    assert "--again" in v["next"] and int(runs.read_text()) >= 3


async def test_too_large_and_a_push_git_could_not_make(make_fleet: Callable[..., Any]) -> None:
    fleet: Fleet = await make_fleet(check_command(), repo={"max_file_bytes": 1000})
    await fleet.db.subtasks.create_subtask(actor_id=None, title="big")
    claim, wt = fleet.start("ann")
    branch = f"refs/heads/{claim.branch}"
    commit(wt, {"blob.bin": "x" * 5000})
    v = push(fleet, "ann", wt)["verdict"]
    assert (v["kind"], v["final"], v["branch"], v["paths"]) == ("too_large", True, branch, ["blob.bin"]), v
    assert "amend" in v["next"]
    fleet.bot.stop()
    out = push(fleet, "ann", wt)
    v = out["verdict"]
    assert out["status"] == "refused" and (v["kind"], v["final"], v["branch"]) == ("push_failed", True, branch), out
    assert "mergebot status" in v["next"]


async def test_the_same_change_under_another_subtask_is_a_duplicate(fleet: Fleet) -> None:
    """Two agents make the same change for two subtasks: the second push is refused as a duplicate naming the
    first subtask, its owner and its landed commit. The first agent's own re-push of its change (a new commit, the
    same patch) is not a duplicate."""
    mul = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n"
    for title in ("add mul to calc", "calc needs a mul"):
        await fleet.db.subtasks.create_subtask(actor_id=None, title=title)
    ann_claim, ann_wt = fleet.start("ann")
    bob_claim, bob_wt = fleet.start("bob")
    commit(ann_wt, {"calc.py": mul}, "add mul")
    first = push(fleet, "ann", ann_wt, wait=0)
    git(["commit", "-q", "--amend", "-m", "add mul, said better"], ann_wt)  # her own change again: not a twin
    landed = push(fleet, "ann", ann_wt)
    assert landed["verdict"]["kind"] == "landed" and landed["id"] != first["id"], landed
    commit(bob_wt, {"calc.py": mul}, "bob's mul")
    out = push(fleet, "bob", bob_wt)
    v = out["verdict"]
    assert out["status"] == "refused" and (v["kind"], v["final"]) == ("duplicate", True), out
    assert v["branch"] == f"refs/heads/{bob_claim.branch}" and f"mergebot release {bob_claim.subtask_id}" in v["next"]
    assert v["twin"]["subtask_id"] == ann_claim.subtask_id and v["twin"]["owner"] == "ann", v
    assert v["twin"]["landed_sha"] == fleet.main() and fleet.main()[:12] in v["message"], v
    sub = await fleet.db.subtasks.get_subtask(bob_claim.subtask_id)
    assert sub.status == "running" and sub.candidate_sha is None  # nothing was queued


async def test_a_new_subtask_like_one_landed_lately_is_a_duplicate_naming_the_landing(fleet: Fleet) -> None:
    """An agent lands "Add a mul function to calc"; a subtask nearly like it is then answered 409 duplicate naming
    the subtask and its landed record, unless created with allow_duplicate. A landing older than the setting's 30
    days no longer counts."""
    await fleet.db.subtasks.create_subtask(actor_id=None, title="Add a mul function to calc",
                                           description="calc.py needs mul(a, b)")
    claim, wt = fleet.start("ann")
    commit(wt, {"calc.py": "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n"})
    assert push(fleet, "ann", wt)["verdict"]["kind"] == "landed"
    async with fleet.db.pool.connection() as conn:
        row = await (await conn.execute("SELECT id FROM landed WHERE subtask_id = %s", [claim.subtask_id])).fetchone()
    landed = {"id": row[0]}
    lead = fleet.client("lead")
    twin = {"title": "add mul function to calc.", "description": "calc.py needs mul(a, b)"}
    with pytest.raises(ApiError) as refused:
        lead.post("/api/v1/subtasks", twin)
    err = refused.value.body["error"]
    assert (refused.value.status, err["code"], err["field"]) == (409, "duplicate", "allow_duplicate"), err
    assert err["twins"][0]["twin"].items() >= {"subtask_id": claim.subtask_id, "status": "landed",
                                               "landed_id": landed["id"]}.items(), err
    assert f"landed record {landed['id']}" in err["message"] and "--allow-duplicate" in err["message"], err
    with pytest.raises(ApiError) as in_tree:  # a tree's node too, before anything is written
        lead.post("/api/v1/subtasks/batch", {"subtasks": [{"key": "mul", **twin}]})
    assert in_tree.value.body["error"]["twins"][0]["twin"]["landed_id"] == landed["id"]
    made = lead.post("/api/v1/subtasks", {**twin, "allow_duplicate": True})["subtask"]
    await fleet.db.subtasks.cancel(subtask_id=made["id"], actor_id=None, reason="made twice on purpose")
    async with fleet.db.pool.connection() as conn:
        await conn.execute("UPDATE landed SET landed_at = now() - interval '31 days' WHERE id = %s", [landed["id"]])
    assert lead.post("/api/v1/subtasks", twin)["created"] is True  # a month on, it is new work again


async def test_a_push_outside_its_footprint_is_flagged_or_refused(make_fleet: Callable[..., Any],
                                                                  e2e_db_url: str) -> None:
    """A change that touches paths outside its subtask's footprint lands with the paths named on its verdict (a
    warning); on a repository that refuses such changes the push is refused with kind outside_footprint."""
    fleet: Fleet = await make_fleet(check_command())
    await fleet.db.subtasks.create_subtask(actor_id=None, title="fix add", paths=["calc.py", "tests/"])
    claim, wt = fleet.start("ann")
    commit(wt, {"calc.py": "def add(a, b):\n    return b + a\n", "notes.txt": "ann was here\n"})
    out = push(fleet, "ann", wt)
    v = out["verdict"]
    assert (v["kind"], v["outside_footprint"]) == ("landed", ["notes.txt"]), out
    assert any("outside its footprint (notes.txt)" in n for n in out["notices"]), out  # said at push time too
    assert candidate(fleet, "ann", out["id"])["verdict"]["outside_footprint"] == ["notes.txt"]
    async with await psycopg.AsyncConnection.connect(e2e_db_url, autocommit=True) as conn:  # the operator's setting
        await conn.execute("UPDATE repos SET footprint_refuse = true WHERE name = 'demo'")
    await fleet.db.subtasks.create_subtask(actor_id=None, title="fix add again", paths=["calc.py"])
    claim, wt = fleet.start("bob")
    commit(wt, {"calc.py": "def add(a, b):\n    return a + b\n", "notes.txt": "bob too\n"})
    out = push(fleet, "bob", wt)
    v = out["verdict"]
    assert out["status"] == "refused", out
    assert (v["kind"], v["final"], v["paths"]) == ("outside_footprint", True, ["notes.txt"]), out
    assert v["branch"] == f"refs/heads/{claim.branch}" and "--touch" in v["next"]


def test_every_kind_is_produced_by_some_test() -> None:
    """The kinds the verdict tests produce and check as records, read from their assertions: all of KINDS."""
    here = Path(__file__).parent
    text = "".join((here / name).read_text() for name in ("test_verdicts.py", "test_agents.py", "test_judged.py",
                                                           "test_reward_hacks.py", "test_unstorable.py",
                                                           "test_approvals.py"))
    checked = set(re.findall(r'\("(\w+)", (?:\[|True|False)', text)) | set(re.findall(r'\["kind"\] == "(\w+)"', text)) \
        | set(re.findall(r'\("(?:rejected|refused|landed)", "(\w+)"', text))
    missing = sorted(set(KINDS) - checked)
    assert missing == [], f"no test produces these verdict kinds: {missing}"
