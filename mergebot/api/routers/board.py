"""The shared board of the 1,000-agent run: announcements, notes, groups and assignments, landed, status."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fastapi import APIRouter

from mergebot import messages as say
from mergebot.api.deps import Admin, After, CurrentAgent, DbDep, Lead, Limit, Noter, Reader, ServicesDep
from mergebot.api.errors import ERROR_RESPONSES
from mergebot.api.schemas import AgentIn, AssignmentIn, BoardNoteIn, GroupIn, Name
from mergebot.attest import keys, shown
from mergebot.auth import Role, allowed
from mergebot.errors import Forbidden
from mergebot.models import record

router = APIRouter(prefix="/api/v1", tags=["board"], responses=ERROR_RESPONSES)


@router.get("/me", summary="Who the token belongs to")
async def me(agent: CurrentAgent) -> dict[str, Any]:
    return {"agent": record(agent)}


@router.get("/status", summary="Subtask counts by status")
async def status(agent: Reader, db: DbDep) -> dict[str, Any]:
    return {"counts": await db.subtasks.counts()}


@router.post("/agents", status_code=201, summary="Add an agent; the token is shown once (admin)")
async def add_agent(body: AgentIn, agent: Admin, db: DbDep) -> dict[str, Any]:
    new, token = await db.agents.add_agent(name=body.name, role=body.role)
    return {"agent": record(new), "token": token}


@router.get("/agents", summary="Agents, their groups and what they hold")
async def list_agents(agent: Reader, db: DbDep) -> dict[str, Any]:
    return {"agents": await db.agents.list_agents()}


@router.post("/agents/{name}/revoke", summary="Revoke an agent's token (admin)")
async def revoke(name: str, agent: Admin, db: DbDep) -> dict[str, Any]:
    return {"agent": record(await db.agents.revoke_agent(name=name))}


@router.get("/announcements")
async def announcements(agent: Reader, db: DbDep, after: After = 0, limit: Limit = 100) -> dict[str, Any]:
    return {"announcements": await db.subtasks.announcements(after_id=after, limit=limit)}


@router.post("/announcements", status_code=201, summary="Broadcast to all agents (lead or admin)")
async def announce(body: BoardNoteIn, agent: CurrentAgent, db: DbDep) -> dict[str, Any]:
    if not allowed(Role(agent.role), "announce"):
        raise Forbidden(say.role_may_not(agent.role, "announce"))
    return {"announcement": await db.subtasks.announce(author_id=agent.id, body=body.body, group_name=body.group)}


@router.get("/notes", summary="Plans and progress notes")
async def notes(agent: Reader, db: DbDep, group: str | None = None, after: After = 0,
                limit: Limit = 100) -> dict[str, Any]:
    return {"notes": await db.subtasks.notes(group_name=group, after_id=after, limit=limit)}


@router.post("/notes", status_code=201, summary="A note not tied to a claim (plans, estimates)")
async def add_note(body: BoardNoteIn, agent: Noter, db: DbDep) -> dict[str, Any]:
    return {"note": await db.subtasks.add_note(author_id=agent.id, body=body.body, group_name=body.group)}


@router.get("/groups")
async def groups(agent: Reader, db: DbDep) -> dict[str, Any]:
    return {"groups": await db.agents.list_groups()}


@router.put("/groups/{name}", summary="Create or update a group; open=true lets its members roam (lead)")
async def put_group(name: Name, body: GroupIn, agent: Lead, db: DbDep) -> dict[str, Any]:
    group = await db.agents.upsert_group(name=name, description=body.description)
    if body.open is not None:
        group = await db.agents.set_group_open(name=name, open=body.open, actor_id=agent.id)
    return {"group": group}


@router.get("/assignments")
async def assignments(agent: Reader, db: DbDep) -> dict[str, Any]:
    return {"assignments": await db.agents.list_assignments()}


@router.put("/assignments/{agent_name}", summary="Put an agent in a group (lead); claims in flight stay")
async def assign(agent_name: Name, body: AssignmentIn, agent: Lead, db: DbDep) -> dict[str, Any]:
    return {"assignment": await db.agents.assign(agent_name=agent_name, group_name=body.group,
                                                 group_role=body.group_role, actor_id=agent.id)}


@router.get("/landed", summary="What landed, newest first (since: landed at or after this time)")
async def landed(agent: Reader, db: DbDep, repo: str | None = None, subtask: int | None = None,
                 owner: str | None = None, since: datetime | None = None, before: int | None = None,
                 limit: Limit = 100) -> dict[str, Any]:
    rows = await db.views.landed(repo=repo, subtask_id=subtask, owner=owner, since=since, before_id=before,
                                 limit=limit)
    if repo is not None and not rows:
        await db.repos.get_repo(repo)  # nothing landed, or no such repository: a 404 then, as the queue's view says
    return {"landed": [record(r) for r in rows]}


@router.get("/landed/{landed_id}/attestations",
            summary="A landed record's signed statements (DSSE envelopes, decoded) and whether its landing statement "
                    "verifies with the server's trust file")
async def landed_attestations(landed_id: int, agent: Reader, services: ServicesDep) -> dict[str, Any]:
    landed = await services.db.landing.get_landed(landed_id)
    rows = await services.db.attest.of_landed(landed.id, landed.repo, landed.merged_sha)
    got = shown.of_landed(landed.merged_sha, landed.repo, rows, keys.trust_text(services.settings.attest_folder))
    return {"landed_id": landed.id, "repo": landed.repo, "sha": landed.merged_sha, **got.as_json()}
