"""SIGKILL ``mergebot serve`` at random points while several agents push at once, restart it each time, and check
the books with ``mergebot.drill.invariants.check``: every commit on main after the root is explained by exactly one
landed row, every landed row's commit is on main, every subtask is in a legal state, and every push git reported
accepted ended landed or refused with a recorded reason. (tests/test_crash.py kills at each named landing step
instead.)
"""

from __future__ import annotations

import random
import time

import pytest

from mergebot.client import Client
from mergebot.drill.invariants import Push
from mergebot.drill.wire import _git, commit_file
from tests.drills.conftest import RigFactory, drill_seed


@pytest.mark.parametrize(("subtasks", "min_kills"), [
    (20, 3),
    pytest.param(150, 25, marks=pytest.mark.long_drill),  # a soak: a few minutes
])
async def test_sigkill_at_random_points_under_a_push_stream(rig_factory: RigFactory, subtasks: int,
                                                            min_kills: int) -> None:
    seed = drill_seed()
    rng = random.Random(seed)
    rig = await rig_factory()
    drill = rig.drill(seed)
    until = time.monotonic() + 120 + subtasks * 2
    agents = drill.agents(4, until=until)
    ids = drill.subtasks(subtasks, "crash stream", until=until)
    result, threads = drill.stream(agents, until=until)
    in_flight_at_kill = []
    while any(t.is_alive() for t in threads) and rig.kills < min_kills + 1:
        time.sleep(rng.uniform(0.2, 0.8))
        cands = await rig.db.landing.candidates(repo="demo", limit=1000)
        in_flight_at_kill.append(sorted(c["status"] for c in cands if c["status"] in ("queued", "verifying",
                                                                                        "landing")))
        rig.sigkill()
        rig.bot.start()
    for t in threads:
        t.join(max(1.0, until - time.monotonic()))
    print(f"kills: {rig.kills} in {time.monotonic() - until + 120 + subtasks * 2:.0f} s; candidates in flight at "
          f"each kill: {in_flight_at_kill}")
    assert rig.kills >= min_kills, "the stream finished before the drill could kill the bot often enough"
    assert any(in_flight_at_kill), "no kill hit a candidate in flight"
    assert result.errors == []
    await rig.wait_settled(ids)

    # A push that git finished after the restarted bot reconciled (its pre-receive step was answered just before
    # the kill): the branch moved, and its post-receive step reached no process that knew the push. The idle
    # queue's sweep queues it; without the sweep it would wait for the next restart.
    late = drill.subtasks(1, "late ref", until=until)[0]
    owner = agents[0]
    got = Client(rig.bot.url, owner.token).post("/api/v1/subtasks/claim")
    assert got["handle"]["id"] == late
    version = got["handle"]["claim_version"]
    wt = drill.worktree(owner, until=until)
    _git(["fetch", "-q", "origin", "+refs/heads/main:refs/remotes/origin/main"], wt)
    _git(["checkout", "-q", "-B", f"subtasks/{late}/v{version}", "origin/main"], wt)
    sha = commit_file(wt, f"drill/{drill.run_id}/late.txt", "late\n", "drill: a push no post-receive announced")
    _git(["--git-dir", str(rig.data / "repos" / "demo.git"), "fetch", "-q", str(wt),
          f"HEAD:refs/heads/subtasks/{late}/v{version}"], wt)
    result.pushes.append(Push(owner.name, late, version, sha, "accepted"))
    await rig.wait_settled([*ids, late], timeout=40)
    ids.append(late)

    accepted = [p for p in result.pushes if p.accepted]
    assert {p.subtask_id for p in accepted} == set(ids)
    violations = rig.violations(result.pushes)
    for v in violations:  # what the drill saw of each push that broke a rule
        sid = int(v.subject.split("subtask ")[1].split()[0]) if "subtask " in v.subject else None
        print(v, [(p.sha[:8], p.outcome, p.message[-300:]) for p in result.pushes if p.subtask_id == sid],
              await rig.db.landing.candidates(subtask_id=sid) if sid else "")
    assert violations == []
    landed = await rig.db.landing.landed(repo="demo", limit=1000)
    assert sorted(r.subtask_id for r in landed) == sorted(ids)  # one landing per subtask, each once
    assert await rig.db.landing.pending_intents("demo") == []
    kinds = {f["kind"] for f in await rig.db.landing.findings(repo="demo")}
    assert not kinds & {"unexplained_commits", "landed_not_on_main", "landed_without_claim"}, kinds
