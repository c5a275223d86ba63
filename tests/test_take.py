"""Taking the next candidate: the fence is judged inside the statement that takes it, and every candidate the queue
could take that no longer holds its fence is superseded by that same statement, with the reason why."""

from __future__ import annotations

from pathlib import Path

from mergebot import messages as say
from mergebot.auth import Role
from mergebot.db.database import Database
from mergebot.landing.main.repos import add_repo, repos_root
from mergebot.messages.refs import subtask_ref
from mergebot.models import Handle
from mergebot.rules import Rules
from tests.support.bot import make_project


async def test_one_statement_takes_the_fenced_candidate_and_supersedes_the_rest(e2e_db: Database,
                                                                                tmp_path: Path) -> None:
    db = e2e_db
    await add_repo(db, repos_root(tmp_path / "data"), name="demo", source=str(make_project(tmp_path / "src")),
                   rules=Rules.of(verifier_command="true"))
    agents = [(await db.agents.add_agent(name=n, role=Role.AGENT))[0] for n in ("ann", "bob", "cat", "dan")]
    for i in range(4):
        await db.subtasks.create_subtask(actor_id=None, title=f"task {i}", priority=10 - i)  # ann's goes first
    cands = {}
    for n, a in enumerate(agents):
        sub = await db.subtasks.claim(agent_id=a.id)
        assert sub is not None
        cands[a.name] = await db.landing.enqueue(superseded="a newer push", repo="demo", subtask_id=sub.id,
                                                 claim_version=sub.claim_version, owner_id=a.id, sha=f"{n + 1:040x}",
                                                 ref=subtask_ref(sub.id, sub.claim_version))
    ann, bob, cat = agents[0], agents[1], agents[2]
    # while their pushes wait: ann's subtask goes back to her (a lead rejected the work), bob's goes back and he
    # gives it up, and cat's is cancelled
    for who in (ann, bob):
        c = cands[who.name]
        await db.subtasks.reject(handle=Handle(c.subtask_id, c.claim_version), reason="not like this")
    c = cands[bob.name]
    await db.subtasks.release(agent_id=bob.id, handle=Handle(c.subtask_id, c.claim_version))
    eve, _ = await db.agents.add_agent(name="eve", role=Role.AGENT)
    again = await db.subtasks.claim(agent_id=eve.id)  # bob's subtask, at a new claim version
    assert again is not None and again.id == c.subtask_id and again.claim_version == c.claim_version + 1
    await db.subtasks.cancel(subtask_id=cands[cat.name].subtask_id, reason="not needed", actor_id=None)
    assert [(await db.landing.get_candidate(c.id)).status for c in cands.values()] == ["queued"] * 4
    # what the window's check of candidates in flight says of them now (``land.fences``), before the take
    window_says = await db.landing.fences([c.id for c in cands.values()])
    assert window_says[cands["dan"].id] is None

    taken = await db.landing.next_candidate("demo")
    assert taken is not None and taken.id == cands["dan"].id and taken.status == "verifying"
    reasons = {}
    for name in ("ann", "bob", "cat"):
        gone = await db.landing.get_candidate(cands[name].id)
        sub = await db.subtasks.get_subtask(gone.subtask_id)
        # a cancelled subtask's candidate is cancelled (its agent is told so, not that a newer push replaced it)
        assert gone.status == ("cancelled" if sub.status == "cancelled" else "superseded"), (name, gone)
        # the sentence the window's check gave for the same row: one rule, ``candidate_unfenced``
        assert gone.reason == window_says[gone.id], (name, gone.reason, window_says[gone.id])
        expected = (say.fence_cancelled(sub.status_reason or "") if sub.status == "cancelled"
                    else say.fence_status(sub.status) if sub.claim_version == gone.claim_version
                    and sub.owner_id == gone.owner_id else say.fence_reclaimed(sub.claim_version))
        assert gone.reason == expected, (name, gone.reason, sub.status)
        reasons[name] = (gone.status, gone.reason)
    assert reasons == {"ann": ("superseded", say.fence_status("running")),
                       "bob": ("superseded", say.fence_reclaimed(2)),
                       "cat": ("cancelled", say.fence_cancelled("not needed"))}  # named before its lost owner
    # nothing else is left to take, and nothing was passed over by a candidate that was superseded
    assert await db.landing.next_candidate("demo") is None
    assert [(await db.landing.get_candidate(c.id)).passed_over for c in cands.values()] == [0, 0, 0, 0]
