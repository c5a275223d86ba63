"""Repositories, the merge queue's candidates, and what the reconciler found."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from mergebot.api.deps import Admin, CurrentAgent, DbDep, Limit, Reader, ServicesDep
from mergebot.api.errors import ERROR_RESPONSES
from mergebot.api.schemas import PauseIn
from mergebot.landing.judge import told
from mergebot.landing.main import reverify
from mergebot.landing.main.approve import approve as approve_candidate
from mergebot.landing.main.repos import hold, set_rules
from mergebot.models import record
from mergebot.rules import RulesChange

router = APIRouter(prefix="/api/v1", tags=["landing"], responses=ERROR_RESPONSES)


@router.get("/repos", summary="Managed repositories and their landing configuration")
async def repos(agent: Reader, db: DbDep) -> dict[str, Any]:
    return {"repos": [record(r) for r in await db.repos.list_repos()]}


@router.get("/candidates", summary="The merge queue: candidates, newest first")
async def candidates(agent: Reader, db: DbDep, repo: str | None = None, subtask: int | None = None,
                     limit: Limit = 100) -> dict[str, Any]:
    return {"candidates": await db.landing.candidates(repo=repo, subtask_id=subtask, limit=limit)}


@router.get("/candidates/{cand_id}", summary="One candidate: its status, reason and verifier evidence; with "
            "wait=S, held until it reaches a verdict (landed, rejected, superseded, cancelled, parked) or S seconds "
            "pass (long poll)")
async def candidate(cand_id: int, agent: Reader, db: DbDep,
                    wait: Annotated[float, Query(ge=0, le=60)] = 0) -> dict[str, Any]:
    cand = await db.landing.wait_candidate(cand_id, timeout=wait) if wait > 0 else await db.landing.get_candidate(
        cand_id)
    return await told.candidate_record(db, cand)


@router.post("/candidates/{cand_id}/approve", summary="Approve a candidate's exact commit (a lead, reviewer or "
             "admin; `mergebot approve`): one waiting for its approval goes back to the queue and lands; an agent, or "
             "the candidate's own pusher, is refused (403)")
async def approve(cand_id: int, agent: CurrentAgent, services: ServicesDep) -> dict[str, Any]:
    cand = await approve_candidate(services.db, cand_id, agent)
    services.queue.poke()
    return {"candidate": await told.candidate_record(services.db, cand),
            "approvals": await services.db.landing.approvals(cand.id)}


@router.get("/webhook-deliveries", summary="Forge webhook deliveries, newest first (admin)")
async def deliveries(agent: Admin, db: DbDep, limit: Limit = 100) -> dict[str, Any]:
    return {"deliveries": [record(d) for d in await db.forge.deliveries(limit)]}


@router.get("/findings", summary="What the reconciler found that does not add up")
async def findings(agent: Reader, db: DbDep, repo: str | None = None, limit: Limit = 100) -> dict[str, Any]:
    return {"findings": await db.landing.findings(repo=repo, limit=limit)}


@router.post("/repos/{name}/pause", summary="Pause landing on a repository (admin); pushes still queue, nothing "
             "lands; an optional `reason` is shown with who paused")
async def pause(name: str, agent: Admin, services: ServicesDep, body: PauseIn | None = None) -> dict[str, Any]:
    return {"repo": record(await hold(services.db, name, "pause", agent, services.queue.poke,
                                      reason=body.reason if body else None))}


@router.post("/repos/{name}/resume", summary="Resume landing; parked candidates go back to the queue (admin)")
async def resume(name: str, agent: Admin, services: ServicesDep) -> dict[str, Any]:
    return {"repo": record(await hold(services.db, name, "resume", agent, services.queue.poke,
                                      services.queue.reconcile_now))}


@router.patch("/repos/{name}/rules", summary="Change a repository's rules, only those given; `reset` names the "
              "optional ones that go back to their default (admin; `mergebot repo set`)")
async def change_rules(name: str, change: RulesChange, agent: Admin, services: ServicesDep) -> dict[str, Any]:
    repo = await set_rules(services.db, name, change, actor_id=agent.id)
    services.queue.poke()  # a queue rule may have changed
    return {"repo": record(repo)}


@router.post("/reconcile", summary="Run the reconciler now, between two landings (admin)")
async def reconcile(agent: Admin, services: ServicesDep) -> dict[str, Any]:
    reports = await services.queue.reconcile_now()
    return {"reports": [record(r) for r in reports]}


@router.post("/landed/{landed_id}/reverify", summary="Run a landed record's check again (a lead, reviewer or admin; "
             "`mergebot reverify`): the same commit, command, configuration and sandbox, and the held-out checks; "
             "the answer (reproduced, flaky_only or diverged) is signed when it ends. Returns the run's job (the one "
             "already running, if any); an agent is refused (403)")
async def reverify_start(landed_id: int, agent: CurrentAgent, services: ServicesDep) -> dict[str, Any]:
    job = await services.queue.on_loop(reverify.start, landed_id, agent)
    return {**await services.queue.on_loop(reverify.latest, landed_id), "job": record(job)}


@router.get("/landed/{landed_id}/reverify", summary="A landed record's latest re-verification: its newest run and "
            "its newest signed result (the statement's predicate and envelope)")
async def reverify_latest(landed_id: int, agent: Reader, services: ServicesDep) -> dict[str, Any]:
    return await services.queue.on_loop(reverify.latest, landed_id)
