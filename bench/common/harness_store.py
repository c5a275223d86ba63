"""The benchmarks' way into the store (``bench/common/harness.py`` re-exports each name): pools and stores on a URL, and
the few writes a benchmark sets its scene with (agents, groups, subtasks, trees, repositories, candidates, landings),
through the stores' own methods.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from psycopg_pool import AsyncConnectionPool

from mergebot.auth import Role
from mergebot.db.connect import open_pool
from mergebot.db.database import Database
from mergebot.landing.main.repos import add_repo
from mergebot.models import Landing
from mergebot.protocol.replay import replay
from mergebot.rules import Rules
from mergebot.settings import Settings
from mergebot.tree import Node

if TYPE_CHECKING:
    from mergebot.db.pages import PageStore
    from mergebot.models import Repo


# -- mergebot's stores: every call a benchmark makes for its setup ---------------------------------------------


class Agent(NamedTuple):
    id: int
    name: str
    token: str


async def open_bench_pool(url: str, *, size: tuple[int, int] | None = None, max_size: int | None = None,
                          statement_timeout_ms: int | None = None) -> AsyncConnectionPool[Any]:
    """A pool configured like ``mergebot serve``'s (``size``: its min and max, else the settings')."""
    settings = Settings(**({"pool_min_size": size[0], "pool_max_size": size[1]} if size else {}))
    return await open_pool(url, settings, statement_timeout_ms=statement_timeout_ms or settings.statement_timeout_ms,
                           max_size=max_size)


async def open_store(url: str, **pool: Any) -> Database:
    """The whole database (``mergebot.db.database.Database``) on a pool of its own (``open_bench_pool``'s
    arguments); close it with ``close_store``."""
    settings = Settings()
    return Database(await open_bench_pool(url, **pool), lease_seconds=settings.lease_seconds,
                    job_lease_seconds=settings.job_lease_seconds)


async def close_store(db: Database) -> None:
    await db.close()


@contextlib.asynccontextmanager
async def store_on(url: str, **pool: Any) -> AsyncIterator[Database]:
    db = await open_store(url, **pool)
    try:
        yield db
    finally:
        await close_store(db)


async def trace_of(url: str) -> str:
    """A finished run's events held to the landing protocol's model (``mergebot.protocol.replay``), as one line:
    accepted, or the first event the model does not allow."""
    async with store_on(url, size=(1, 2)) as db:
        return str(await replay(db))


def app_store(app: Any) -> Database:
    """The database an app made by ``mergebot.api.create_app`` opened in its lifespan."""
    db: Database = app.state.services.db
    return db


def page_reader(db: Database) -> PageStore:
    """The pages' read model (``bench/pages/run.py`` times its reads)."""
    return db.pages


async def add_agent(db: Database, name: str, role: str = "agent") -> Agent:
    """An agent row and its token (``role``: agent, lead, reviewer, ...)."""
    agent, token = await db.agents.add_agent(name=name, role=Role(role))
    return Agent(agent.id, agent.name, token)


async def assign(db: Database, agent: str, group: str, *, by: int | None) -> None:
    await db.agents.assign(agent_name=agent, group_name=group, actor_id=by)


async def open_groups(db: Database, names: Sequence[str], *, description: str, by: int | None) -> None:
    """Groups that are open (idle agents may claim in them), each with ``description`` (``{}`` is the name)."""
    for name in names:
        await db.agents.upsert_group(name=name, description=description.format(name))
        await db.agents.set_group_open(name=name, open=True, actor_id=by)


async def add_subtask(db: Database, title: str, *, paths: Sequence[str] = ()) -> int:
    """A subtask (``paths``: its footprint, the paths it is expected to touch)."""
    sub, _ = await db.subtasks.create_subtask(actor_id=None, title=title, paths=paths)
    return sub.id


async def add_tree(db: Database, nodes: Sequence[Node], *, by: int | None) -> dict[str, int]:
    """A planned tree in one transaction (``mergebot.tree.plan``); node key -> subtask id."""
    return {key: sub.id for key, sub in (await db.subtasks.create_tree(actor_id=by, nodes=nodes)).items()}


async def counts(db: Database) -> dict[str, int]:
    """Subtasks by status."""
    return await db.subtasks.counts()


async def claim(db: Database, agent_id: int) -> tuple[int, int] | None:
    """A claim for setup (not timed): (subtask id, claim version), or None when nothing is ready."""
    sub = await db.subtasks.claim(agent_id=agent_id)
    return None if sub is None else (sub.id, sub.claim_version)


async def add_bench_repo(db: Database, root: Path, *, name: str, source: Path, command: str,
                         timeout_s: int) -> Repo:
    """A repository imported from ``source`` with its check, as ``mergebot repo add --verifier`` does, in the
    repositories' directory ``root`` (a server's: ``repos_root(data_dir)``); the store's record of it."""
    return await add_repo(db, root, name=name, source=str(source), rules=Rules.of(verifier_command=command,
                          verifier_timeout_s=timeout_s))


async def pause_repos(db: Database, names: list[str], reason: str) -> None:
    """An operator's hold on repositories: their queues land nothing."""
    for name in names:
        await db.repos.set_paused(repo=name, paused=True, reason=reason)


async def enqueue(db: Database, *, repo: str, subtask_id: int, claim_version: int, owner_id: int, sha: str,
                  ref: str) -> int:
    """Queue a candidate as post-receive would; its id."""
    cand = await db.landing.enqueue(repo=repo, subtask_id=subtask_id, claim_version=claim_version, owner_id=owner_id,
                                    sha=sha, ref=ref, superseded="superseded by a newer push")
    return cand.id


async def candidate_outcome(db: Database, cand_id: int) -> tuple[str, str]:
    """A candidate's status and reason."""
    cand = await db.landing.get_candidate(cand_id)
    return cand.status, cand.reason or ""


async def candidate_count(db: Database, repo: str) -> int:
    return len(await db.landing.candidates(repo=repo, limit=10_000))


async def land(db: Database, *, subtask_id: int, claim_version: int, owner_id: int, repo: str, sha: str,
               merged_sha: str, command: str) -> list[int]:
    """Land a submitted subtask with ``db.landing.land``, the landing path's own transaction (the landed row, the
    dependents released), without git or a check; the subtasks it released."""
    _, released = await db.landing.land(Landing(
        subtask_id=subtask_id, claim_version=claim_version, owner_id=owner_id, repo=repo,
        target_ref="refs/heads/main", candidate_sha=sha,
        base_sha=hashlib.sha1(f"base {subtask_id}".encode()).hexdigest(), merged_sha=merged_sha,
        tree_sha=hashlib.sha1(f"tree {subtask_id}".encode()).hexdigest(), verifier_command=command,
        verifier_result="pass", duration_ms=0, log_digest=hashlib.sha256(merged_sha.encode()).hexdigest()))
    return released
