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


async def test_a_fill_before_a_landing_defers_what_does_not_apply_there(e2e_store: JobStore, tmp_path: Path) -> None:
    """The runs a landing frees are given out before main moves, on the landing's merge. A candidate already
    contained in that merge (here: the same commit pushed again under a new claim version) must wait for the
    landing, not be rejected as "nothing to land" against a main that has not moved, and may never move."""
    import pygit2

    from mergebot.git import repo as git
    from mergebot.landing.queue import LandingQueue, Window

    store = e2e_store
    root = repos_root(tmp_path / "data")
    await add_repo(store, root, name="demo", source=str(make_project(tmp_path / "src")), verifier_command="true")
    ann, _ = await store.add_agent(name="ann", role=Role.AGENT)
    sub, _ = await store.create_subtask(actor_id=None, title="one")
    claimed = await store.claim(agent_id=ann.id)
    assert claimed is not None and claimed.id == sub.id
    bare = git.open_repo(git.bare_path(root, "demo"))
    main = git.head_of(bare, "refs/heads/main")
    assert main is not None
    tree = bare.TreeBuilder(bare[main].peel(pygit2.Commit).tree)
    tree.insert("one.txt", bare.create_blob(b"1\n"), pygit2.enums.FileMode.BLOB)
    sig = pygit2.Signature("ann", "ann@example.com")
    work = str(bare.create_commit(None, sig, sig, "one", tree.write(), [pygit2.Oid(hex=main)]))
    about_to_land = git.merge_onto(bare, main, work, "the landing's merge")  # contains ``work``
    assert about_to_land.sha is not None
    cand = await store.enqueue(repo="demo", subtask_id=sub.id, claim_version=claimed.claim_version, owner_id=ann.id,
                               sha=work, ref=f"refs/heads/subtasks/{sub.id}/v{claimed.claim_version}")
    queue = LandingQueue(store, root, speculation=2)
    window = Window(width=2)
    repo = await store.get_repo("demo")
    await queue._fill(repo, window, git.bare_path(root, "demo"), main, tail=about_to_land.sha)
    assert window.slots == []
    assert cand.id in window.deferred
    after = await store.get_candidate(cand.id)
    assert after.status == "queued", after
    assert "waits for the candidates ahead of it" in (after.reason or "")
