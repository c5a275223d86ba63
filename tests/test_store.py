"""The claim protocol against a real PostgreSQL, including the five drills of task-claiming-pattern.txt."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

from mergebot.auth import Role
from mergebot.db.database import Database
from mergebot.errors import ClaimSuperseded, Conflict, Invalid, InvalidTransition
from mergebot.models import Handle, Landing
from mergebot.rules import Rules
from mergebot.tree import parse_tree

SHA = "a" * 40
_shas = iter(range(1, 1 << 30))


def next_sha() -> str:
    return f"{next(_shas):040x}"


async def agents(db: Database, n: int, role: Role = Role.AGENT) -> list[int]:
    out = []
    for i in range(n):
        agent, _ = await db.agents.add_agent(name=f"{role.value}{i}", role=role)
        out.append(agent.id)
    return out


def landing(sub: Any, owner: int, sha: str = SHA) -> Landing:
    """Evidence for the store's land step (the git side is tested with the landing path)."""
    return Landing(subtask_id=sub.id, claim_version=sub.claim_version, owner_id=owner, repo="demo",
                   target_ref="refs/heads/main", candidate_sha=sha, base_sha="b" * 40, merged_sha=sha,
                   tree_sha="c" * 40, verifier_command="pytest", verifier_result="pass", duration_ms=5,
                   log_digest="d" * 64)


async def claim_submit_land(db: Database, agent: int) -> tuple[Any, list[int]]:
    sha = next_sha()
    sub = await db.subtasks.claim(agent_id=agent)
    assert sub is not None
    await db.subtasks.submit(agent_id=agent, handle=Handle(sub.id, sub.claim_version), sha=sha)
    _, released = await db.landing.land(landing(sub, agent, sha))
    return sub, released


async def test_claim_sets_owner_version_and_lease(db: Database) -> None:
    [a] = await agents(db, 1)
    created, _ = await db.subtasks.create_subtask(actor_id=a, title="t")
    assert created.status == "ready" and created.claim_version == 0
    sub = await db.subtasks.claim(agent_id=a)
    assert sub is not None and sub.id == created.id
    assert (sub.status, sub.owner_id, sub.claim_version, sub.attempts) == ("running", a, 1, 1)
    assert sub.lease_expires_at is not None
    assert await db.subtasks.claim(agent_id=a) is None  # nothing else is ready


async def test_claim_order_is_priority_then_age(db: Database) -> None:
    [a] = await agents(db, 1)
    low, _ = await db.subtasks.create_subtask(actor_id=a, title="low", priority=0)
    high, _ = await db.subtasks.create_subtask(actor_id=a, title="high", priority=5)
    low2, _ = await db.subtasks.create_subtask(actor_id=a, title="low2", priority=0)
    got = [(await db.subtasks.claim(agent_id=a)) for _ in range(3)]
    assert [s.id for s in got if s] == [high.id, low.id, low2.id]


async def test_a_claim_avoids_an_overlapping_footprint_among_equals(db: Database) -> None:
    """Among ready subtasks of equal priority, one whose footprint overlaps no running subtask's is claimed
    first; with nothing else ready the overlapping one is taken; priority still rules over footprints. The
    subtasks in flight that overlap are named with their owners, and a claimer's own estimate joins the
    footprint (fenced)."""
    a, b, c, d = await agents(db, 4)
    calc, _ = await db.subtasks.create_subtask(actor_id=a, title="calc", paths=["src/calc/"])
    add, _ = await db.subtasks.create_subtask(actor_id=a, title="add", paths=["src/calc/add.py"])
    docs, _ = await db.subtasks.create_subtask(actor_id=a, title="docs", paths=["docs/*.md"])
    first = await db.subtasks.claim(agent_id=a)
    assert first is not None and first.id == calc.id
    second = await db.subtasks.claim(agent_id=b)
    assert second is not None and second.id == docs.id  # add.py is under calc's running footprint
    third = await db.subtasks.claim(agent_id=c)
    assert third is not None and third.id == add.id  # nothing else is ready: the overlap is taken
    overlaps = await db.subtasks.overlapping(third.id, third.paths)
    assert [(o["id"], o["owner"]) for o in overlaps] == [(calc.id, "agent0")]
    # priority rules: an overlapping subtask of higher priority beats a free one
    free, _ = await db.subtasks.create_subtask(actor_id=a, title="free", paths=["web/"])
    urgent, _ = await db.subtasks.create_subtask(actor_id=a, title="urgent", priority=5, paths=["src/calc/mul.py"])
    got = await db.subtasks.claim(agent_id=d)
    assert got is not None and got.id == urgent.id
    touched = await db.subtasks.touch(agent_id=d, handle=Handle(got.id, got.claim_version), paths=["web/app.py"])
    assert touched.paths == ["src/calc/mul.py", "web/app.py"]
    assert [o["id"] for o in await db.subtasks.overlapping(free.id, free.paths)] == [got.id]
    with pytest.raises(ClaimSuperseded):
        await db.subtasks.touch(agent_id=a, handle=Handle(got.id, got.claim_version), paths=["x"])


async def test_a_twin_is_a_change_that_may_still_land(db: Database) -> None:
    """A live candidate with the same patch id is a twin while its subtask waits on it; once that subtask is
    cancelled, its leftover candidate will never land and is no twin of anyone's."""
    a, b = await agents(db, 2)
    await db.repos.create_repo(name="demo", root_sha=SHA, rules=Rules.of(target_branch="main", verifier_command="true",
                               verifier_timeout_s=60, protected_paths=[], max_push_bytes=1 << 20,
                               max_file_bytes=1 << 20))
    first, _ = await db.subtasks.create_subtask(actor_id=a, title="first")
    second, _ = await db.subtasks.create_subtask(actor_id=a, title="second")
    sub = await db.subtasks.claim(agent_id=a)
    assert sub is not None and sub.id == first.id
    patch = "e" * 40
    cand = await db.landing.enqueue(repo="demo", subtask_id=sub.id, claim_version=sub.claim_version, owner_id=a,
                                    sha=next_sha(), ref=f"refs/heads/subtasks/{sub.id}/v1", superseded="newer",
                                    patch_id=patch)
    twin = await db.landing.twin(repo="demo", patch_id=patch, subtask_id=second.id)
    assert twin is not None and (twin["candidate_id"], twin["owner"]) == (cand.id, "agent0")
    assert await db.landing.twin(repo="demo", patch_id=patch, subtask_id=first.id) is None  # one's own: no twin
    await db.subtasks.cancel(subtask_id=first.id, reason="not needed", actor_id=b)
    assert await db.landing.twin(repo="demo", patch_id=patch, subtask_id=second.id) is None


@pytest.mark.parametrize("rounds", [150])
async def test_drill1_racing_claims_one_winner(db: Database, rounds: int) -> None:
    """Drill 1: many connections race for one ready subtask; exactly one wins, every round."""
    ids = await agents(db, 12)
    for r in range(rounds):
        sub, _ = await db.subtasks.create_subtask(actor_id=None, title=f"race {r}")
        results = await asyncio.gather(*(db.subtasks.claim(agent_id=a) for a in ids))
        winners = [x for x in results if x is not None]
        assert len(winners) == 1, f"round {r}: {len(winners)} winners"
        assert winners[0].id == sub.id and winners[0].claim_version == 1
        await db.subtasks.submit(agent_id=winners[0].owner_id, handle=Handle(sub.id, 1), sha=SHA)  # type: ignore[arg-type]
    events = await db.subtasks.events(limit=10000)
    claims = [e for e in events if e["to_status"] == "running"]
    assert len(claims) == rounds


async def test_drill2_silent_owner_is_recovered(db: Database) -> None:
    """Drill 2: an owner stops heart-beating; recovery returns the subtask, nothing is lost."""
    a, b = await agents(db, 2)
    sub, _ = await db.subtasks.create_subtask(actor_id=None, title="t")
    db.subtasks.lease_seconds = 0.05
    first = await db.subtasks.claim(agent_id=a)
    assert first is not None
    # Within lease + grace nothing happens: a missed lease is uncertainty, not death.
    assert await db.subtasks.recover_expired(grace_seconds=30) == []
    await asyncio.sleep(0.1)
    recovered = await db.subtasks.recover_expired(grace_seconds=0)
    assert [(r["id"], r["status"]) for r in recovered] == [(sub.id, "ready")]
    again = await db.subtasks.claim(agent_id=b)
    assert again is not None and again.id == sub.id and again.claim_version == 2
    assert again.previous_owner_id == a
    history = [(e["from_status"], e["to_status"]) for e in await db.subtasks.events(subtask_id=sub.id)]
    assert history == [(None, "ready"), ("ready", "running"), ("running", "ready"), ("ready", "running")]


async def test_an_owner_has_a_last_word_until_someone_else_claims(db: Database) -> None:
    """A claim that lapsed (or landed) leaves its owner one more note at that version, for the next owner; nobody
    else writes as that owner, and once the subtask is claimed again the old version is fenced out."""
    a, b = await agents(db, 2)
    sub, _ = await db.subtasks.create_subtask(actor_id=None, title="t")
    db.subtasks.lease_seconds = 0.01
    old = await db.subtasks.claim(agent_id=a)
    assert old is not None
    await asyncio.sleep(0.05)
    await db.subtasks.recover_expired(grace_seconds=0)
    db.subtasks.lease_seconds = 60
    note = await db.subtasks.add_note(author_id=a, subtask_id=sub.id, claim_version=1, body="my lease lapsed")
    assert note["claim_version"] == 1
    with pytest.raises(ClaimSuperseded):
        await db.subtasks.add_note(author_id=b, subtask_id=sub.id, claim_version=1, body="not mine to write")
    assert await db.subtasks.claim(agent_id=b) is not None
    with pytest.raises(ClaimSuperseded):
        await db.subtasks.add_note(author_id=a, subtask_id=sub.id, claim_version=1, body="too late")


async def test_drill3_old_owner_completion_refused_after_reclaim(db: Database) -> None:
    """Drill 3: reclaim the subtask, then the old owner's completion is refused, with the new version."""
    a, b = await agents(db, 2)
    sub, _ = await db.subtasks.create_subtask(actor_id=None, title="t")
    db.subtasks.lease_seconds = 0.01
    old = await db.subtasks.claim(agent_id=a)
    await asyncio.sleep(0.05)
    await db.subtasks.recover_expired(grace_seconds=0)
    db.subtasks.lease_seconds = 60
    new = await db.subtasks.claim(agent_id=b)
    assert old is not None and new is not None
    for write in (
        db.subtasks.submit(agent_id=a, handle=Handle(sub.id, old.claim_version), sha=SHA),
        db.subtasks.heartbeat(agent_id=a, handle=Handle(sub.id, old.claim_version)),
        db.subtasks.release(agent_id=a, handle=Handle(sub.id, old.claim_version)),
        db.subtasks.add_note(author_id=a, subtask_id=sub.id, claim_version=old.claim_version, body="done!"),
    ):
        with pytest.raises(ClaimSuperseded) as err:
            await write
        assert err.value.detail["current_version"] == 2
    # Even with the current version, a non-owner cannot write.
    with pytest.raises(ClaimSuperseded):
        await db.subtasks.submit(agent_id=a, handle=Handle(sub.id, 2), sha=SHA)
    current = await db.subtasks.get_subtask(sub.id)
    assert (current.status, current.owner_id, current.claim_version) == ("running", b, 2)


async def test_drill4_failed_dependency_keeps_dependent_blocked(db: Database) -> None:
    """Drill 4: the dependency's artifact fails verification; its dependent stays blocked."""
    [a] = await agents(db, 1)
    dep, _ = await db.subtasks.create_subtask(actor_id=a, title="dep")
    child, _ = await db.subtasks.create_subtask(actor_id=a, title="child", depends_on=[dep.id])
    assert child.status == "blocked"
    got = await db.subtasks.claim(agent_id=a)
    assert got is not None and got.id == dep.id  # the blocked child is never claimable
    await db.subtasks.submit(agent_id=a, handle=Handle(dep.id, 1), sha=SHA)
    back = await db.subtasks.reject(handle=Handle(dep.id, 1), reason="verifier: 3 tests failed")
    assert (back.status, back.owner_id, back.status_reason) == ("running", a, "verifier: 3 tests failed")
    assert (await db.subtasks.get_subtask(child.id)).status == "blocked"
    assert await db.subtasks.claim(agent_id=a) is None
    # And landing the dependency is what frees it.
    await db.subtasks.submit(agent_id=a, handle=Handle(dep.id, 1), sha=SHA)
    _, released = await db.landing.land(landing(back, a))
    assert released == [child.id]
    assert (await db.subtasks.get_subtask(child.id)).status == "ready"


async def test_drill5_idempotent_create(db: Database) -> None:
    """Drill 5: a retried create with the same idempotency key creates nothing new."""
    [a] = await agents(db, 1)
    first, created = await db.subtasks.create_subtask(actor_id=a, title="t", idempotency_key="k1")
    again = await asyncio.gather(*(db.subtasks.create_subtask(actor_id=a, title="t", idempotency_key="k1")
                                   for _ in range(10)))
    assert created and all(s.id == first.id and not c for s, c in again)
    assert (await db.subtasks.counts()) == {"ready": 1}
    with pytest.raises(Conflict):
        await db.subtasks.create_subtask(actor_id=a, title="other", idempotency_key="k1")


async def test_dependency_waits_for_all(db: Database) -> None:
    [a] = await agents(db, 1)
    d1, _ = await db.subtasks.create_subtask(actor_id=a, title="d1", priority=2)
    d2, _ = await db.subtasks.create_subtask(actor_id=a, title="d2", priority=1)
    child, _ = await db.subtasks.create_subtask(actor_id=a, title="child", depends_on=[d1.id, d2.id, d1.id])
    assert (await db.subtasks.get_subtask(child.id)).depends_on == [d1.id, d2.id]
    _, released = await claim_submit_land(db, a)
    assert released == [] and (await db.subtasks.get_subtask(child.id)).status == "blocked"
    _, released = await claim_submit_land(db, a)
    assert released == [child.id]
    late, _ = await db.subtasks.create_subtask(actor_id=a, title="late", depends_on=[d1.id])
    assert late.status == "ready"  # every dependency already landed


async def test_concurrent_landings_release_shared_dependent(db: Database) -> None:
    """Two dependencies landing at the same moment must not both miss the release of their dependent."""
    ids = await agents(db, 2)
    for _ in range(20):
        d1, _ = await db.subtasks.create_subtask(actor_id=None, title="d1")
        d2, _ = await db.subtasks.create_subtask(actor_id=None, title="d2")
        child, _ = await db.subtasks.create_subtask(actor_id=None, title="c", depends_on=[d1.id, d2.id])
        subs = [await db.subtasks.claim(agent_id=a) for a in ids]
        for s, a in zip(subs, ids, strict=True):
            assert s is not None
            await db.subtasks.submit(agent_id=a, handle=Handle(s.id, s.claim_version), sha=f"{s.id:040x}")
        await asyncio.gather(*(db.landing.land(landing(s, a, f"{s.id:040x}"))
                               for s, a in zip(subs, ids, strict=True)))
        assert (await db.subtasks.get_subtask(child.id)).status == "ready"
        c = await db.subtasks.claim(agent_id=ids[0])
        assert c is not None and c.id == child.id
        await db.subtasks.cancel(subtask_id=c.id, reason="done with the round", actor_id=None)


async def test_missing_dependency_and_cycles_refused(db: Database) -> None:
    [a] = await agents(db, 1)
    with pytest.raises(Invalid) as err:
        await db.subtasks.create_subtask(actor_id=a, title="t", depends_on=[999])
    assert err.value.detail["field"] == "depends_on"
    with pytest.raises(Invalid) as err:
        parse_tree([{"key": "x", "title": "x", "depends_on": ["y"]},
                    {"key": "y", "title": "y", "depends_on": ["x"]}])
    assert err.value.detail["cycle"] in (["x", "y", "x"], ["y", "x", "y"])
    # The database refuses a cycle by itself too, even from code that skips the planner.
    s1, _ = await db.subtasks.create_subtask(actor_id=a, title="1")
    s2, _ = await db.subtasks.create_subtask(actor_id=a, title="2", depends_on=[s1.id])
    async with await psycopg.AsyncConnection.connect(db.pool.conninfo, autocommit=True) as conn:
        with pytest.raises(psycopg.DatabaseError, match="cycle"):
            await conn.execute("INSERT INTO subtask_deps VALUES (%s, %s)", (s1.id, s2.id))


async def test_transitions_enforced_in_database(db: Database) -> None:
    [a] = await agents(db, 1)
    sub, _ = await db.subtasks.create_subtask(actor_id=a, title="t")
    async with await psycopg.AsyncConnection.connect(db.pool.conninfo, autocommit=True) as conn:
        with pytest.raises(psycopg.DatabaseError, match="cannot go from ready to landed"):
            await conn.execute("UPDATE subtasks SET status = 'landed' WHERE id = %s", (sub.id,))
        with pytest.raises(psycopg.errors.CheckViolation):  # running needs an owner and a lease
            await conn.execute("UPDATE subtasks SET status = 'running' WHERE id = %s", (sub.id,))
        with pytest.raises(psycopg.DatabaseError, match="append-only"):
            await conn.execute("DELETE FROM events")
    with pytest.raises(InvalidTransition):
        await db.subtasks.retry(subtask_id=sub.id, reason="x", actor_id=a)


async def test_poison_pill_fails_after_max_attempts(db: Database) -> None:
    [a] = await agents(db, 1)
    sub, _ = await db.subtasks.create_subtask(actor_id=a, title="t", max_attempts=2)
    db.subtasks.lease_seconds = 0.01
    statuses = []
    for _ in range(2):
        assert await db.subtasks.claim(agent_id=a) is not None
        await asyncio.sleep(0.03)
        statuses += [r["status"] for r in await db.subtasks.recover_expired(grace_seconds=0)]
    assert statuses == ["ready", "failed"]
    failed = await db.subtasks.get_subtask(sub.id)
    assert failed.status == "failed" and "poison pill" in (failed.status_reason or "")
    retried = await db.subtasks.retry(subtask_id=sub.id, reason="operator retry", actor_id=a)
    assert retried.status == "ready" and retried.attempts == 0


async def test_release_is_a_handoff(db: Database) -> None:
    a, b = await agents(db, 2)
    sub, _ = await db.subtasks.create_subtask(actor_id=a, title="t")
    got = await db.subtasks.claim(agent_id=a)
    assert got is not None
    await db.subtasks.add_note(author_id=a, subtask_id=sub.id, claim_version=1, body="tried X; see branch")
    rel = await db.subtasks.release(agent_id=a, handle=Handle(sub.id, 1), reason="out of time")
    assert (rel.status, rel.attempts, rel.previous_owner_id) == ("ready", 0, a)
    nxt = await db.subtasks.claim(agent_id=b)
    assert nxt is not None and nxt.claim_version == 2
    assert [n["body"] for n in await db.subtasks.handoff(sub.id)] == ["tried X; see branch"]


async def test_groups_prefer_own_then_open(db: Database) -> None:
    a, b = await agents(db, 2)
    lead, _ = await db.agents.add_agent(name="lead", role=Role.LEAD)
    await db.agents.assign(agent_name="agent0", group_name="g1", actor_id=lead.id)
    await db.agents.assign(agent_name="agent1", group_name="g2", actor_id=lead.id)
    g2task, _ = await db.subtasks.create_subtask(actor_id=lead.id, title="g2", group_name="g2", priority=9)
    g1task, _ = await db.subtasks.create_subtask(actor_id=lead.id, title="g1", group_name="g1")
    loose, _ = await db.subtasks.create_subtask(actor_id=lead.id, title="loose")
    got = await db.subtasks.claim(agent_id=a)
    assert got is not None and got.id == g1task.id  # own group first, despite lower priority
    got = await db.subtasks.claim(agent_id=a)
    assert got is not None and got.id == loose.id  # then ungrouped work
    assert await db.subtasks.claim(agent_id=a) is None  # g2's task is not ours while g1 is closed
    # Moving an agent never touches its claim in flight.
    await db.agents.assign(agent_name="agent0", group_name="g2", actor_id=lead.id)
    assert (await db.subtasks.get_subtask(g1task.id)).owner_id == a
    await db.agents.assign(agent_name="agent0", group_name="g1", actor_id=lead.id)
    await db.agents.set_group_open(name="g1", open=True, actor_id=lead.id)  # "don't wait for me"
    got = await db.subtasks.claim(agent_id=a)
    assert got is not None and got.id == g2task.id
    assert await db.subtasks.claim(agent_id=b) is None


async def test_waiter_drain_then_listen(db: Database) -> None:
    [a] = await agents(db, 1)
    s1, _ = await db.subtasks.create_subtask(actor_id=a, title="one")
    s2, _ = await db.subtasks.create_subtask(actor_id=a, title="two")
    await db.waiter.start()
    await claim_submit_land(db, a)  # s1 finishes before anyone waits
    assert await db.subtasks.wait([s1.id], timeout=0.1) == {s1.id: "landed"}  # at once: durable
    pending = asyncio.create_task(db.subtasks.wait([s1.id, s2.id], timeout=10))
    await asyncio.sleep(0.05)
    assert not pending.done()
    started = asyncio.get_running_loop().time()
    await claim_submit_land(db, a)
    assert await asyncio.wait_for(pending, 5) == {s1.id: "landed", s2.id: "landed"}
    assert asyncio.get_running_loop().time() - started < 2  # told by the notification, not a poll
    await db.waiter.stop()
    # A new listener (a restarted process) sees both at once.
    assert await db.subtasks.wait([s1.id, s2.id], timeout=0) == {s1.id: "landed", s2.id: "landed"}


async def test_fused_complete_and_claim(db: Database) -> None:
    [a] = await agents(db, 1)
    s1, _ = await db.subtasks.create_subtask(actor_id=a, title="1")
    s2, _ = await db.subtasks.create_subtask(actor_id=a, title="2")
    first = await db.subtasks.claim(agent_id=a)
    assert first is not None and first.id == s1.id
    nxt = await db.subtasks.claim(agent_id=a, complete=Handle(s1.id, 1), sha=SHA)
    assert nxt is not None and nxt.id == s2.id
    assert (await db.subtasks.get_subtask(s1.id)).status == "submitted"
    with pytest.raises(ClaimSuperseded):  # a completion that does not hold claims nothing
        await db.subtasks.claim(agent_id=a, complete=Handle(s1.id, 1), sha=SHA)
    assert (await db.subtasks.get_subtask(s2.id)).status == "running"


async def test_tree_file_created_atomically_and_idempotently(db: Database) -> None:
    [a] = await agents(db, 1)
    tree = parse_tree({"subtasks": [
        {"key": "root", "title": "root", "children": [
            {"key": "a", "title": "A", "depends_on": ["b"]},
            {"key": "b", "title": "B"},
        ]},
    ]})
    made = await db.subtasks.create_tree(actor_id=a, nodes=tree, key_prefix="plan1")
    assert made["a"].parent_id == made["root"].id
    assert made["a"].status == "blocked" and made["b"].status == "ready"
    assert made["root"].status == "blocked"  # a parent integrates its children: it waits for them
    assert (await db.subtasks.get_subtask(made["root"].id)).depends_on == sorted([made["a"].id, made["b"].id])
    again = await db.subtasks.create_tree(actor_id=a, nodes=tree, key_prefix="plan1")
    assert {k: v.id for k, v in again.items()} == {k: v.id for k, v in made.items()}
    assert sum((await db.subtasks.counts()).values()) == 3


async def test_reloading_a_tree_cannot_block_a_parent_in_flight(db: Database) -> None:
    [a] = await agents(db, 1)
    first = parse_tree([{"key": "p", "title": "P", "children": [{"key": "a", "title": "A"}]}])
    made = await db.subtasks.create_tree(actor_id=a, nodes=first, key_prefix="plan")
    _, released = await claim_submit_land(db, a)  # lands a; p becomes ready
    assert released == [made["p"].id]
    assert (await db.subtasks.claim(agent_id=a)) is not None  # p is running now
    grown = parse_tree([{"key": "p", "title": "P", "children": [{"key": "a", "title": "A"},
                                                                 {"key": "b", "title": "B"}]}])
    with pytest.raises(Conflict, match="cannot wait for new children"):
        await db.subtasks.create_tree(actor_id=a, nodes=grown, key_prefix="plan")
    assert sum((await db.subtasks.counts()).values()) == 2  # all or nothing: b was not created either
    assert (await db.subtasks.get_subtask(made["p"].id)).depends_on == [made["a"].id]


async def test_cancel_a_failed_subtask(db: Database) -> None:
    [a] = await agents(db, 1)
    sub, _ = await db.subtasks.create_subtask(actor_id=a, title="t", max_attempts=1)
    db.subtasks.lease_seconds = 0.01
    await db.subtasks.claim(agent_id=a)
    await asyncio.sleep(0.03)
    assert [r["status"] for r in await db.subtasks.recover_expired(grace_seconds=0)] == ["failed"]
    cancelled = await db.subtasks.cancel(subtask_id=sub.id, reason="nobody will retry it", actor_id=a)
    assert cancelled.status == "cancelled"


async def test_a_requeued_candidate_s_old_runs_are_cancelled_not_run_for_nobody(db: Database) -> None:
    """A killed leader leaves its candidates verifying and their jobs running. The reconciler's requeue cancels
    those jobs with them; and a lost lease re-queues a job only while its candidate still waits on it."""
    a, w = await agents(db, 2)
    await db.repos.create_repo(name="demo", root_sha=SHA, rules=Rules.of(target_branch="main", verifier_command="true",
                               verifier_timeout_s=60, protected_paths=[], max_push_bytes=1 << 20,
                               max_file_bytes=1 << 20))
    cands = []
    for i in range(3):
        await db.subtasks.create_subtask(actor_id=a, title=f"work {i}")
        sub = await db.subtasks.claim(agent_id=a)
        assert sub is not None
        cand = await db.landing.enqueue(repo="demo", subtask_id=sub.id, claim_version=sub.claim_version, owner_id=a,
                                        sha=next_sha(), ref=f"refs/heads/subtasks/{sub.id}/v1", superseded="newer")
        assert await db.landing.take_candidate(cand.id) is not None  # verifying, as the leader's window has it
        cands.append(cand)

    async def job(cand_id: int, purpose: str = "candidate") -> int:
        j = await db.jobs.enqueue_job(repo="demo", commit_sha=next_sha(), command="true", timeout_s=60,
                                      purpose=purpose, candidate_id=cand_id)
        return j.id

    first = await job(cands[0].id)
    assert (await db.jobs.claim_job(worker_id=w, worker_name="killed")) is not None  # running on a dead server
    queued = await job(cands[0].id, "retry")
    requeued = await db.landing.requeue_stuck("demo")
    assert sorted(requeued) == sorted(c.id for c in cands)
    jobs = await db.jobs.get_jobs([first, queued])
    assert {j.status for j in jobs.values()} == {"cancelled"}

    # Lost leases: the job of a candidate no longer verifying is cancelled, one superseded by a newer job of its
    # purpose is cancelled, and one its candidate still waits on goes back to the queue.
    for c in cands[1:]:
        assert await db.landing.take_candidate(c.id) is not None
    orphan, old, live, newer = await job(cands[0].id), await job(cands[1].id), await job(cands[2].id), 0
    for _ in range(3):
        assert await db.jobs.claim_job(worker_id=w, worker_name="killed") is not None
    newer = await job(cands[1].id)
    async with db.pool.connection() as conn:
        await conn.execute("UPDATE verify_jobs SET lease_expires_at = now() - interval '1 hour' "
                           "WHERE status = 'running'")
    got = {r["id"]: r["status"] for r in await db.jobs.recover_jobs(grace_seconds=0)}
    assert got == {orphan: "cancelled", old: "cancelled", live: "queued"}
    assert (await db.jobs.get_job(newer)).status == "queued"
