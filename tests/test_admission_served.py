"""Admission's line ordered by the verifiers' time each agent had (issue 45, rules 6 and 7, migration 0044).

An agent's account is kept in runs of the lane's predicted length: a claim admission lets in counts at once as one
(``pending``), and each run started for the agent's candidates, as it ends, adds its share (the run's seconds split
over the candidates it covers) and settles one pending claim at a candidate's first charge. Claims alone left the
verifier-seconds uneven (a candidate run alone cost a whole run, a member of a batch of four a quarter). Real
database, real trigger: the runs end by the same UPDATE of ``finished_at`` a worker's report makes.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

from tests.support.lanes import Lanes, _at


async def _ran(lanes: Lanes, cand: int, seconds: float, covers: list[int] | None = None,
               status: str = "done") -> None:
    """A run of ``cand`` (and ``covers``) that took ``seconds`` and ended now, as a worker's report ends it."""
    job = await lanes.db.jobs.enqueue_job(repo="app", commit_sha="c" * 40, command="pytest -q", timeout_s=60,
                                          purpose="candidate", candidate_id=cand, covers=covers)
    assert lanes.owner is not None
    now = datetime.now(UTC)
    await _at(lanes.owner, "UPDATE verify_jobs SET status = 'running', started_at = %s, lease_expires_at = %s "
              "WHERE id = %s", now - timedelta(seconds=seconds), now + timedelta(minutes=1), job.id)
    await _at(lanes.owner, f"UPDATE verify_jobs SET status = '{status}', finished_at = %s, lease_expires_at = NULL "
              "WHERE id = %s", now, job.id)


async def _account(lanes: Lanes, who: str) -> tuple[float, int]:
    assert lanes.owner is not None
    async with lanes.owner.pool.connection() as conn:
        row = await (await conn.execute("SELECT charged, pending FROM admission_agents WHERE agent_id = %s",
                                        (lanes.agents[who].id,))).fetchone()
    return (0.0, 0) if row is None else (float(row[0]), int(row[1]))


async def _candidate(lanes: Lanes, who: str, sid: int) -> int:
    cand = await lanes.db.landing.enqueue(superseded="newer", repo="app", subtask_id=sid, claim_version=1,
                                          owner_id=lanes.agents[who].id, sha=f"{sid + 99:040x}",
                                          ref=f"refs/heads/subtasks/{sid}/v1", risk=None)
    return cand.id


async def test_the_line_puts_the_agent_whose_runs_cost_less_first_at_equal_claims(lanes: Lanes) -> None:
    await lanes.runs(10.0)  # a run of the lane is predicted at 10 s
    for title in ("ann's", "bob's"):
        await lanes.db.subtasks.create_subtask(actor_id=None, title=title, priority=9)
    got = {}
    for who in ("ann", "bob"):  # each let in by admission: one claim, pending until a run charges its work
        r = await lanes.claim(who, repo="app")
        assert r.status_code == 200, r.text
        got[who] = r.json()["subtask"]["id"]
    assert await _account(lanes, "ann") == (0.0, 1) and await _account(lanes, "bob") == (0.0, 1)
    ann, bob = await _candidate(lanes, "ann", got["ann"]), await _candidate(lanes, "bob", got["bob"])
    batch = await lanes.queue(3)  # three of the lead's, batched behind bob's
    await _ran(lanes, ann, 10.0)  # ann's candidate ran alone: a whole run
    await _ran(lanes, batch[-1], 10.0, covers=[bob, *batch])  # bob's in a batch of four: a quarter
    charged, pending = await _account(lanes, "ann")
    assert math.isclose(charged, 1.0) and pending == 0
    charged, pending = await _account(lanes, "bob")
    assert math.isclose(charged, 0.25) and pending == 0
    # the lead was never let in by admission (its claims were made around it): charged, nothing pending to settle
    charged, pending = await _account(lanes, "lead")
    assert math.isclose(charged, 0.75) and pending == 0

    # a second run of ann's candidate, cancelled half-way, adds its half and settles nothing more
    await _ran(lanes, ann, 5.0, status="cancelled")
    charged, pending = await _account(lanes, "ann")
    assert math.isclose(charged, 1.5) and pending == 0

    # both wait in line, ann first: bob, served less, stands ahead of her all the same, at one claim each
    await lanes.db.admission.waits(lanes.agents["ann"].id, hold=60)
    await lanes.db.admission.waits(lanes.agents["bob"].id, hold=60)
    ann_row = await lanes.db.admission.standing(lanes.agents["ann"].id)
    bob_row = await lanes.db.admission.standing(lanes.agents["bob"].id)
    assert ann_row is not None and bob_row is not None
    assert (ann_row["claims"], bob_row["claims"]) == (1, 1)
    assert (ann_row["ahead"], bob_row["ahead"]) == (1, 0)
    assert math.isclose(ann_row["least"], 0.25) and math.isclose(bob_row["least"], 1.5)


async def test_a_run_ending_never_waits_for_a_candidate_row_the_queue_holds(lanes: Lanes) -> None:
    """The queue lands or cuts a candidate holding its row; a worker's report of a run covering it must not wait
    for that row (nor take it: both in their own order would be a deadlock), so the charge keeps its own table."""
    await lanes.runs(10.0)
    [cand] = await lanes.queue(1)
    job = await lanes.db.jobs.enqueue_job(repo="app", commit_sha="c" * 40, command="pytest -q", timeout_s=60,
                                          purpose="candidate", candidate_id=cand)
    assert lanes.owner is not None
    now = datetime.now(UTC)
    await _at(lanes.owner, "UPDATE verify_jobs SET status = 'running', started_at = %s, lease_expires_at = %s "
              "WHERE id = %s", now - timedelta(seconds=5), now + timedelta(minutes=1), job.id)
    async with lanes.owner.pool.connection() as queue, queue.transaction():
        await queue.execute("SELECT 1 FROM candidates WHERE id = %s FOR UPDATE", (cand,))
        async with lanes.owner.pool.connection() as worker:
            await worker.execute("SET lock_timeout = '2s'")
            await worker.execute("UPDATE verify_jobs SET status = 'done', finished_at = now(), "
                                 "lease_expires_at = NULL WHERE id = %s", (job.id,))
    charged, pending = await _account(lanes, "lead")
    assert math.isclose(charged, 0.5) and pending == 0
