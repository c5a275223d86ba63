"""The merge queue on a thread of its own (``mergebot.api.landing_thread``): a server's queue and workers run on
their own loop, so request handling that holds its loop (a flood of claims at a thousand agents) never holds a
landing. Through the real app and its lifespan on a real database: the queue's work runs on its thread, it takes
the lead of a new repository while the request-handling loop is held still, a reconcile asked for by a request
runs there and answers here, a failure there comes back here, and closing the app ends the thread."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import psycopg
import pytest

from mergebot.api import create_app
from mergebot.api.landing_thread import LandingThread
from mergebot.db.database import open_database
from mergebot.landing.context import Context
from mergebot.landing.main.repos import add_repo
from mergebot.rules import Rules
from mergebot.settings import Settings
from tests.support.bot import make_project


async def _where(ctx: Context, tag: str) -> tuple[str, str]:
    return threading.current_thread().name, tag


async def _fails(ctx: Context) -> None:
    raise LookupError("from the queue's loop")


def _leaders(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM events WHERE kind = 'queue_leader' AND detail->>'repo' = 'app'"
                           ).fetchone()
    assert row is not None
    return int(row[0])


def _add_repo_elsewhere(settings: Settings, root: Path, source: Path) -> None:
    """A real repository added from another thread with a database of its own: this test's loop stays held."""

    async def add() -> None:
        async with open_database(settings) as other:
            await add_repo(other, root, name="app", source=str(source), rules=Rules.of(verifier_command="pytest -q"))

    done: list[BaseException | None] = []
    thread = threading.Thread(target=lambda: done.append(_run(add)))
    thread.start()
    thread.join(60)
    assert done == [None], done


def _run(fn: Callable[[], Coroutine[Any, Any, None]]) -> BaseException | None:
    try:
        asyncio.run(fn())
    except BaseException as e:  # the test's thread asserts it
        return e
    return None


async def test_the_queue_leads_on_its_own_thread_while_the_request_loop_is_held(settings: Settings,
                                                                                  tmp_path: Path) -> None:
    settings.verifier_workers = 1
    source = make_project(tmp_path / "src")
    app = create_app(settings, run_recovery=False)
    async with app.router.lifespan_context(app):
        services = app.state.services
        queue = services.queue
        assert isinstance(queue, LandingThread)
        assert await queue.on_loop(_where, "x") == ("mergebot-queue", "x")
        assert threading.current_thread().name != "mergebot-queue"
        with pytest.raises(LookupError, match="from the queue's loop"):
            await queue.on_loop(_fails)

        # request handling's loop (this test's) held still from here, as a flood of claims holds it: a repository
        # is added meanwhile (from another thread), and the queue takes its lead and reconciles it on its own loop
        _add_repo_elsewhere(settings, services.root, source)
        queue.poke()
        deadline = time.monotonic() + 30
        while _leaders(settings.database_url) == 0:
            assert time.monotonic() < deadline, "the queue never led the new repository while this loop was held"
            time.sleep(0.05)  # blocking on purpose: nothing of this loop runs

        reports = await queue.reconcile_now()  # asked here, run there between two steps
        assert [(r.repo, r.clean) for r in reports] == [("app", True)], reports
        thread = queue._thread
        assert thread is not None and thread.is_alive()
    assert not thread.is_alive()  # closing the app stopped the queue and its workers, and ended the thread
