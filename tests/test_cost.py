"""What a landing cost adds up: every verifier second of a window is charged once, to a landing (its deciding run,
its share of a batch's run, the rework on the way, main's checks) or to thrown-away work or to other runs, and the
charges equal the sum of all runs in the window. Real PostgreSQL (both servers), the store's own statements; the
runs' start and end times are set by hand so the expected seconds are exact.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from mergebot.cost import add_up
from mergebot.db.database import Database
from mergebot.models import Handle
from mergebot.rules import Rules
from tests.test_store import SHA, agents, landing, next_sha

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


async def test_every_second_of_a_window_is_charged_once(db: Database) -> None:
    ann, bob, worker = await agents(db, 3)
    await db.repos.create_repo(name="demo", root_sha=SHA, rules=Rules.of(target_branch="main",
                               verifier_command="pytest", verifier_timeout_s=60, protected_paths=[],
                               max_push_bytes=1 << 20, max_file_bytes=1 << 20))

    async def push(agent: int) -> tuple[Any, Any]:
        sub = await db.subtasks.claim(agent_id=agent)
        assert sub is not None
        cand = await db.landing.enqueue(repo="demo", subtask_id=sub.id, claim_version=sub.claim_version,
                                        owner_id=agent, sha=next_sha(), ref=f"refs/heads/subtasks/{sub.id}/v1",
                                        superseded="newer")
        return sub, cand

    async def run(seconds: float, *, cand: Any = None, landed: int | None = None, purpose: str = "candidate",
                  start: datetime = T0, cancel_unstarted: bool = False) -> int:
        job = await db.jobs.enqueue_job(repo="demo", commit_sha=next_sha(), command="pytest", timeout_s=60,
                                        purpose=purpose, candidate_id=cand.id if cand else None, landed_id=landed)
        async with db.pool.connection() as conn:
            if cancel_unstarted:
                await conn.execute("UPDATE verify_jobs SET status = 'cancelled', finished_at = %s WHERE id = %s",
                                   (start + timedelta(seconds=seconds), job.id))
            else:
                await conn.execute("UPDATE verify_jobs SET status = 'done', outcome = 'pass', worker_id = %s, "
                                   "started_at = %s, finished_at = %s WHERE id = %s",
                                   (worker, start, start + timedelta(seconds=seconds), job.id))
        return job.id

    async def set_run(landed_id: int, job_id: int) -> None:
        async with db.pool.connection() as conn:
            await conn.execute("UPDATE landed SET run_id = %s, landed_at = %s WHERE id = %s", (job_id, T0, landed_id))

    for i in range(4):
        await db.subtasks.create_subtask(actor_id=None, title=f"work {i}")
    # 1: ann's first push fails its check (rejected), her second lands; main's check after it
    s1, first = await push(ann)
    await run(10, cand=first)
    await db.landing.finish_candidate(first.id, "rejected", "check failed", verdict={"kind": "check_failed"})
    await db.subtasks.reject(handle=Handle(s1.id, s1.claim_version), reason="check failed", sha=first.sha)
    second = await db.landing.enqueue(repo="demo", subtask_id=s1.id, claim_version=s1.claim_version, owner_id=ann,
                                      sha=next_sha(), ref=f"refs/heads/subtasks/{s1.id}/v1", superseded="newer")
    deciding = await run(20, cand=second)
    l1, _ = await db.landing.land(landing(s1, ann, second.sha))
    await set_run(l1.id, deciding)
    await run(5, landed=l1.id, purpose="post_land")
    # 2 and 3: bob's two pushes land as one batch, verified by one run of 30 s
    s2, c2 = await push(bob)
    s3, c3 = await push(bob)
    batch = await run(30, cand=c3)
    l2, _ = await db.landing.land(landing(s2, bob, c2.sha))
    l3, _ = await db.landing.land(landing(s3, bob, c3.sha))
    await set_run(l2.id, batch)
    await set_run(l3.id, batch)
    # 4: bob's push whose subtask never lands; a manual check; a run cancelled before any worker took it; a run
    # that finished before the window
    _, c4 = await push(bob)
    await run(7, cand=c4)
    await run(3, purpose="manual")
    await run(4, cand=c4, cancel_unstarted=True)
    await run(50, cand=c4, start=T0 - timedelta(days=3))

    since, until = T0 - timedelta(hours=1), T0 + timedelta(hours=1)
    async with db.pool.connection() as conn:  # also counted after the landings: landed_at is set to T0 above
        await conn.execute("UPDATE candidates SET queued_at = %s", (T0,))
        cur = await conn.execute("SELECT coalesce(sum(extract(epoch FROM finished_at - started_at)), 0)::float8 "
                                 "FROM verify_jobs WHERE finished_at >= %s AND finished_at < %s "
                                 "AND started_at IS NOT NULL", (since, until))
        row = await cur.fetchone()
        assert row is not None
        all_runs = float(row[0])
    rows = await db.views.cost(since=since, until=until)
    costs = add_up(rows["runs"], rows["pushes"], rows["landed"])

    assert all_runs == 75.0 and costs.total == all_runs  # 10 + 20 + 5 + 30 + 7 + 3; the earlier 50 s is outside
    assert costs.charged_to_landings + costs.thrown_away + costs.other == costs.total
    assert (costs.charged_to_landings, costs.thrown_away, costs.other) == (65.0, 7.0, 3.0)
    one, two, three = costs.landings[l1.id], costs.landings[l2.id], costs.landings[l3.id]
    assert one.seconds == {"landing_run": 20.0, "rework": 10.0, "main_check": 5.0} and one.total == 35.0
    assert (one.pushes, one.rejections) == (2, {"check_failed": 1})
    assert two.seconds["landing_run"] == three.seconds["landing_run"] == 15.0  # the batch's run, shared
    assert two.total == three.total == 15.0 and two.pushes == three.pushes == 1
    a, b = costs.agents["agent0"], costs.agents["agent1"]
    assert (a.landings, a.pushes, a.rejections, a.seconds) == (1, 2, {"check_failed": 1}, 35.0)
    assert (b.landings, b.pushes, b.seconds, b.thrown_away) == (2, 3, 37.0, 7.0)
    assert a.pushes_per_landing == 2.0 and b.seconds_per_landing == 18.5
    out = costs.as_json()
    assert out["total_seconds"] == 75.0 and [c["landed_id"] for c in out["landings"]] == [l1.id, l2.id, l3.id]
    top = costs.as_json(landings=1)  # the costliest only (35 s), the totals still of all three
    assert [c["landed_id"] for c in top["landings"]] == [l1.id] and top["landings_total"] == 3
    assert top["charged_to_landings_seconds"] == 65.0
    # /metrics counts the same seconds over all time by the runs' purpose and outcome, fixed when each ends (the
    # charges move as subtasks land and landings are reverted: they are the cost view's, never a counter's)
    snap = await db.views.metrics_snapshot([1.0])
    counted = sum(float(r["seconds"]) for r in snap.of("metric_verify_runs"))
    ever = await db.views.cost(since=datetime.min.replace(tzinfo=UTC), until=datetime.max.replace(tzinfo=UTC))
    assert abs(counted - sum(r["seconds"] for r in ever["runs"])) < 1e-6 and abs(counted - 125.0) < 1e-6
