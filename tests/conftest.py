from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from mergebot.api import create_app
from mergebot.auth import Role
from mergebot.db.database import Database
from mergebot.landing.main.repos import add_repo, forge_settings, repos_root
from mergebot.rules import Rules
from mergebot.settings import Settings
from tests.support.bot import (
    BotProcess,
    Fleet,
    check_command,
    forge_remote,
    git,
    make_project,
    start_fleet,
    stop_keepers,
)
from tests.support.forge_fleet import SECRET, TOKEN, ForgeFleet
from tests.support.forge_standin import ForgeStandin
from tests.support.lanes import Lanes, lane_site
from tests.support.pg import Server, available_servers, with_db
from tests.support.security import ROLES, Api
from tests.support.site import BASE, SHA, Site

SERVERS = available_servers()


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto`` (pyproject's addopts): one worker per core, at most four. Each worker starts its own PostgreSQL
    servers and its tests their own bots and checks, so more workers than cores only queue behind each other."""
    return max(1, min(4, os.cpu_count() or 1))


@contextlib.contextmanager
def environ_restored(*names: str) -> Iterator[None]:
    """Whatever is done to these environment variables inside, they are as they were after."""
    old = {k: os.environ.get(k) for k in names}
    yield
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(autouse=True, scope="session")
def _clean_git_config(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    # Like pygit2's own tests: no global or system git configuration leaks into ours.
    home = tmp_path_factory.mktemp("home")
    with environ_restored("GIT_CONFIG_GLOBAL", "GIT_CONFIG_NOSYSTEM", "HOME"):
        os.environ["GIT_CONFIG_GLOBAL"] = str(home / "gitconfig")
        os.environ["GIT_CONFIG_NOSYSTEM"] = "1"
        yield


_servers: dict[str, Server] = {}


@pytest.fixture(scope="session")
def servers() -> Iterator[dict[str, Server]]:
    yield _servers
    for s in _servers.values():
        s.stop()


def server_named(servers: dict[str, Server], name: str) -> Server:
    """Server ``name`` (``SERVERS``), started on first use and kept for the session."""
    if name not in servers:
        servers[name] = Server(name)
    return servers[name]


@pytest.fixture(params=SERVERS)
def server(request: pytest.FixtureRequest, servers: dict[str, Server]) -> Server:
    """Each available server in turn (the tests that make their own databases on it)."""
    return server_named(servers, request.param)


@contextlib.contextmanager
def fresh_database(servers: dict[str, Server], name: str) -> Iterator[str]:
    """A fresh database copied from the migrated template on server ``name`` (started on first use)."""
    server = server_named(servers, name)
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


@contextlib.asynccontextmanager
async def connected(url: str, settings: Settings) -> AsyncIterator[Database]:
    """The stores on ``url`` (``mergebot.db.database.Database``), as the server composes them; closed after."""
    database = await Database.connect(url, settings, statement_timeout_ms=5000)
    try:
        yield database
    finally:
        await database.close()


@pytest.fixture
async def db(db_url: str, settings: Settings) -> AsyncIterator[Database]:
    """The stores on a fresh database, on each available server."""
    async with connected(db_url, settings) as database:
        yield database


@pytest.fixture
def app_client(settings: Settings) -> Iterator[TestClient]:
    """The app in-process on a fresh database (each available server), without recovery or the queue."""
    with TestClient(create_app(settings, run_recovery=False, run_queue=False)) as client:
        yield client


@pytest.fixture
async def roles_api(db: Database, settings: Settings) -> AsyncIterator[Api]:
    """The app in-process with one agent of each role (``tests.support.security.ROLES``), bodies capped at 64 KiB."""
    settings.max_body_bytes = 64 * 1024
    tokens = {}
    for name, role in ROLES:
        _, tokens[name] = await db.agents.add_agent(name=name, role=role)
    with TestClient(create_app(settings, run_recovery=False, run_queue=False)) as client:
        yield Api(client, tokens)


@pytest.fixture
async def site(settings: Settings) -> AsyncIterator[Site]:
    """The pages in process (``tests.support.site``): agents root, lead, ann, bob, rita; repository ``app``."""
    app = create_app(settings, run_recovery=False, run_queue=False)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=BASE) as client:
            s = Site(app, client, app.state.services.db)
            for name, role in (("root", Role.ADMIN), ("lead", Role.LEAD), ("ann", Role.AGENT), ("bob", Role.AGENT),
                               ("rita", Role.REVIEWER)):
                s.agents[name], s.tokens[name] = await s.db.agents.add_agent(name=name, role=role)
            await s.db.repos.create_repo(name="app", root_sha=SHA, rules=Rules.of(target_branch="main",
                                         verifier_command="pytest -q", verifier_timeout_s=60, protected_paths=[],
                                         max_push_bytes=1 << 20, max_file_bytes=1 << 20))
            yield s


@pytest.fixture
async def lanes(settings: Settings, db: Database) -> AsyncIterator[Lanes]:
    """Admission control's test site (``tests/support/lanes.py``): measuring on every claim, with caps."""
    async with lane_site(settings, db) as s:
        yield s


def bot_env(request: pytest.FixtureRequest) -> dict[str, str]:
    """The variables a test's ``@pytest.mark.bot_env(NAME="value", ...)`` gives its fixture's first bot start."""
    marker = request.node.get_closest_marker("bot_env")
    return dict(marker.kwargs) if marker else {}


@pytest.fixture
async def fleet(e2e_db: Database, e2e_db_url: str, tmp_path: Path, request: pytest.FixtureRequest
                ) -> AsyncIterator[Fleet]:
    """Agents lead, ann, bob and rita; repository ``demo``; the bot started. A test marked
    ``@pytest.mark.bot_env(NAME="value", ...)`` has its bot's first start given those variables, as
    ``fleet.bot.start(NAME="value")`` gives them (a later ``start()`` runs without them), instead of starting a bot
    only to stop it and start it again (3-4 s a test, issue 42)."""
    db = e2e_db
    data = tmp_path / "data"
    tokens = {}
    for name, role in (("lead", Role.LEAD), ("ann", Role.AGENT), ("bob", Role.AGENT), ("rita", Role.REVIEWER)):
        _, tokens[name] = await db.agents.add_agent(name=name, role=role)
    await add_repo(db, repos_root(data), name="demo", source=str(make_project(tmp_path / "src")),
                   rules=Rules.of(verifier_command=check_command(), verifier_timeout_s=60, protected_paths=["ci/"]))
    bot = BotProcess(e2e_db_url, data).start(**bot_env(request))
    try:
        yield Fleet(bot, db, tokens, tmp_path / "work")
    finally:
        stop_keepers(tmp_path / "work")
        bot.stop()


@pytest.fixture
async def forge_fleet(e2e_db: Database, e2e_db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                      request: pytest.FixtureRequest) -> AsyncIterator[ForgeFleet]:
    """A bot in forge mode on the GitHub stand-in (``tests.support.forge_fleet``): repository ``calc``, agents ann
    (GitHub login Ann-GH linked) and bob. ``@pytest.mark.bot_env(...)`` as for ``fleet``."""
    db = e2e_db
    remote = forge_remote(make_project(tmp_path / "src"), tmp_path / "forge" / "calc.git")
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    monkeypatch.setenv("GITEA_TOKEN", TOKEN)
    monkeypatch.setenv("MERGEBOT_WEBHOOK_SECRET", SECRET)
    agents = {}
    for name in ("ann", "bob"):
        a, _ = await db.agents.add_agent(name=name, role=Role.AGENT)
        agents[name] = a.id
    await db.forge.link(forge="github", login="Ann-GH", agent_id=agents["ann"])
    with ForgeStandin(token=TOKEN, bare_repo=remote) as forge:
        data = tmp_path / "data"
        await add_repo(db, repos_root(data), name="calc", source=None, rules=Rules.of(verifier_command=check_command(),
                       verifier_timeout_s=60, protected_paths=["ci/"]),
                       forge=forge_settings("github", "acme/calc", api_url=forge.url, git_url=str(remote)))
        bot = BotProcess(e2e_db_url, data, GITHUB_TOKEN=TOKEN, GITEA_TOKEN=TOKEN,
                         MERGEBOT_WEBHOOK_SECRET=SECRET).start(**bot_env(request))
        (tmp_path / "work").mkdir()
        try:
            yield ForgeFleet(bot, db, forge, remote, tmp_path / "work", agents)
        finally:
            bot.stop()


@pytest.fixture
def var_tmp() -> Iterator[Path]:
    """A directory outside /tmp (a sandboxed run has a private /tmp, so paths under it prove nothing)."""
    where = Path(tempfile.mkdtemp(prefix="mb-var-tmp-", dir="/var/tmp"))
    try:
        yield where
    finally:
        shutil.rmtree(where, ignore_errors=True)


@pytest.fixture
def e2e_db_url(servers: dict[str, Server]) -> Iterator[str]:
    """End-to-end tests run on one server (the embedded one, or the external one given); the stores' SQL is
    covered on every server by the store tests."""
    with fresh_database(servers, SERVERS[0]) as url:
        yield url


@pytest.fixture
async def e2e_db(e2e_db_url: str, tmp_path: Path) -> AsyncIterator[Database]:
    settings = Settings(database_url=e2e_db_url, data_dir=tmp_path / "data", lease_seconds=60)
    async with connected(e2e_db_url, settings) as database:
        yield database


@pytest.fixture
async def make_fleet(e2e_db: Database, e2e_db_url: str, tmp_path: Path) -> AsyncIterator[Callable[..., object]]:
    """``make(verifier, broken_main=False, repo=None, **bot_env)``: a fleet (root, ann, bob) on a new repository
    and its check; ``repo`` overrides the repository's settings (``verifier_timeout_s``, ``max_file_bytes``, ...)."""
    bots: list[BotProcess] = []

    async def make(verifier: str, *, broken_main: bool = False, repo: dict[str, Any] | None = None,
                   **env: str) -> Fleet:
        src = make_project(tmp_path / "src")
        if broken_main:
            (src / "calc.py").write_text("def add(a, b):\n    return a - b\n")
            git(["commit", "-qam", "a bug on main"], src)
        rules = Rules.of(verifier_command=verifier, **{"verifier_timeout_s": 60, **(repo or {})})
        fleet = await start_fleet(e2e_db, e2e_db_url, src, tmp_path, rules, **env)
        bots.append(fleet.bot)
        return fleet

    yield make
    stop_keepers(tmp_path / "work")
    for b in bots:
        b.stop()
