from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from mergebot.db.connect import open_pool
from mergebot.landing.store import LandingStore
from mergebot.settings import Settings
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


@pytest.fixture(params=SERVERS)
def db_url(request: pytest.FixtureRequest, servers: dict[str, Server]) -> Iterator[str]:
    """A fresh, migrated database on each available server (PostgreSQL 18 embedded, and 15 when present)."""
    name = request.param
    if name not in servers:
        servers[name] = Server(name)
    server = servers[name]
    db = server.fresh_db()
    try:
        yield with_db(server.url, db)
    finally:
        server.drop_db(db)


@pytest.fixture
def settings(db_url: str, tmp_path: Any) -> Settings:
    return Settings(database_url=db_url, data_dir=tmp_path / "data", lease_seconds=60,
                    recovery_grace_seconds=0, pool_max_size=40)


@pytest.fixture
async def store(db_url: str, settings: Settings) -> AsyncIterator[LandingStore]:
    pool = await open_pool(db_url, settings, statement_timeout_ms=5000)
    try:
        yield LandingStore(pool, lease_seconds=settings.lease_seconds)
    finally:
        await pool.close()
