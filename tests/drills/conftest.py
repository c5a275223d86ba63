"""The drill rig: a real ``mergebot serve`` on a real PostgreSQL, an admin token, a repository with a quick real
check, and the over-the-wire ``mergebot.drill.scenarios.Drill`` that pushes with real git over HTTP.

Drills marked ``long_drill`` (longer soaks) are skipped unless MERGEBOT_LONG_DRILLS=1.
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from mergebot.auth import Role
from mergebot.client import Client
from mergebot.db.connect import open_pool
from mergebot.db.database import Database
from mergebot.drill.gather import stable_check
from mergebot.drill.invariants import Push, Violation
from mergebot.drill.scenarios import Drill
from mergebot.landing.main.repos import add_repo, repos_root
from mergebot.rules import Rules
from mergebot.settings import Settings
from tests.support.bot import BotProcess, make_project

QUICK_CHECK = "test -f calc.py && test -f tests/test_calc.py"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "long_drill: a longer soak, skipped unless MERGEBOT_LONG_DRILLS=1")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("MERGEBOT_LONG_DRILLS") == "1":
        return
    skip = pytest.mark.skip(reason="a long drill: set MERGEBOT_LONG_DRILLS=1")
    for item in items:
        if "long_drill" in item.keywords:
            item.add_marker(skip)


def drill_seed() -> int:
    """Random points, reproducible: the seed is printed, and MERGEBOT_DRILL_SEED replays one."""
    seed = int(os.environ.get("MERGEBOT_DRILL_SEED") or random.randrange(1 << 30))
    print(f"drill seed: {seed} (MERGEBOT_DRILL_SEED={seed} replays it)")
    return seed


@dataclass
class Rig:
    bot: BotProcess
    db: Database
    admin: str
    work: Path
    data: Path
    repo: str = "demo"
    kills: int = 0
    notes: list[str] = field(default_factory=list)

    def drill(self, seed: int | None = None) -> Drill:
        return Drill(self.bot.url, self.admin, self.repo, self.work / "agents", log=print, seed=seed)

    def client(self, token: str | None = None) -> Client:
        return Client(self.bot.url, token or self.admin, timeout=30)

    def sigkill(self) -> None:
        assert self.bot.proc is not None
        self.bot.proc.send_signal(signal.SIGKILL)
        assert self.bot.proc.wait(30) == -signal.SIGKILL
        self.kills += 1

    def violations(self, pushes: list[Push], *, settled: bool = True) -> list[Violation]:
        return stable_check(self.client(), self.bot.url, self.admin, self.repo, self.work / "check", pushes,
                            settled=settled, attempts=3)

    async def wait_settled(self, ids: list[int], timeout: float = 60) -> None:
        """Until every subtask in ``ids`` has landed and no candidate is still queued or in flight."""
        deadline = time.monotonic() + timeout
        while True:
            subs = [await self.db.subtasks.get_subtask(i) for i in ids]
            cands = await self.db.landing.candidates(repo=self.repo, limit=1000)
            busy = [c["id"] for c in cands if c["status"] in ("queued", "verifying", "landing")]
            if all(s.status == "landed" for s in subs) and not busy:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"not settled: {[(s.id, s.status) for s in subs]}, busy candidates {busy}\n"
                                     + self.bot.log.read_text()[-4000:])
            time.sleep(0.3)


async def make_rig(db: Database, db_url: str, tmp: Path, *, verifier: str = QUICK_CHECK, **env: str) -> Rig:
    _, admin = await db.agents.add_agent(name="root", role=Role.ADMIN)
    data = tmp / "data"
    await add_repo(db, repos_root(data), name="demo", source=str(make_project(tmp / "src")),
                   rules=Rules.of(verifier_command=verifier, verifier_timeout_s=60, protected_paths=["ci/"]))
    bot = BotProcess(db_url, data, MERGEBOT_VERIFIER_SANDBOX="none", **env).start()
    (tmp / "work").mkdir()
    return Rig(bot, db, admin, tmp / "work", data)


RigFactory = Callable[..., Awaitable[Rig]]


async def open_store(url: str, data: Path) -> Database:
    """The drill's own stores on a PostgreSQL it stops and starts (a pool of its own; reconnects as the bot does)."""
    pool = await open_pool(url, Settings(database_url=url, data_dir=data), statement_timeout_ms=5000)
    return Database(pool, lease_seconds=60)


@pytest.fixture
async def rig_factory(e2e_db: Database, e2e_db_url: str, tmp_path: Path) -> AsyncIterator[RigFactory]:
    made: list[Rig] = []

    async def make(**env: Any) -> Rig:
        rig = await make_rig(e2e_db, e2e_db_url, tmp_path, **env)
        made.append(rig)
        return rig

    yield make
    for rig in made:
        rig.bot.stop()
