from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from mergebot.auth import Role
from mergebot.db.connect import open_pool
from mergebot.landing.repos import add_repo, repos_root
from mergebot.settings import Settings
from mergebot.verify.jobs import JobStore
from tests.bot import BotProcess, Fleet, check_command, make_project
from tests.pg import Server, available_servers, with_db

SERVERS = available_servers()


@pytest.fixture(autouse=True, scope="session")
def _clean_git_config(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    # Like pygit2's own tests: no global or system git configuration leaks into ours.
    home = tmp_path_factory.mktemp("home")
    old = {k: os.environ.get(k) for k in ("GIT_CONFIG_GLOBAL", "GIT_CONFIG_NOSYSTEM", "HOME")}
    os.environ["GIT_CONFIG_GLOBAL"] = str(home / "gitconfig")
    os.environ["GIT_CONFIG_NOSYSTEM"] = "1"
    yield
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


_servers: dict[str, Server] = {}


@pytest.fixture(scope="session")
def servers() -> Iterator[dict[str, Server]]:
    yield _servers
    for s in _servers.values():
        s.stop()


@contextlib.contextmanager
def fresh_database(servers: dict[str, Server], name: str) -> Iterator[str]:
    """A fresh database copied from the migrated template on server ``name`` (started on first use)."""
    if name not in servers:
        servers[name] = Server(name)
    server = servers[name]
    db = server.fresh_db()
    try:
        yield with_db(server.url, db)
    finally:
        server.drop_db(db)


@pytest.fixture(params=SERVERS)
def db_url(request: pytest.FixtureRequest, servers: dict[str, Server]) -> Iterator[str]:
    """A fresh, migrated database on each available server (PostgreSQL 18 embedded, and 15 when present)."""
    with fresh_database(servers, request.param) as url:
        yield url


@pytest.fixture
def settings(db_url: str, tmp_path: Any) -> Settings:
    return Settings(database_url=db_url, data_dir=tmp_path / "data", lease_seconds=60,
                    recovery_grace_seconds=0, pool_max_size=40)


@pytest.fixture
async def store(db_url: str, settings: Settings) -> AsyncIterator[JobStore]:
    pool = await open_pool(db_url, settings, statement_timeout_ms=5000)
    try:
        yield JobStore(pool, lease_seconds=settings.lease_seconds)
    finally:
        await pool.close()


@pytest.fixture
async def fleet(e2e_store: JobStore, e2e_db_url: str, tmp_path: Path) -> AsyncIterator[Fleet]:
    store = e2e_store
    data = tmp_path / "data"
    tokens = {}
    for name, role in (("lead", Role.LEAD), ("ann", Role.AGENT), ("bob", Role.AGENT), ("rita", Role.REVIEWER)):
        _, tokens[name] = await store.add_agent(name=name, role=role)
    await add_repo(store, repos_root(data), name="demo", source=str(make_project(tmp_path / "src")),
                   verifier_command=check_command(), verifier_timeout_s=60, protected_paths=["ci/"])
    bot = BotProcess(e2e_db_url, data).start()
    try:
        yield Fleet(bot, store, tokens, tmp_path / "work")
    finally:
        bot.stop()


@pytest.fixture
def e2e_db_url(servers: dict[str, Server]) -> Iterator[str]:
    """End-to-end tests run on one server (the embedded one, or the external one given); the store's SQL is
    covered on every server by the store tests."""
    with fresh_database(servers, SERVERS[0]) as url:
        yield url


@pytest.fixture
async def e2e_store(e2e_db_url: str, tmp_path: Path) -> AsyncIterator[JobStore]:
    settings = Settings(database_url=e2e_db_url, data_dir=tmp_path / "data", lease_seconds=60)
    pool = await open_pool(e2e_db_url, settings, statement_timeout_ms=5000)
    try:
        yield JobStore(pool, lease_seconds=60)
    finally:
        await pool.close()
