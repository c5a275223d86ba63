"""Admission's line ordered by the verifiers' time each agent had (issue 45, rules 6 and 7, migration 0044).

An agent is served, in verifier-seconds, its share of every run started for its candidates (a run's seconds split
over the candidates it covers), charged when a running run ends, plus one predicted run of the lane asked about for
each claim admission let in that no run has charged yet (still its own, running or submitted). Claims alone left
the verifier-seconds uneven (a candidate run alone cost a whole run, a member of a batch of four a quarter). Real
database, real trigger: the runs end by the same UPDATE of ``finished_at`` a worker's report makes.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

from mergebot.models.work import Handle
from tests.support.lanes import Lanes, _at


async def _running(lanes: Lanes, cand: int, seconds: float, covers: list[int] | None = None) -> int:
    """A run of ``cand`` (and ``covers``) taken by a worker ``seconds`` ago."""
    job = await lanes.db.jobs.enqueue_job(repo="app", commit_sha="c" * 40, command="pytest -q", timeout_s=60,
                                          purpose="candidate", candidate_id=cand, covers=covers)
    assert lanes.owner is not None
    now = datetime.now(UTC)
    await _at(lanes.owner, "UPDATE verify_jobs SET status = 'running', started_at = %s, lease_expires_at = %s "
              "WHERE id = %s", now - timedelta(seconds=seconds), now + timedelta(minutes=1), job.id)
    return job.id


async def _ran(lanes: Lanes, cand: int, seconds: float, covers: list[int] | None = None,
               status: str = "done") -> None:
    """A run of ``cand`` (and ``covers``) that took ``seconds`` and ended now, as a worker's report ends it."""
    job = await _running(lanes, cand, seconds, covers)
    assert lanes.owner is not None
    await _at(lanes.owner, f"UPDATE verify_jobs SET status = '{status}', finished_at = now(), lease_expires_at = NULL "
              "WHERE id = %s", job)


async def _served(lanes: Lanes, who: str) -> tuple[float, int]:
    """(what ``who`` was served, verifier-seconds with a claim not yet run as 10 s; its claims), as the line reads."""
    row = await lanes.db.admission.standing(lanes.agents[who].id, d=10.0)
    assert row is not None
    return float(row["served"]), int(row["claims"])


async def _candidate(lanes: Lanes, who: str, sid: int) -> int:
    cand = await lanes.db.landing.enqueue(superseded="newer", repo="app", subtask_id=sid, claim_version=1,
                                          owner_id=lanes.agents[who].id, sha=f"{sid + 99:040x}",
                                          ref=f"refs/heads/subtasks/{sid}/v1", risk=None)
    return cand.id


async def test_the_line_puts_the_agent_whose_runs_cost_less_first_at_equal_claims(lanes: Lanes) -> None:
    await lanes.runs(10.0)  # a run of the lane is predicted at 10 s
    for title in ("ann's", "bob's", "bob's second"):
        await lanes.db.subtasks.create_subtask(actor_id=None, title=title, priority=9)
    got = {}
    for who in ("ann", "bob"):  # each let in by admission: one claim, counted as one run until a run charges it
        r = await lanes.claim(who, repo="app")
        assert r.status_code == 200, r.text
        got[who] = r.json()["subtask"]["id"]
    assert await _served(lanes, "ann") == (10.0, 1) and await _served(lanes, "bob") == (10.0, 1)
    # a claim given back before any run of its work costs nothing
    r = await lanes.claim("bob", repo="app")
    assert r.status_code == 200, r.text
    assert await _served(lanes, "bob") == (20.0, 2)
    await lanes.db.subtasks.release(agent_id=lanes.agents["bob"].id, handle=Handle(
        r.json()["subtask"]["id"], r.json()["subtask"]["claim_version"]))
    assert await _served(lanes, "bob") == (10.0, 2)

    ann, bob = await _candidate(lanes, "ann", got["ann"]), await _candidate(lanes, "bob", got["bob"])
    batch = await lanes.queue(3)  # three of the lead's, batched behind bob's (claimed around admission)
    await _ran(lanes, ann, 10.0)  # ann's candidate ran alone: a whole run
    await _ran(lanes, batch[-1], 10.0, covers=[bob, *batch])  # bob's in a batch of four: a quarter
    served, _ = await _served(lanes, "ann")
    assert math.isclose(served, 10.0, abs_tol=0.05)
    served, _ = await _served(lanes, "bob")
    assert math.isclose(served, 2.5, abs_tol=0.05)
    served, _ = await _served(lanes, "lead")
    assert math.isclose(served, 7.5, abs_tol=0.05)

    # a second run of ann's candidate, cancelled half-way, adds its half; a run that never ran (cancelled while
    # queued) adds nothing
    await _ran(lanes, ann, 5.0, status="cancelled")
    queued = await lanes.db.jobs.enqueue_job(repo="app", commit_sha="c" * 40, command="pytest -q", timeout_s=60,
                                             purpose="candidate", candidate_id=ann)
    assert lanes.owner is not None
    await _at(lanes.owner, "UPDATE verify_jobs SET status = 'cancelled', finished_at = now() WHERE id = %s", queued.id)
    served, _ = await _served(lanes, "ann")
    assert math.isclose(served, 15.0, abs_tol=0.05)

    # both wait in line, ann first: bob, served less, stands ahead of her all the same, at one claim each
    await lanes.db.admission.waits(lanes.agents["ann"].id, hold=60)
    await lanes.db.admission.waits(lanes.agents["bob"].id, hold=60)
    ann_row = await lanes.db.admission.standing(lanes.agents["ann"].id, d=10.0)
    bob_row = await lanes.db.admission.standing(lanes.agents["bob"].id, d=10.0)
    assert ann_row is not None and bob_row is not None
    assert (ann_row["ahead"], bob_row["ahead"]) == (1, 0)
    assert math.isclose(ann_row["least"], 2.5, abs_tol=0.05) and math.isclose(bob_row["least"], 15.0, abs_tol=0.05)


async def test_a_run_ending_never_waits_for_a_candidate_row_the_queue_holds(lanes: Lanes) -> None:
    """The queue lands or cuts a candidate holding its row; a worker's report of a run covering it must not wait
    for that row (nor take it: both in their own order would be a deadlock)."""
    await lanes.runs(10.0)
    [cand] = await lanes.queue(1)
    job = await _running(lanes, cand, 5.0)
    assert lanes.owner is not None
    async with lanes.owner.pool.connection() as queue, queue.transaction():
        await queue.execute("SELECT 1 FROM candidates WHERE id = %s FOR UPDATE", (cand,))
        async with lanes.owner.pool.connection() as worker, worker.transaction():
            await worker.execute("SET LOCAL lock_timeout = '2s'")
            await worker.execute("UPDATE verify_jobs SET status = 'done', finished_at = now(), "
                                 "lease_expires_at = NULL WHERE id = %s", (job,))
    served, _ = await _served(lanes, "lead")
    assert math.isclose(served, 5.0, rel_tol=0.05)


async def test_one_statement_ending_many_runs_charges_each(lanes: Lanes) -> None:
    """A sweep ends many runs in one statement (a cut, the orphans): each is charged, once."""
    await lanes.runs(10.0)
    cands = await lanes.queue(3)
    for c in cands:
        await _running(lanes, c, 4.0)
    assert lanes.owner is not None
    await _at(lanes.owner, "UPDATE verify_jobs SET status = 'cancelled', finished_at = now(), lease_expires_at = NULL "
              "WHERE candidate_id = ANY(%s) AND status = 'running'", cands)
    await _at(lanes.owner, "UPDATE verify_jobs SET finished_at = now() WHERE candidate_id = ANY(%s)", cands)
    served, _ = await _served(lanes, "lead")
    assert math.isclose(served, 12.0, rel_tol=0.05)
