"""The HTTP API: ``create_app(settings)`` builds it; nothing is built at import time.

At start-up the app resolves the database (embedded unless MERGEBOT_DATABASE_URL is set), applies migrations,
opens a pool whose every query runs under ``statement_timeout`` (agents drive these queries), starts the
waiter's single LISTEN connection, the recovery loop and the merge queue (which reconciles each repository it
leads before landing anything). Git is served over smart HTTP at ``/git/<repo>.git``; its hooks call back
``/internal/hooks``. Errors are JSON ``{"error": {...}}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from mergebot import __version__
from mergebot.api.errors import BodyLimit, install_handlers
from mergebot.api.routers import board, hooks, jobs, landing, subtasks, views, webhooks
from mergebot.auth import Role, allowed
from mergebot.db.connect import open_pool, prepare
from mergebot.db.roles import app_connection
from mergebot.forge.outbox import StatusSender
from mergebot.forge.store import ForgeStore
from mergebot.forge.webhooks import WebhookHandler
from mergebot.git.smarthttp import GitHttp
from mergebot.landing.queue import LandingQueue
from mergebot.landing.repos import repos_root
from mergebot.models import Agent
from mergebot.recovery import recovery_loop
from mergebot.settings import Settings
from mergebot.store import Store, Waiter
from mergebot.verify.jobs import JOB_CHANNEL, JobStore
from mergebot.verify.worker import local_workers
from mergebot.web import routes as web_pages

log = logging.getLogger("mergebot.api")


def create_app(settings: Settings | None = None, *, run_recovery: bool = True, run_queue: bool = True) -> FastAPI:
    settings = settings or Settings()
    root = repos_root(settings.data_dir)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        url = await asyncio.to_thread(prepare, settings)
        app_db = await asyncio.to_thread(app_connection, url, settings.database_app_role)
        log.info("request handling connects to the database as %s (%s)", app_db.role or "the owner", app_db.how)
        pool = await open_pool(app_db.url, settings, statement_timeout_ms=settings.statement_timeout_ms,
                               options=app_db.options)
        store = JobStore(pool, lease_seconds=settings.lease_seconds)
        store.job_lease_seconds = settings.job_lease_seconds
        waiter = Waiter(app_db.url, store, channels=(JOB_CHANNEL,))
        await waiter.start()
        store.waiter = waiter  # the queue's waits on verify jobs share the waiter's connection
        queue = LandingQueue(store, root, speculation=settings.speculation_window, batch=settings.batch_size,
                             post_land_rerun=settings.post_land_rerun,
                             retry_failures=settings.retry_failed_checks)
        forge_store = ForgeStore(pool, lease_seconds=settings.lease_seconds)
        sender = StatusSender(forge_store, public_url=settings.public_url or f"http://{settings.host}:{settings.port}")
        app.state.store, app.state.waiter, app.state.queue = store, waiter, queue
        app.state.forge_store = forge_store
        app.state.app_db = app_db

        def poke() -> None:
            queue.poke()
            sender.poke()

        app.state.webhooks = WebhookHandler(forge_store, store, root, poke=poke)
        tasks: list[asyncio.Task[Any]] = []
        if run_queue:
            tasks.append(asyncio.create_task(queue.run(), name="mergebot-queue"))
            tasks.append(asyncio.create_task(sender.run(), name="mergebot-forge-statuses"))
            workers = local_workers(store, root, settings.data_dir, url, count=settings.verifier_workers,
                                    sandbox=settings.verifier_sandbox,
                                    heartbeat_every=settings.job_lease_seconds / 3, wake_on=queue.on_job)
            for i, worker in enumerate(workers):
                tasks.append(asyncio.create_task(worker.run(), name=f"mergebot-verifier-{i}"))
        if run_recovery:
            tasks.append(asyncio.create_task(recovery_loop(
                store, interval=settings.recovery_interval_seconds, grace=settings.recovery_grace_seconds)))
        try:
            yield
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await queue.close()
            await waiter.stop()
            await pool.close()

    app = FastAPI(title="Mergebot", version=__version__, lifespan=lifespan,
                  description="Claims, fenced writes and landed records for fleets of coding agents.")
    app.state.settings = settings
    app.state.repos_root = root
    install_handlers(app)
    app.add_middleware(BodyLimit, limit=settings.max_body_bytes)
    app.include_router(subtasks.router)
    app.include_router(board.router)
    app.include_router(landing.router)
    app.include_router(jobs.router)
    app.include_router(hooks.router)
    app.include_router(webhooks.router)
    app.include_router(web_pages.router)
    app.include_router(views.router)

    async def git_identity(token: str) -> Agent | None:
        store: Store = app.state.store
        return await store.authenticate(token)

    app.state.git = GitHttp(
        root,
        authenticate=git_identity,
        may_push=lambda agent: allowed(Role(agent.role), "claim"),
        repo_exists=lambda name: (root / f"{name}.git").is_dir(),
        hook_url=lambda: f"http://127.0.0.1:{settings.port}/internal/hooks",
        concurrency=settings.git_concurrency,
    )
    app.mount("/git", app.state.git)

    @app.get("/healthz", tags=["health"], responses={
        200: {"description": "Serving, and the database answers", "content": {"application/json": {"example": {
            "ok": True, "database": "ok"}}}},
        503: {"description": "The database does not answer", "content": {"application/json": {"example": {
            "ok": False, "database": "unreachable"}}}}})
    async def healthz(request: Request) -> JSONResponse:
        store: Store = request.app.state.store
        try:
            await store.ping()
        except Exception:
            return JSONResponse({"ok": False, "database": "unreachable"}, status_code=503)
        return JSONResponse({"ok": True, "database": "ok"})

    return app
