"""The HTTP API: ``create_app(settings)`` builds it; nothing is built at import time.

The app holds one ``Services`` (``mergebot.api.services``), made here and started by the app's lifespan: the
database, the merge queue, the webhook handler and the workers. Git is served over smart HTTP at
``/git/<repo>.git``; its hooks call back ``/internal/hooks``. Errors are JSON ``{"error": {...}}``.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from fastapi import FastAPI
from fastapi.responses import JSONResponse

from mergebot import __version__
from mergebot import messages as say
from mergebot.api.deps import ServicesDep
from mergebot.api.errors import BodyLimit, install_handlers
from mergebot.api.routers import board, hooks, jobs, landing, subtasks, views, webhooks
from mergebot.api.services import Services
from mergebot.settings import Settings
from mergebot.web import login as web_login
from mergebot.web import routes as web_pages
from mergebot.web import trends as web_trends
from mergebot.web.deps import LoginRequired, login_redirect


def create_app(settings: Settings | None = None, *, run_recovery: bool = True, run_queue: bool = True) -> FastAPI:
    settings = settings or Settings()
    services = Services(settings)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await services.start(run_queue=run_queue, run_recovery=run_recovery)
        try:
            yield
        finally:
            await services.stop()

    app = FastAPI(title="Mergebot", version=__version__, lifespan=lifespan,
                  description="Claims, fenced writes and landed records for fleets of coding agents.")
    app.state.settings = settings
    app.state.services = services
    install_handlers(app)
    app.add_exception_handler(LoginRequired, login_redirect)
    app.add_middleware(BodyLimit, limit=settings.max_body_bytes)
    for router in (subtasks.router, board.router, landing.router, jobs.router, hooks.router, webhooks.router,
                   web_login.router, web_pages.router, web_trends.router, views.router):
        app.include_router(router)
    app.mount("/git", services.git)

    @app.get("/healthz", tags=["health"], responses={
        200: {"description": "Serving, and the database answers; `unattested` names, per repository, the commits of "
              "main that no landing statement explains (moved around the bot) until an admin resumes it",
              "content": {"application/json": {"example": {"ok": True, "database": "ok"}}}},
        503: {"description": "The database does not answer, or its commits wait for a synchronous standby",
              "content": {"application/json": {"example": {"ok": False, "database": "unreachable"}}}}})
    async def healthz(services: ServicesDep) -> JSONResponse:
        try:  # one read: it answers whether the database does, and whether its commits hang on a standby
            waiting, oldest = await services.db.commits_waiting()
        except Exception:
            return JSONResponse({"ok": False, "database": "unreachable"}, status_code=503)
        if stalled := say.commits_stalled(waiting, oldest):  # reads answer, writes hang: say so, do not hang
            return JSONResponse({"ok": False, "database": "commits_waiting", "waiting_commits": waiting,
                                 "oldest_s": round(oldest, 1), "message": stalled}, status_code=503)
        body: dict[str, object] = {"ok": True, "database": "ok"}
        if unattested := await services.db.repos.unattested():  # the audit of main: moves no statement explains
            body["unattested"] = {r["name"]: {
                "commits": list(r["unattested"].get("commits") or [])[:20], "count": r["unattested"].get("count"),
                "message": say.unattested_summary(r["unattested"].get("commits") or [],
                                                  int(r["unattested"].get("count") or 0)),
                "seen": say.unattested_seen_hint(r["name"])} for r in unattested}
        return JSONResponse(body)

    return app
