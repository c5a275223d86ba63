"""Dependencies named once: the database, the app's services, paging, the authenticated agent, and role checks."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import Depends, Query, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from mergebot import auth
from mergebot import messages as say
from mergebot.api.services import Services
from mergebot.db.database import Database
from mergebot.errors import Forbidden, Unauthorized
from mergebot.models import Agent

_bearer = HTTPBearer(auto_error=False, description="The agent's token, shown once by `mergebot agent add`.")


# These are ``async def`` on purpose, though they never await: FastAPI runs a plain ``def`` dependency in its
# thread pool, which costs every request a hop to a worker thread and back (seen with py-spy under
# `python -m bench.load`; on a busy machine each hop also waits for the OS to schedule that thread).
async def get_services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


async def get_db(request: Request) -> Database:
    services: Services = request.app.state.services
    return services.db


ServicesDep = Annotated[Services, Depends(get_services)]
DbDep = Annotated[Database, Depends(get_db)]

# Paging query parameters: the last id already seen, and how many rows at the most.
After = Annotated[int, Query(ge=0)]
Limit = Annotated[int, Query(ge=1, le=1000)]


async def current_agent(
    db: DbDep,
    creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Agent:
    """The caller, from its token and nothing else. Identity is never taken from a request body."""
    if creds is None or creds.scheme.lower() != "bearer" or not creds.credentials:
        raise Unauthorized(say.NO_TOKEN)
    if len(creds.credentials) > 200:
        raise Unauthorized(say.BAD_TOKEN)
    agent = await db.agents.authenticate(creds.credentials)
    if agent is None:
        raise Unauthorized(say.BAD_TOKEN)
    return agent


CurrentAgent = Annotated[Agent, Depends(current_agent)]


def require(action: str) -> Callable[[Agent], Awaitable[Agent]]:
    async def check(agent: CurrentAgent) -> Agent:
        if not auth.allowed(auth.Role(agent.role), action):
            raise Forbidden(say.role_may_not(agent.role, action))
        return agent

    return check


Reader = Annotated[Agent, Depends(require("read"))]
Claimer = Annotated[Agent, Depends(require("claim"))]
Creator = Annotated[Agent, Depends(require("create_subtask"))]
Noter = Annotated[Agent, Depends(require("note"))]
Lead = Annotated[Agent, Depends(require("assign"))]
Manager = Annotated[Agent, Depends(require("manage_subtasks"))]
Admin = Annotated[Agent, Depends(require("admin"))]
