"""Idempotent waiting and re-queueing (issue 45): a wait keyed on (subtask, head commit) answers with that exact
commit's verdict, and re-queueing a commit that is queued or running is a no-op, so twenty babysitters re-queueing
the same head cause one verifier run. Real server, real git pushes, real workers; the check is held on a gate file
the test opens, so the runs are in flight exactly as long as the test needs, with no sleeps.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mergebot import agent
from mergebot.client import ApiError
from tests.support.bot import Fleet, commit, until

# The check: a change holding slow.txt waits until the gate named by its text is opened; anything else passes.
GATED = "test ! -e slow.txt || while [ ! -e {gates}/go-$(cat slow.txt) ]; do sleep 0.05; done"
BABYSITTERS = 20
ROUNDS = 3


def cli(fleet: Fleet, who: str, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "MERGEBOT_URL": fleet.bot.url, "MERGEBOT_TOKEN": fleet.tokens[who]}
    return subprocess.Popen([sys.executable, "-m", "mergebot", *args], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


async def test_twenty_babysitters_requeueing_one_head_cause_one_run_and_waits_answer_that_commit(
        make_fleet: Callable[..., Any], tmp_path: Path) -> None:
    gates = tmp_path / "gates"
    gates.mkdir()
    fleet: Fleet = await make_fleet(GATED.format(gates=gates), MERGEBOT_VERIFIER_SANDBOX="none")
    sub, _ = await fleet.db.subtasks.create_subtask(actor_id=None, title="babysat")
    _, wt = fleet.start("ann")
    base = fleet.main()
    sha = commit(wt, {"slow.txt": "a\n"})
    pushed = agent.push(fleet.client("ann"), wt, wait=0, progress=False)
    cid = pushed["id"]
    assert pushed["status"] == "waiting" and pushed["sha"] == sha, pushed

    # the long poll keyed on (subtask, this commit), held by the server while the check runs
    polled: dict[str, Any] = {}
    poll = threading.Thread(target=lambda: polled.update(fleet.client("ann").get(
        f"/api/v1/subtasks/{sub.id}/verdict", sha=sha, wait=60)))
    poll.start()

    def status() -> str:
        return str(fleet.client("ann").get(f"/api/v1/candidates/{cid}")["status"])

    await until(lambda: status() == "verifying", timeout=60)

    # twenty babysitters, each re-queueing the same head every round: the owner's `submit --again` as the command
    # line does it, the same through the API, and a lead's retry of the subtask
    answers: list[tuple[str, Any]] = []
    lock = threading.Lock()
    start = threading.Barrier(BABYSITTERS)

    def babysit(i: int) -> None:
        for _ in range(ROUNDS):
            start.wait(30)  # every round, all twenty at once
            try:
                if i % 3 == 0:
                    got: Any = agent.push(fleet.client("ann"), wt, wait=0, progress=False, again=True)
                    how = "cli"
                elif i % 3 == 1:
                    got = fleet.client("ann").post(f"/api/v1/subtasks/{sub.id}/submit-again", {"claim_version": 1})
                    how = "api"
                else:
                    got = fleet.client("root").post(f"/api/v1/subtasks/{sub.id}/retry", {"reason": "babysitting"})
                    how = "lead"
            except ApiError as e:
                got, how = e, "refused"
            with lock:
                answers.append((how, got))

    sitters = [threading.Thread(target=babysit, args=(i,)) for i in range(BABYSITTERS)]
    for t in sitters:
        t.start()
    for t in sitters:
        t.join(120)
    assert len(answers) == BABYSITTERS * ROUNDS and not [a for how, a in answers if how == "refused"], answers
    for how, got in answers:
        if how == "cli":  # the push's notice says it was already there and how to wait for it
            assert got["id"] == cid and got["status"] == "waiting", got
            assert any(f"already verifying: `{sha[:7]}" in n and "mergebot wait" in n for n in got["notices"]), got
        else:
            assert got["already"] is True and got["candidate"]["id"] == cid, got
            assert f"is candidate {cid}" in got["message"] and "mergebot wait" in got["message"], got
    # the command line itself: the notice on stderr, the candidate followed (not landed yet: exit 5 at --timeout 0)
    again = cli(fleet, "ann", "submit", "--again", "--dir", str(wt), "--timeout", "0")
    out, err = again.communicate(timeout=60)
    assert again.returncode == 5 and f"already verifying: `{sha[:12]}` is candidate {cid}" in err, (out, err)

    # nothing was queued or run again: one candidate of the subtask, one run of it, still running
    assert [c["id"] for c in await fleet.db.landing.candidates(subtask_id=sub.id)] == [cid]
    assert [j["purpose"] for j in await fleet.db.jobs.jobs(candidate_id=cid)] == ["candidate"]
    assert poll.is_alive() and not polled  # the long poll still holds: no verdict yet
    now = fleet.client("ann").get(f"/api/v1/subtasks/{sub.id}/verdict", sha=sha)
    assert (now["status"], now["done"], now["verdict"]["kind"]) == ("verifying", False, "verifying"), now

    (gates / "go-a").touch()
    poll.join(60)
    # the long poll came back with the verdict of its commit, before its 60 s ended (done: not a timeout's answer)
    assert (polled["done"], polled["status"], polled["candidate_id"], polled["sha"]) == (True, "landed", cid, sha)
    assert polled["verdict"]["kind"] == "landed" and polled["verdict"]["final"] is True, polled
    assert len(await fleet.db.landing.landed(subtask_id=sub.id)) == 1  # landed once
    assert [j["purpose"] for j in await fleet.db.jobs.jobs(candidate_id=cid)] == ["candidate"]
    # a commit of the subtask with no push (main's, older): unknown, never this push's verdict
    other = fleet.client("ann").get(f"/api/v1/subtasks/{sub.id}/verdict", sha=base, wait=0)
    assert (other["status"], other["done"], other["candidate_id"]) == ("unknown", False, None), other

    # a subtask pushed twice: each commit's wait answers with its own candidate, never the other push's
    sub2, _ = await fleet.db.subtasks.create_subtask(actor_id=None, title="pushed twice")
    _, wt2 = fleet.start("ann", "ann2")
    await fleet.db.repos.set_paused(repo="demo", paused=True, reason="holding the queue")
    b1 = commit(wt2, {"slow.txt": "b1\n"})
    first = agent.push(fleet.client("ann"), wt2, wait=0, progress=False)
    b2 = commit(wt2, {"slow.txt": "b2\n"})
    second = agent.push(fleet.client("ann"), wt2, wait=0, progress=False)
    assert first["id"] != second["id"] and (first["sha"], second["sha"]) == (b1, b2)
    waiting = cli(fleet, "ann", "wait", "--dir", str(wt2), "--timeout", "60", "--json")  # HEAD: b2
    old = fleet.client("ann").get(f"/api/v1/subtasks/{sub2.id}/verdict", sha=b1, wait=30)
    assert (old["done"], old["status"], old["candidate_id"]) == (True, "superseded", first["id"]), old
    assert old["verdict"]["kind"] == "superseded"
    await fleet.db.repos.set_paused(repo="demo", paused=False, reason=None)
    (gates / "go-b2").touch()
    out, err = waiting.communicate(timeout=90)
    assert waiting.returncode == 0, (out, err)
    newest = json.loads(out)
    assert (newest["done"], newest["status"], newest["candidate_id"], newest["sha"]) == (
        True, "landed", second["id"], b2), newest
    # after the newer push landed, the older commit's wait still answers with its own verdict (by a prefix too)
    old = fleet.client("ann").get(f"/api/v1/subtasks/{sub2.id}/verdict", sha=b1[:10], wait=5)
    assert (old["status"], old["candidate_id"], old["sha"]) == ("superseded", first["id"], b1), old
    # and `mergebot wait ID --commit` names it the same way; a commit that is no push of the subtask waits, then 4
    told = cli(fleet, "ann", "wait", str(sub2.id), "--commit", b1, "--timeout", "5")
    out, err = told.communicate(timeout=60)
    assert told.returncode == 0 and out.startswith("superseded:"), (out, err)
    none = cli(fleet, "ann", "wait", str(sub2.id), "--commit", sha, "--timeout", "0.5")
    out, err = none.communicate(timeout=60)
    assert none.returncode == 4 and f"no verdict on {sha[:12]}" in err and "unknown" in err, (out, err)
