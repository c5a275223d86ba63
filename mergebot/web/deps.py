"""The pages' dependencies, named once: who is looking (``Who``), and what the pages read and act on (``Site``).

A page handler that takes ``who: Who`` is for logged-in viewers only: a visitor never reaches its body, they are
sent to /login (``LoginRequired``, answered by ``login_redirect``) remembering where they were going. The
cookie is authenticated again on every request, so a revoked token stops working at once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any, Protocol, TypeVar

from fastapi import Depends, Request
from fastapi.responses import Response

from mergebot.db.database import Database
from mergebot.landing.intake.admit import Admission
from mergebot.settings import Settings
from mergebot.web import session
from mergebot.web.live import LiveQueue
from mergebot.web.session import Viewer

T = TypeVar("T")


class Queue(Protocol):
    """The merge queue as request handling reaches it (``mergebot.api.landing_thread``): its work on its context
    runs through ``on_loop``, on the queue's own loop."""

    def poke(self) -> None: ...

    @property
    def window(self) -> int: ...

    async def reconcile_now(self) -> Any: ...

    async def on_loop(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T: ...


class SiteServices(Protocol):
    """What the pages need of the server (``mergebot.api.services.Services`` is one)."""

    settings: Settings
    root: Path
    live_queue: LiveQueue
    sandbox: str  # how this server's checks are confined: bwrap, none (the operator's choice) or refused
    sandbox_problem: str | None  # why the sandbox is not usable here (refused)
    admission: Admission  # admission control's view of each lane (the queue page shows it)

    @property
    def db(self) -> Database: ...

    @property
    def queue(self) -> Queue: ...


class LoginRequired(Exception):
    """A visitor asked for a page that needs a login."""


async def login_redirect(request: Request, exc: Exception) -> Response:
    return session.to_login(request)


async def get_site(request: Request) -> SiteServices:
    site: SiteServices = request.app.state.services
    return site


Site = Annotated[SiteServices, Depends(get_site)]


async def maybe_viewer(request: Request, site: Site) -> Viewer | None:
    if not request.cookies.get(session.COOKIE):
        return None  # a visitor: nothing to look up
    return await session.viewer(site.db, request)


Visitor = Annotated[Viewer | None, Depends(maybe_viewer)]  # the viewer, or None for a visitor


async def page_viewer(who: Visitor) -> Viewer:
    if who is None:
        raise LoginRequired
    return who


Who = Annotated[Viewer, Depends(page_viewer)]  # the viewer; a visitor is sent to /login
