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

from mergebot import agent
from mergebot.protocol import trace
from mergebot.protocol.model import Model
from mergebot.protocol.replay import replay
from mergebot.protocol.trace import Move, Tracer
from tests.support.bot import Fleet, commit

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
        Move("landed", "running", 1, "taken")}
    assert "claims" in found[Move("ready", "running", 1, "taken")]
    assert "goes back to agent" in found[Move("landed", "running", 1, "taken")]
    assert Move("landed", "running", 1, "taken") not in trace.explore(Model(trace.TRACE))  # the red bound's alone

    class NoExpiry(Model):  # a model without the recovery loop's expiry has no such move
        def expire(self, s: Any, t: int) -> Any:
            return iter(())

    assert Move("running", "ready", 0, "dropped") not in trace.explore(NoExpiry(trace.TRACE))


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
