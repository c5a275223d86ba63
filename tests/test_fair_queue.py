"""The fair order in the queue itself (``candidate_next`` on a real database): a lone agent is not queued behind
another agent's many candidates, and the SQL takes a generated queue in exactly the order
``mergebot.landing.window.fair`` decides, with the same passes and the same accounts."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from mergebot.auth import Role
from mergebot.db.database import Database
from mergebot.landing.main.repos import add_repo, repos_root
from mergebot.landing.window.fair import DEFAULT_RUN_SECONDS, Shares, Waiting, take
from mergebot.models import Candidate
from mergebot.rules import Rules
from tests.support.bot import make_project


async def _repo(db: Database, tmp_path: Path) -> None:
    await add_repo(db, repos_root(tmp_path / "data"), name="demo", source=str(make_project(tmp_path / "src")),
                   rules=Rules.of(verifier_command="true"))


async def _queue(db: Database, agent_id: int, *, priority: int = 0, risk: float | None = None) -> Candidate:
    """The agent claims a new subtask and its push is queued (a commit the queue never needs to read here)."""
    await db.subtasks.create_subtask(actor_id=None, title="work", priority=priority)
    sub = await db.subtasks.claim(agent_id=agent_id)
    assert sub is not None
    return await db.landing.enqueue(superseded="a newer push", repo="demo", subtask_id=sub.id,
                                    claim_version=sub.claim_version, owner_id=agent_id, sha=f"{sub.id:040x}",
                                    ref=f"refs/heads/subtasks/{sub.id}/v{sub.claim_version}",
                                    risk=(risk, {"p": risk}) if risk is not None else None)


async def _fair_state(db: Database) -> tuple[Shares, dict[int, int]]:
    """The repository's clock and accounts, and every candidate's passes."""
    async with db.pool.connection() as conn:
        clock = await (await conn.execute("SELECT vtime FROM fair_clocks WHERE repo = 'demo'")).fetchone()
        served = await (await conn.execute("SELECT owner_id, served FROM fair_accounts WHERE repo = 'demo'")).fetchall()
        passes = await (await conn.execute("SELECT id, passed_over FROM candidates WHERE repo = 'demo'")).fetchall()
    return Shares(clock[0] if clock else 0.0, {o: s for o, s in served}), {i: p for i, p in passes}


async def test_a_lone_agents_candidate_is_taken_within_the_first_two_picks(e2e_db: Database, tmp_path: Path) -> None:
    """Ann queues six, then bob one, at the same priority: bob's goes second, not seventh; the sweep's list and the
    queue page show that order beforehand."""
    db = e2e_db
    await _repo(db, tmp_path)
    ann, _ = await db.agents.add_agent(name="ann", role=Role.AGENT)
    bob, _ = await db.agents.add_agent(name="bob", role=Role.AGENT)
    anns = [await _queue(db, ann.id) for _ in range(6)]
    lone = await _queue(db, bob.id)
    expected = [anns[0].id, lone.id, *[c.id for c in anns[1:]]]
    waiting = await db.landing.waiting_candidates("demo", [], 3)
    assert [c.id for c in waiting] == expected[:3]
    view = await db.views.queue(repo="demo", limit=10, refusals=5, window=3)  # the queue page and `mergebot queue`
    assert [w["id"] for w in view["waiting"]] == expected
    first = await db.landing.next_candidate("demo")
    second = await db.landing.next_candidate("demo")
    assert first is not None and second is not None
    assert lone.id in (first.id, second.id), (first, second, lone)
    order = [first.id, second.id]
    while (cand := await db.landing.next_candidate("demo")) is not None:
        order.append(cand.id)
    assert order == expected
    shares, passes = await _fair_state(db)
    charge = DEFAULT_RUN_SECONDS * 1.5  # no runs yet, no estimates: the default check time, unknown risk
    assert shares.served == {ann.id: pytest.approx(6 * charge), bob.id: pytest.approx(charge)}
    assert set(passes.values()) == {0}  # bob's turn was his share: none of ann's was passed over


async def test_the_queue_takes_a_generated_queue_in_the_fair_modules_order(e2e_db: Database, tmp_path: Path) -> None:
    """Four agents offering 1 to 7 candidates at two priorities with assorted estimates (some unknown), two of them
    unblocking others; max_passes 2 so the aging acts too. The SQL and ``fair.take`` agree at every decision: on
    the candidate, on the passes counted and on the accounts. Halfway, two taken candidates are put back (the
    window re-planned them): both keep their tags and are not charged again."""
    db = e2e_db
    await _repo(db, tmp_path)
    rng = random.Random(45)
    agents = [(await db.agents.add_agent(name=f"a{i}", role=Role.AGENT))[0].id for i in range(4)]
    offered = [agents[0]] * 7 + [agents[1]] * 4 + [agents[2]] * 2 + [agents[3]]
    rng.shuffle(offered)
    cands = []
    for owner in offered:
        risk = rng.choice([None, round(rng.random(), 3), 0.05])
        cands.append(await _queue(db, owner, priority=rng.choice([0, 0, 0, 1]), risk=risk))
    for blocker in rng.sample(cands, 2):  # each unblocks a subtask that waits on it
        await db.subtasks.create_subtask(actor_id=None, title="waits", depends_on=[blocker.subtask_id])
    async with db.pool.connection() as conn:
        rows = await (await conn.execute(
            "SELECT d.depends_on_id, count(*) FROM subtask_deps d JOIN subtasks b ON b.id = d.subtask_id"
            " WHERE b.status = 'blocked' GROUP BY 1")).fetchall()
        blocked = {sid: n for sid, n in rows}
        # the estimates as the SQL computes with them (a real widened to double precision)
        risky = await conn.execute("SELECT id, failure_risk::float8 FROM candidates WHERE repo = 'demo'")
        risks = {i: r for i, r in await risky.fetchall()}

    def waiting(c: Candidate, **more: Any) -> Waiting:
        return Waiting(id=c.id, owner=c.owner_id, priority=c.priority, risk=risks[c.id],
                       unblocks=blocked.get(c.subtask_id, 0), **more)

    model = {c.id: waiting(c) for c in cands}
    assert sum(w.unblocks for w in model.values()) == 2
    shares = Shares()
    taken: dict[int, float] = {}

    async def one_step() -> bool:
        nonlocal shares
        step = take(model.values(), shares, max_passes=2, risk_aware=True, run_seconds=DEFAULT_RUN_SECONDS)
        got = await db.landing.next_candidate("demo", max_passes=2)
        if step is None:
            assert got is None
            return False
        assert got is not None and got.id == step.chosen.id, (got, step)
        shares = step.shares
        taken[step.chosen.id] = step.tag
        del model[step.chosen.id]
        for i in step.passed:
            model[i] = replace(model[i], passed_over=model[i].passed_over + 1)
        db_shares, db_passes = await _fair_state(db)
        assert db_shares.clock == pytest.approx(shares.clock)
        assert db_shares.served == pytest.approx(dict(shares.served))
        assert {i: db_passes[i] for i in model} == {i: w.passed_over for i, w in model.items()}
        return True

    for _ in range(6):
        assert await one_step()
    put_back = sorted(taken)[:2]
    async with db.pool.connection() as conn:  # what a re-plan of the window does: back in the queue, as it was
        await conn.execute("UPDATE candidates SET status = 'queued', started_at = NULL WHERE id = ANY(%s)",
                           (put_back,))
        rows = await (await conn.execute("SELECT id, passed_over FROM candidates WHERE id = ANY(%s)",
                                         (put_back,))).fetchall()
    for i, passed in rows:
        model[i] = waiting(next(c for c in cands if c.id == i), passed_over=passed, start=taken[i])
    steps = 0
    while await one_step():
        steps += 1
    assert steps == len(cands) - 6 + 2 and not model
