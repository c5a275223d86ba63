"""The order the queue takes candidates in: priority, then how many subtasks a landing unblocks, then arrival."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pygit2

from mergebot.auth import Role
from mergebot.db.database import Database
from mergebot.git import repo as git
from mergebot.landing.context import Context
from mergebot.landing.main.repos import add_repo, repos_root
from mergebot.landing.target import target_for
from mergebot.landing.window.chain import Window
from mergebot.landing.window.executor import Speculator
from mergebot.models import Candidate
from mergebot.rules import Rules
from tests.support.bot import make_project


async def test_the_candidate_that_unblocks_most_goes_first(e2e_db: Database, tmp_path: Path) -> None:
    db = e2e_db
    await add_repo(db, repos_root(tmp_path / "data"), name="demo", source=str(make_project(tmp_path / "src")),
                   rules=Rules.of(verifier_command="true"))
    ann, _ = await db.agents.add_agent(name="ann", role=Role.AGENT)
    bob, _ = await db.agents.add_agent(name="bob", role=Role.AGENT)
    cat, _ = await db.agents.add_agent(name="cat", role=Role.AGENT)
    leaf, _ = await db.subtasks.create_subtask(actor_id=None, title="a leaf")
    root, _ = await db.subtasks.create_subtask(actor_id=None, title="many wait on it")
    urgent, _ = await db.subtasks.create_subtask(actor_id=None, title="urgent", priority=5)
    for i in range(2):
        await db.subtasks.create_subtask(actor_id=None, title=f"waits {i}", depends_on=[root.id])
    held = {}
    for agent in (ann, bob, cat):
        sub = await db.subtasks.claim(agent_id=agent.id)
        assert sub is not None
        held[sub.id] = (agent.id, sub.claim_version)
    assert set(held) == {leaf.id, root.id, urgent.id}
    for sid in (leaf.id, root.id, urgent.id):  # arrival order: leaf, root, urgent
        owner, version = held[sid]
        await db.landing.enqueue(superseded="a newer push", repo="demo", subtask_id=sid, claim_version=version,
                                 owner_id=owner, sha=f"{sid:040x}",
                                 ref=f"refs/heads/subtasks/{sid}/v{version}")
    order = []
    while (cand := await db.landing.next_candidate("demo")) is not None:
        order.append(cand.subtask_id)
    assert order == [urgent.id, root.id, leaf.id]



async def _demo_repo(db: Database, tmp_path: Path) -> tuple[Path, pygit2.Repository, str]:
    """The demo repository in the bot's db: its repos root, its bare repository and main's head."""
    root = repos_root(tmp_path / "data")
    await add_repo(db, root, name="demo", source=str(make_project(tmp_path / "src")),
                   rules=Rules.of(verifier_command="true"))
    bare = git.open_repo(git.bare_path(root, "demo"))
    main = git.head_of(bare, "refs/heads/main")
    assert main is not None
    return root, bare, main


async def _queued_work(db: Database, bare: pygit2.Repository, main: str, name: str) -> tuple[Candidate, str]:
    """Agent ``name`` claims a new subtask and its commit (adding ``<name>.txt`` on main) is queued."""
    agent, _ = await db.agents.add_agent(name=name, role=Role.AGENT)
    await db.subtasks.create_subtask(actor_id=None, title=f"{name}'s")
    claimed = await db.subtasks.claim(agent_id=agent.id)
    assert claimed is not None
    tree = bare.TreeBuilder(bare[main].peel(pygit2.Commit).tree)
    tree.insert(f"{name}.txt", bare.create_blob(name.encode()), pygit2.enums.FileMode.BLOB)
    sig = pygit2.Signature(name, f"{name}@example.com")
    sha = str(bare.create_commit(None, sig, sig, name, tree.write(), [pygit2.Oid(hex=main)]))
    ref = f"refs/heads/subtasks/{claimed.id}/v{claimed.claim_version}"
    cand = await db.landing.enqueue(superseded="a newer push", repo="demo", subtask_id=claimed.id,
                                    claim_version=claimed.claim_version,
                                    owner_id=agent.id, sha=sha, ref=ref)
    return cand, sha


async def test_a_fill_before_a_landing_defers_what_does_not_apply_there(e2e_db: Database, tmp_path: Path) -> None:
    """The runs a landing frees are given out before main moves, on the landing's merge. A candidate already
    contained in that merge (here: the same commit pushed again under a new claim version) must wait for the
    landing, not be rejected as "nothing to land" against a main that has not moved, and may never move."""
    db = e2e_db
    root, bare, main = await _demo_repo(db, tmp_path)
    cand, work = await _queued_work(db, bare, main, "ann")
    about_to_land = git.merge_onto(bare, main, work, "the landing's merge")  # contains ``work``
    assert about_to_land.sha is not None
    spec = Speculator(Context(db, root), width=2)
    window = Window(width=2)
    repo = await db.repos.get_repo("demo")
    await spec.fill(repo, window, target_for(spec.ctx, repo), main, tail=about_to_land.sha)
    assert window.slots == []
    assert cand.id in window.deferred
    after = await db.landing.get_candidate(cand.id)
    assert after.status == "queued", after
    assert "waits for the candidates ahead of it" in (after.reason or "")


async def test_a_staged_candidate_is_merged_once_and_goes_back_when_all_is_re_planned(e2e_db: Database,
                                                                                      tmp_path: Path) -> None:
    """While the window's runs are busy the next candidate is taken and merged onto the tail (staged); the fill
    that follows a result uses that merge instead of merging again, and a re-plan of everything puts a staged
    candidate back in the queue rather than leaving it taken."""
    db = e2e_db
    root, bare, main = await _demo_repo(db, tmp_path)
    cands = [(await _queued_work(db, bare, main, name))[0] for name in ("ann", "bob")]
    spec = Speculator(Context(db, root), width=2)
    repo = await db.repos.get_repo("demo")
    target = target_for(spec.ctx, repo)
    window = Window(width=1)
    await spec.fill(repo, window, target, main)  # ann's takes the one run
    assert [s.cand.id for s in window.slots] == [cands[0].id]
    await spec.stage(repo, window, target, main)  # bob's is merged onto ann's while her run is busy
    staged = window.staged
    assert staged is not None and staged.cand.id == cands[1].id
    assert staged.base == window.slots[0].merge.sha
    assert (await db.landing.get_candidate(cands[1].id)).status == "verifying"
    merges = []
    real = spec.merge

    async def counting(*args: object) -> object:
        merges.append(args)
        return await real(*args)  # type: ignore[arg-type]

    spec.merge = counting  # type: ignore[assignment,method-assign]
    window.width = 2  # a run is free: the fill uses the staged merge as it is
    await spec.fill(repo, window, target, main)
    assert [s.cand.id for s in window.slots] == [cands[0].id, cands[1].id]
    assert window.slots[1].merge.sha == staged.merge.sha and window.slots[1].checkpoint
    assert merges == [] and window.staged is None
    # Staged again (nothing is queued now: nothing to stage), then everything re-planned: back in the queue.
    await spec.cut(window, 1, "test: cut behind ann's")
    await spec.stage(repo, window, target, main)
    assert window.staged is not None and window.staged.cand.id == cands[1].id
    await spec.cut(window, 0, "test: re-plan everything")
    assert window.staged is None and window.slots == []
    for cand in cands:
        assert (await db.landing.get_candidate(cand.id)).status == "queued"


def _commit(bare: pygit2.Repository, base: str, files: dict[str, str], message: str) -> str:
    tree = bare.TreeBuilder(bare[base].peel(pygit2.Commit).tree)
    for name, text in files.items():
        tree.insert(name, bare.create_blob(text.encode()), pygit2.enums.FileMode.BLOB)
    sig = pygit2.Signature("agent", "agent@example.com")
    return str(bare.create_commit(None, sig, sig, message, tree.write(), [pygit2.Oid(hex=base)]))


async def _queue(db: Database, name: str, sha: str) -> Candidate:
    agent, _ = await db.agents.add_agent(name=name, role=Role.AGENT)
    await db.subtasks.create_subtask(actor_id=None, title=f"{name}'s")
    claimed = await db.subtasks.claim(agent_id=agent.id)
    assert claimed is not None
    return await db.landing.enqueue(superseded="a newer push", repo="demo", subtask_id=claimed.id,
                                    claim_version=claimed.claim_version, owner_id=agent.id, sha=sha,
                                    ref=f"refs/heads/subtasks/{claimed.id}/v{claimed.claim_version}")


async def test_a_conflict_with_main_is_rejected_while_the_window_is_full(e2e_db: Database, tmp_path: Path) -> None:
    """With the window's one run busy, a queued candidate that conflicts with main is rejected in that same queue
    step, whether the queue reaches it while staging (it conflicts with the tail, then with main) or only by
    trying the queue on main (``sweep``); one that conflicts only with the candidate ahead of it waits for that
    one, and says so; the next clean one is staged."""
    db = e2e_db
    root, bare, old_main = await _demo_repo(db, tmp_path)
    frank_sha = _commit(bare, old_main, {"calc.py": "def add(a, b):\n    return b + a\n"}, "frank's add")
    bob_sha = _commit(bare, old_main, {"notes.txt": "line 1\nbob's line 2\nline 3\n"}, "bob's notes")
    main = _commit(bare, old_main, {"calc.py": "def add(a, b):\n    return a + b + 0\n",
                                    "notes.txt": "line 1\nmain's line 2\nline 3\n"}, "main moved")
    bare.references["refs/heads/main"].set_target(main)
    ann = await _queue(db, "ann", _commit(bare, main, {"ann.txt": "ann\n"}, "ann's"))
    carol = await _queue(db, "carol", _commit(bare, main, {"ann.txt": "carol\n"}, "carol's"))  # only ann's way
    frank = await _queue(db, "frank", frank_sha)
    eve = await _queue(db, "eve", _commit(bare, main, {"eve.txt": "eve\n"}, "eve's"))
    bob = await _queue(db, "bob", bob_sha)
    spec = Speculator(Context(db, root, poll=0.05), width=1)
    repo = await db.repos.get_repo("demo")
    assert await spec.step(repo)  # one step: ann's run is started and still running
    window = spec.windows["demo"]
    assert [s.cand.id for s in window.slots] == [ann.id] and window.slots[0].result is None
    assert window.staged is not None and window.staged.cand.id == eve.id
    for cand, path in ((frank, "calc.py"), (bob, "notes.txt")):
        after = await db.landing.get_candidate(cand.id)
        assert after.status == "rejected", after
        assert after.verdict is not None and after.verdict["kind"] == "conflict" and after.verdict["paths"] == [path]
        assert after.verdict.get("hunks"), after.verdict
        sub = await db.subtasks.get_subtask(cand.subtask_id)
        assert sub.status == "running"  # back to its owner at once
    waiting = await db.landing.get_candidate(carol.id)
    assert waiting.status == "queued" and waiting.reason == "waits for the candidates ahead of it"
    assert carol.id in window.deferred
    # A candidate that starts verifying no longer says it waits.
    await spec.cut(window, 0, "re-planned")
    taken = await db.landing.next_candidate("demo")
    assert taken is not None and taken.status == "verifying" and taken.reason is None


async def test_a_verdict_reached_while_a_candidate_is_merged_ends_its_wait(e2e_db: Database, tmp_path: Path) -> None:
    """A candidate touching what a failed candidate (judged apart) touches waits for that verdict. When the verdict
    arrives while the candidate is being merged, it must not be deferred on the strength of the wait that just
    ended: nothing would ever plan it again (seen on CI: a lanes drill stuck for two minutes)."""
    db = e2e_db
    root, bare, main = await _demo_repo(db, tmp_path)
    cand, _ = await _queued_work(db, bare, main, "bob")
    spec = Speculator(Context(db, root), width=2)
    repo = await db.repos.get_repo("demo")
    window = Window(width=2)
    judging = asyncio.get_running_loop().create_future()
    window.aside[999] = (judging, frozenset({"bob.txt"}))  # type: ignore[assignment]
    real = spec.merge

    async def verdict_meanwhile(*args: object) -> object:
        merged = await real(*args)  # type: ignore[arg-type]
        window.judged(999)  # what the candidate judged apart does when its verdict is in
        return merged

    spec.merge = verdict_meanwhile  # type: ignore[assignment,method-assign]
    await spec.fill(repo, window, target_for(spec.ctx, repo), main)
    assert [s.cand.id for s in window.slots] == [cand.id] and window.deferred == set()
    judging.cancel()
    # and one deferred with nothing left ahead of it is planned again by the next fill
    await spec.cut(window, 0, "test: re-plan")
    window.deferred.add(cand.id)
    spec.merge = real  # type: ignore[method-assign]
    await spec.fill(repo, window, target_for(spec.ctx, repo), main)
    assert [s.cand.id for s in window.slots] == [cand.id]


async def test_a_risk_aware_queue_takes_the_safer_first_but_passes_none_over_more_than_k_times(
        e2e_db: Database, tmp_path: Path) -> None:
    """Equal priority and nothing unblocked: the least likely to fail goes first, unless an older one has been
    passed over K times already; a repository with ``risk_aware`` off keeps arrival order."""
    db = e2e_db
    await add_repo(db, repos_root(tmp_path / "data"), name="demo", source=str(make_project(tmp_path / "src")),
                   rules=Rules.of(verifier_command="true"))
    risks = [0.9, 0.5, 0.05, 0.04, 0.03, 0.02, 0.01]  # arrival order: the riskiest first
    ids = []
    for i, p in enumerate(risks):
        agent, _ = await db.agents.add_agent(name=f"a{i}", role=Role.AGENT)
        await db.subtasks.create_subtask(actor_id=None, title=f"s{i}")
        sub = await db.subtasks.claim(agent_id=agent.id)
        assert sub is not None
        cand = await db.landing.enqueue(superseded="a newer push", repo="demo", subtask_id=sub.id,
                                        claim_version=sub.claim_version, owner_id=agent.id, sha=f"{sub.id:040x}",
                                        ref=f"refs/heads/subtasks/{sub.id}/v{sub.claim_version}",
                                        risk=(p, {"p": p}))
        ids.append(cand.id)
    order = []
    while (cand := await db.landing.next_candidate("demo", max_passes=2)) is not None:
        order.append(cand.id)
    # safest first, until the older ones have been passed over twice: then they go, the oldest first
    assert order == [ids[6], ids[5], *ids[:5]], (order, ids)
    async with db.pool.connection() as conn:
        rows = await (await conn.execute("SELECT max(passed_over) FROM candidates WHERE repo = 'demo'")).fetchall()
    assert rows[0][0] == 2
    async with db.pool.connection() as conn:  # with a bound that is never reached: safest first throughout
        await conn.execute("UPDATE candidates SET status = 'queued', passed_over = 0 WHERE repo = 'demo'")
    order = []
    while (cand := await db.landing.next_candidate("demo", max_passes=100)) is not None:
        order.append(cand.id)
    assert order == ids[::-1]

    # the same queue with the estimate off: arrival order
    async with db.pool.connection() as conn:
        await conn.execute("UPDATE candidates SET status = 'queued', passed_over = 0 WHERE repo = 'demo'")
        await conn.execute("UPDATE repos SET risk_aware = false WHERE name = 'demo'")
    order = []
    while (cand := await db.landing.next_candidate("demo", max_passes=2)) is not None:
        order.append(cand.id)
    assert order == ids
