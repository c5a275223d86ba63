"""``mergebot drill`` against a running server: a push stream from concurrent agents and the lease race over the
wire, then the invariant check; and ``mergebot drill --check-only`` (any role's token) failing when main was moved
behind the bot's back.

The lease race: the old owner's push is held on a slow link (a proxy in front of the bot) until its lease has
lapsed and the subtask was handed to a new owner. The held push and every later push of the old owner (to its own
branch and to the new owner's) are refused and on record, its heartbeat is refused, the new owner's push lands,
and nothing of the old owner's reaches main (``Drill.lease_race`` checks main's history and tree)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pygit2

from mergebot.auth import Role
from tests.drills.conftest import RigFactory


def mergebot(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mergebot", *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "MERGEBOT_TOKEN": "", "MERGEBOT_URL": ""})


async def test_mergebot_drill_with_lease_race_then_check_only(rig_factory: RigFactory) -> None:
    rig = await rig_factory(MERGEBOT_LEASE_SECONDS="1.5", MERGEBOT_RECOVERY_GRACE_SECONDS="0",
                            MERGEBOT_RECOVERY_INTERVAL_SECONDS="0.2")
    out = mergebot("drill", "--url", rig.bot.url, "--token", rig.admin, "--repo", "demo", "--agents", "2",
                   "--subtasks", "4", "--seed", "7", "--json")
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    report = json.loads(out.stdout)
    assert report["violations"] == []
    assert report["stream"]["landed"] == 4 and report["stream"]["errors"] == []
    assert report["stream"]["accepted"] >= 4
    assert report["storm"] == {"skipped": "not a forge repository"}
    assert report["cancelled_leftovers"] == []

    race = report["lease_race"]
    assert race["problems"] == [] and race["verdict"] == "landed"
    assert (race["old_version"], race["new_version"]) == (1, 2)
    assert race["held_push"]["outcome"] == "refused"
    assert "claim version 2" in race["held_push"]["message"], race["held_push"]["message"]
    assert race["heartbeat_after_expiry"] == "claim_superseded"
    assert race["late_pushes"] == ["refused", "refused"]
    cands = await rig.db.landing.candidates(subtask_id=race["subtask"])
    assert [(c["claim_version"], c["status"]) for c in cands] == [(2, "landed")]  # nothing queued for version 1
    landed = await rig.db.landing.landed(subtask_id=race["subtask"])
    assert [(r.claim_version, r.owner) for r in landed] == [(2, f"drill-{report['run_id']}-4")]
    events = await rig.db.subtasks.events(subtask_id=race["subtask"], limit=1000)
    refused = [e["actor"] for e in events if e["kind"] == "push_refused"]
    assert refused == [f"drill-{report['run_id']}-3"] * 3  # the held push and both late ones, each on record
    assert len(await rig.db.landing.landed(repo="demo", limit=100)) == 5  # four from the stream, one from the race

    _, reviewer = await rig.db.agents.add_agent(name="rita", role=Role.REVIEWER)
    clean = mergebot("drill", "--check-only", "--settled", "--server", rig.bot.url, "--token", reviewer,
                     "--repo", "demo")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "0 violation(s) on demo" in clean.stdout

    # Someone moves main behind the bot's back: the check names the commit and exits non-zero.
    bare = pygit2.Repository(str(rig.data / "repos" / "demo.git"))
    head = bare.references["refs/heads/main"]
    parent = bare[head.target].peel(pygit2.Commit)
    sig = pygit2.Signature("Intruder", "intruder@example.com")
    sneaky = bare.create_commit(None, sig, sig, "not through mergebot", parent.tree_id, [parent.id])
    head.set_target(sneaky, "moved by hand")
    bad = mergebot("drill", "--check-only", "--server", rig.bot.url, "--token", reviewer, "--repo", "demo",
                   "--attempts", "2", "--json")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    found = json.loads(bad.stdout)["violations"]
    assert [(v["kind"], v["subject"]) for v in found] == [("unexplained_commit", str(sneaky))]
