"""The HTTP API: ``create_app(settings)`` builds it; nothing is built at import time.

At start-up the app resolves the database (embedded unless MERGEBOT_DATABASE_URL is set), applies migrations,
opens a pool whose every query runs under ``statement_timeout`` (agents drive these queries), starts the
waiter's single LISTEN connection and the recovery loop. Errors are JSON ``{"error": {...}}``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from mergebot import __version__
from mergebot.api.errors import BodyLimit, install_handlers
from mergebot.api.routers import board, subtasks
from mergebot.db.connect import open_pool, prepare
from mergebot.recovery import recovery_loop
from mergebot.settings import Settings
from mergebot.store import Store, Waiter


def create_app(settings: Settings | None = None, *, run_recovery: bool = True) -> FastAPI:
    settings = settings or Settings()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        url = await asyncio.to_thread(prepare, settings)
        pool = await open_pool(url, settings, statement_timeout_ms=settings.statement_timeout_ms)
        store = Store(pool, lease_seconds=settings.lease_seconds)
        waiter = Waiter(url, store)
        await waiter.start()
        app.state.store, app.state.waiter = store, waiter
        tasks: list[asyncio.Task[Any]] = []
        if run_recovery:
            tasks.append(asyncio.create_task(recovery_loop(
                store, interval=settings.recovery_interval_seconds, grace=settings.recovery_grace_seconds)))
        try:
            yield
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await waiter.stop()
            await pool.close()

    app = FastAPI(title="Mergebot", version=__version__, lifespan=lifespan,
                  description="Claims, fenced writes and landed records for fleets of coding agents.")
    app.state.settings = settings
    install_handlers(app)
    app.add_middleware(BodyLimit, limit=settings.max_body_bytes)
    app.include_router(subtasks.router)
    app.include_router(board.router)

    @app.get("/healthz", tags=["health"])
    async def healthz(request: Request) -> JSONResponse:
        store: Store = request.app.state.store
        try:
            await store.ping()
        except Exception:
            return JSONResponse({"ok": False, "database": "unreachable"}, status_code=503)
        return JSONResponse({"ok": True, "database": "ok"})

    return app
