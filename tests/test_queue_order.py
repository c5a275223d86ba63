"""The order the queue takes candidates in: priority, then how many subtasks a landing unblocks, then arrival."""

from __future__ import annotations

from pathlib import Path

from mergebot.auth import Role
from mergebot.landing.repos import add_repo, repos_root
from mergebot.verify.jobs import JobStore
from tests.bot import make_project


async def test_the_candidate_that_unblocks_most_goes_first(e2e_store: JobStore, tmp_path: Path) -> None:
    store = e2e_store
    await add_repo(store, repos_root(tmp_path / "data"), name="demo", source=str(make_project(tmp_path / "src")),
                   verifier_command="true")
    ann, _ = await store.add_agent(name="ann", role=Role.AGENT)
    bob, _ = await store.add_agent(name="bob", role=Role.AGENT)
    cat, _ = await store.add_agent(name="cat", role=Role.AGENT)
    leaf, _ = await store.create_subtask(actor_id=None, title="a leaf")
    root, _ = await store.create_subtask(actor_id=None, title="many wait on it")
    urgent, _ = await store.create_subtask(actor_id=None, title="urgent", priority=5)
    for i in range(2):
        await store.create_subtask(actor_id=None, title=f"waits {i}", depends_on=[root.id])
    held = {}
    for agent in (ann, bob, cat):
        sub = await store.claim(agent_id=agent.id)
        assert sub is not None
        held[sub.id] = (agent.id, sub.claim_version)
    assert set(held) == {leaf.id, root.id, urgent.id}
    for sid in (leaf.id, root.id, urgent.id):  # arrival order: leaf, root, urgent
        owner, version = held[sid]
        await store.enqueue(repo="demo", subtask_id=sid, claim_version=version, owner_id=owner, sha=f"{sid:040x}",
                            ref=f"refs/heads/subtasks/{sid}/v{version}")
    order = []
    while (cand := await store.next_candidate("demo")) is not None:
        order.append(cand.subtask_id)
    assert order == [urgent.id, root.id, leaf.id]
