"""The trace checker (``mergebot.protocol.trace``, ``replay``): a real run's events table, read back after real
pushes landed (and one was rejected) through ``mergebot serve``, is a behaviour the model allows; the same events
with one step moved out of order, or one left out, are rejected at that step. The faults drill and the fleet bench
run it on their own runs (``tests/drills/test_faults.py``, ``bench/fleet``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mergebot import agent
from mergebot.protocol import trace
from mergebot.protocol.model import Model
from mergebot.protocol.replay import replay
from mergebot.protocol.trace import Move, Tracer
from tests.support.bot import Fleet, commit, git, until

# An operator's cancel from every status it may cancel (owner dropped, claim version kept), a lease that runs out at
# a subtask's last attempt (failed), and a retry of a failed one (ready, or blocked while a dependency is reverted)
OPERATORS = {Move(before, "cancelled", 0, "dropped" if before in ("running", "submitted") else "none")
             for before in ("blocked", "ready", "running", "submitted", "failed")} | {
    Move("running", "failed", 0, "dropped"), Move("failed", "ready", 0, "none"), Move("failed", "blocked", 0, "none")}
BROKEN = {"calc.py": "def add(a, b):\n    return a - b\n"}
FIXED = {"calc.py": "def add(a, b):\n    return a + b\n", "notes.txt": "fixed\n"}


def test_the_moves_are_the_models_own() -> None:
    """Read from the model's reachable states, not written down: a claim takes the subtask with a new version, a
    push keeps owner and version (a second push while the first waits supersedes it), a rejection gives the claim
    back to its owner, a lease that runs out drops it, a landing drops it too, a release needs nobody, and a
    revert's landing sends a landed subtask back to the owner that landed it at a new claim version; nothing else
    (a subtask lands only from submitted, and a landed one moves again only when its landing is reverted). The
    queue holds a reverted subtask's dependents without changing their rows: no move of its own."""
    found = trace.moves()
    assert set(found) == {
        Move("ready", "running", 1, "taken"), Move("running", "submitted", 0, "kept"),
        Move("submitted", "submitted", 0, "kept"),
        Move("submitted", "running", 0, "kept"), Move("running", "ready", 0, "dropped"),
        Move("submitted", "landed", 0, "dropped"), Move("blocked", "ready", 0, "none"),
        Move("landed", "running", 1, "taken"), *OPERATORS}
    assert "claims" in found[Move("ready", "running", 1, "taken")]
    assert "goes back to agent" in found[Move("landed", "running", 1, "taken")]
    plain = trace.explore(Model(trace.TRACE))
    assert Move("landed", "running", 1, "taken") not in plain  # the red bound's alone

    class NoExpiry(Model):  # a model without the recovery loop's expiry has no such move
        def expire(self, s: Any, t: int) -> Any:
            return iter(())

    assert Move("running", "ready", 0, "dropped") not in trace.explore(NoExpiry(trace.TRACE))
    # the operators' steps are read off the model too: none at the default bound, where no operator acts
    assert not OPERATORS & set(plain)
    assert "an operator cancels" in found[Move("submitted", "cancelled", 0, "dropped")]
    assert "retries" in found[Move("failed", "blocked", 0, "none")]  # its dependency's landing was reverted
    assert "last attempt" in found[Move("running", "failed", 0, "dropped")]


async def run_two(fleet: Fleet) -> tuple[int, int]:
    """Subtask A (ann: a broken push, rejected, then fixed and landed) and B, which depends on A (bob, landed)."""
    db = fleet.db
    a, _ = await db.subtasks.create_subtask(actor_id=None, title="fix add")
    b, _ = await db.subtasks.create_subtask(actor_id=None, title="use add", depends_on=[a.id])
    claim, wt = fleet.start("ann")
    assert claim.subtask_id == a.id
    commit(wt, BROKEN)
    assert agent.push(fleet.client("ann"), wt, wait=90, progress=False)["status"] == "rejected"
    commit(wt, FIXED)
    assert agent.push(fleet.client("ann"), wt, wait=90, progress=False)["status"] == "landed"
    claim, wt = fleet.start("bob")
    assert claim.subtask_id == b.id
    commit(wt, {"use.py": "from calc import add\n"})
    assert agent.push(fleet.client("bob"), wt, wait=90, progress=False)["status"] == "landed"
    return a.id, b.id


async def test_a_real_run_is_accepted_and_an_edited_one_rejected_at_the_edit(fleet: Fleet, e2e_db_url: str,
                                                                            tmp_path: Path) -> None:
    a, b = await run_two(fleet)
    fleet.bot.stop()  # a finished run
    verdict = await replay(fleet.db)
    assert verdict.accepted, verdict
    cli = subprocess.run([sys.executable, "-m", "mergebot.protocol", "--trace"], capture_output=True, text=True,
                         env={**os.environ, "MERGEBOT_DATABASE_URL": e2e_db_url,
                              "MERGEBOT_DATA_DIR": str(tmp_path / "cli")}, check=False)
    assert cli.returncode == 0 and cli.stdout.strip() == str(verdict), (cli.stdout, cli.stderr[-2000:])
    assert (verdict.subtasks, verdict.landed) == (2, 2)
    assert verdict.used[Move("submitted", "running", 0, "kept")] == 1  # the rejection kept ann's claim
    assert verdict.used[Move("blocked", "ready", 0, "none")] == 1
    events = [e async for e in fleet.db.trace.events()]
    deps = await fleet.db.trace.deps()
    assert deps == {b: [a]}

    def status(sid: int, to: str) -> int:
        return next(i for i, e in enumerate(events) if e["kind"] == "status" and e["subtask_id"] == sid
                    and e["to_status"] == to)

    # B's release moved before A's landing: rejected at the release
    released, landed = status(b, "ready"), status(a, "landed")
    early = [*events[:landed], events[released], *events[landed:released], *events[released + 1:]]
    got = trace.trace(early, deps)
    assert not got.accepted and got.rejected is not None
    assert got.rejected.event == events[released]["id"] and "before subtask" in got.rejected.why

    # A's landing moved before its second push: it leaves "running", which no step lands from
    pushes = [i for i, e in enumerate(events) if e["kind"] == "status" and e["subtask_id"] == a
              and e["to_status"] == "submitted"]
    swapped = [*events[:pushes[1]], events[landed], *events[pushes[1]:landed], *events[landed + 1:]]
    got = trace.trace(swapped, deps)
    assert got.rejected is not None and got.rejected.event == events[landed]["id"]

    # the second push (and so the landing) names the rejected commit instead: its agent was told otherwise
    rejected_sha = next(e["detail"]["sha"] for e in events if e["kind"] == "candidate_rejected")
    landed_sha = events[landed]["detail"]["sha"]
    lied = [{**e, "detail": {**e["detail"], "sha": rejected_sha}} if e["detail"].get("sha") == landed_sha else e
            for e in events]
    got = trace.trace(lied, deps)
    assert got.rejected is not None and got.rejected.event == events[landed]["id"]
    assert "told was rejected" in got.rejected.why

    # a push accepted under a claim version the subtask no longer holds
    accepted = next(i for i, e in enumerate(events) if e["kind"] == "push_accepted" and e["subtask_id"] == b)
    stale = [{**e, "claim_version": e["claim_version"] - 1} if i == accepted else e for i, e in enumerate(events)]
    got = trace.trace(stale, deps)
    assert got.rejected is not None and got.rejected.event == events[accepted]["id"]

    # a pending intent at the end
    assert trace.trace(events, deps, pending_intents=[7]).rejected == trace.Rejected(0, (
        "landing intent 7 is still pending: every intent is finished or rolled back after the reconciler runs"))


def test_a_claim_without_a_new_version_is_no_step_of_the_model() -> None:
    tracer = Tracer({})
    assert tracer.feed({"id": 1, "kind": "created", "subtask_id": 1, "from_status": None, "to_status": "ready",
                        "claim_version": 0, "actor_id": None, "detail": {}}) is None
    got = tracer.feed({"id": 2, "kind": "status", "subtask_id": 1, "from_status": "ready", "to_status": "running",
                       "claim_version": 0, "actor_id": 5, "detail": {"owner": 5}})
    assert got is not None and got.event == 2 and "no step of the model" in got.why


def status_event(eid: int, sid: int, before: str | None, after: str, version: int, owner: int | None = None,
                 sha: str | None = None, kind: str = "status", **detail: Any) -> dict[str, Any]:
    said = {k: v for k, v in {"owner": owner, "sha": sha, **detail}.items() if v is not None}
    return {"id": eid, "kind": kind, "subtask_id": sid, "from_status": before, "to_status": after,
            "claim_version": version, "actor_id": None, "detail": said}


@pytest.mark.bot_env(MERGEBOT_LEASE_SECONDS="4", MERGEBOT_RECOVERY_GRACE_SECONDS="0")
async def test_operators_steps_in_a_real_run_are_the_models_and_edited_ones_are_rejected(fleet: Fleet) -> None:
    """A lead puts ann in a group; a subtask of one attempt fails when ann's claim lapses, the lead retries it and it
    lands; bob's claim is cancelled under him (his push is then refused) with its dependent: the run is accepted.
    The same events edited (a cancelled subtask landing, a push accepted after the cancel, a failed subtask claimed
    without a retry, a landed one cancelled) are rejected at the edit."""
    db, lead = fleet.db, fleet.client("lead")
    lead.put("/api/v1/assignments/ann", {"group": "crew"})  # a group: it changes no subtask's row
    pill, _ = await db.subtasks.create_subtask(actor_id=None, title="poison pill", max_attempts=1)
    claim, _ = fleet.start("ann", "ann-1")  # no keeper: the lease lapses at its one attempt
    assert claim.subtask_id == pill.id

    async def status(sid: int, want: str) -> bool:
        return (await db.subtasks.get_subtask(sid)).status == want

    await until(lambda: status(pill.id, "failed"), timeout=30)
    lead.post(f"/api/v1/subtasks/{pill.id}/retry", {"reason": "once more"})
    gone, _ = await db.subtasks.create_subtask(actor_id=None, title="not needed", priority=1)
    after, _ = await db.subtasks.create_subtask(actor_id=None, title="built on it", depends_on=[gone.id])
    claim, bob_wt = fleet.start("bob")
    assert claim.subtask_id == gone.id
    for sid in (gone.id, after.id):
        lead.post(f"/api/v1/subtasks/{sid}/cancel", {"reason": "not needed"})
    commit(bob_wt, {"gone.txt": "late\n"})
    refused = git(["push", "-q", "origin", f"HEAD:refs/heads/{claim.branch}"], bob_wt, check=False)
    assert refused.returncode != 0  # a push under a cancelled claim is refused
    claim, wt = fleet.start("ann", "ann-2")
    assert claim.subtask_id == pill.id
    commit(wt, FIXED)
    assert agent.push(fleet.client("ann"), wt, wait=90, progress=False)["status"] == "landed"
    fleet.bot.stop()

    verdict = await replay(db)
    assert verdict.accepted, verdict
    assert (verdict.subtasks, verdict.landed) == (3, 1)
    for move in (Move("running", "failed", 0, "dropped"), Move("failed", "ready", 0, "none"),
                 Move("running", "cancelled", 0, "dropped"), Move("blocked", "cancelled", 0, "none"),
                 Move("submitted", "landed", 0, "dropped")):
        assert verdict.used.get(move) == 1, (move, verdict)
    events = [e async for e in db.trace.events()]
    deps = await db.trace.deps()
    assert any(e["kind"] == "assigned" for e in events) and verdict.steps < verdict.events

    def at(sid: int, before: str, to: str) -> int:
        return next(i for i, e in enumerate(events) if e["kind"] == "status" and e["subtask_id"] == sid
                    and (e["from_status"], e["to_status"]) == (before, to))

    def rejected_at(edited: list[dict[str, Any]], event: dict[str, Any], why: str) -> None:
        got = trace.trace(edited, deps)
        assert got.rejected is not None and got.rejected.event == event["id"], got
        assert why in got.rejected.why, got.rejected

    new = events[-1]["id"] + 1  # an id no event has
    # the pill cancelled while its push waits, and then landing: no step lands a cancelled subtask
    landed = at(pill.id, "submitted", "landed")
    land = {**events[landed], "from_status": "cancelled"}
    cancel = status_event(new, pill.id, "submitted", "cancelled", events[landed]["claim_version"])
    rejected_at([*events[:landed], cancel, land, *events[landed + 1:]], land, "no step of the model")
    # a push accepted for bob's cancelled claim
    cancelled = at(gone.id, "running", "cancelled")
    push = status_event(new, gone.id, None, "", 1, kind="push_accepted", sha="a" * 40)
    rejected_at([*events[:cancelled + 1], push, *events[cancelled + 1:]], push, "only the claim it holds may push")
    # the failed pill claimed again without the lead's retry
    retried = at(pill.id, "failed", "ready")
    claimed = next(i for i, e in enumerate(events) if i > retried and e["kind"] == "status"
                   and e["subtask_id"] == pill.id and e["to_status"] == "running")
    reclaim = {**events[claimed], "from_status": "failed"}
    rejected_at([*events[:retried], *events[retried + 1:claimed], reclaim, *events[claimed + 1:]], reclaim,
                "no step of the model")
    # the landed pill cancelled: a landed subtask stays landed
    late = status_event(new, pill.id, "landed", "cancelled", events[landed]["claim_version"])
    rejected_at([*events, late], late, "no step of the model")


def test_the_bots_revert_is_the_models_revert_candidate() -> None:
    """The bot's revert subtask, created submitted, is the model's revert candidate once ``revert_queued`` names it:
    it lands with the commit it was queued with while the landing it reverts stands, and the culprit runs again for
    the owner that landed it. A subtask created submitted that no revert names, a culprit running again with no
    revert landed, or a revert landing another commit is rejected."""
    sha, rsha = "a" * 40, "b" * 40
    story = [status_event(1, 1, None, "ready", 0, kind="created"),
             status_event(2, 1, "ready", "running", 1, owner=7),
             status_event(3, 1, "running", "submitted", 1, owner=7, sha=sha),
             status_event(4, 1, "submitted", "landed", 1, sha=sha, previous_owner=7),
             status_event(5, 2, None, "submitted", 1, kind="created"),
             status_event(6, 1, None, "", 1, kind="revert_queued", revert_subtask=2, sha=rsha, landed=1),
             status_event(7, 2, "submitted", "landed", 1, sha=rsha, previous_owner=1),
             status_event(8, 1, "landed", "running", 2, owner=7, previous_owner=7)]
    got = trace.trace(story, {})
    assert got.accepted and (got.landed, got.reverts) == (2, 1), got
    assert got.used[Move("landed", "running", 1, "taken")] == 1

    def rejected(events: list[dict[str, Any]], event: int, why: str) -> None:
        verdict = trace.trace(events, {})
        assert verdict.rejected is not None and verdict.rejected.event == event and why in verdict.rejected.why, \
            verdict

    rejected(story[:5], 5, "no revert was queued for it")  # created submitted, and nothing names it
    rejected([*story[:4], story[7]], 8, "no revert of its landing landed")  # the culprit runs again unreverted
    rejected([*story[:6], {**story[6], "detail": {"sha": sha}}, story[7]], 7, "it was queued with")
    rejected([*story[:7], {**story[7], "detail": {"owner": 9}}], 8, "sent back to agent 9")
    rejected(story[:7], 0, "never ran again")


def test_a_retry_ready_needs_what_it_depends_on_landed() -> None:
    events = [status_event(1, 1, None, "ready", 0, kind="created"),
              status_event(2, 2, None, "ready", 0, kind="created")]
    tracer = Tracer({})
    for e in events:
        assert tracer.feed(e) is None
    for e in (status_event(3, 2, "ready", "running", 1, owner=5), status_event(4, 2, "running", "failed", 1)):
        assert tracer.feed(e) is None
    tracer.deps = {2: [1]}  # as if it depended on subtask 1, which has not landed
    got = tracer.feed(status_event(5, 2, "failed", "ready", 1))
    assert got is not None and got.event == 5 and "retried ready before subtask 1" in got.why
