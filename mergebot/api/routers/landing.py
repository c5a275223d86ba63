"""Repositories, the merge queue's candidates, and what the reconciler found."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request

from mergebot.api.deps import Admin, Reader
from mergebot.api.errors import ERROR_RESPONSES
from mergebot.landing.store import CANDIDATE_VERDICTS
from mergebot.models import record
from mergebot.verify.jobs import JobStore

router = APIRouter(prefix="/api/v1", tags=["landing"], responses=ERROR_RESPONSES)
Limit = Annotated[int, Query(ge=1, le=1000)]


def _store(request: Request) -> JobStore:
    store: JobStore = request.app.state.store
    return store


@router.get("/repos", summary="Managed repositories and their landing configuration")
async def repos(agent: Reader, request: Request) -> dict[str, Any]:
    return {"repos": [record(r) for r in await _store(request).list_repos()]}


@router.get("/candidates", summary="The merge queue: candidates, newest first")
async def candidates(agent: Reader, request: Request, repo: str | None = None, subtask: int | None = None,
                     limit: Limit = 100) -> dict[str, Any]:
    return {"candidates": await _store(request).candidates(repo=repo, subtask_id=subtask, limit=limit)}


@router.get("/candidates/{cand_id}", summary="One candidate: its status, reason and verifier evidence; with "
            "wait=S, held until it reaches a verdict (landed, rejected, superseded, cancelled, parked) or S seconds "
            "pass (long poll)")
async def candidate(cand_id: int, agent: Reader, request: Request,
                    wait: Annotated[float, Query(ge=0, le=60)] = 0) -> dict[str, Any]:
    store = _store(request)
    if wait > 0:
        async def status() -> str:
            return (await store.get_candidate(cand_id)).status

        await request.app.state.waiter.wait_candidate(cand_id, status, CANDIDATE_VERDICTS, timeout=wait)
    return record(await store.get_candidate(cand_id))


@router.get("/webhook-deliveries", summary="Forge webhook deliveries, newest first (admin)")
async def deliveries(agent: Admin, request: Request, limit: Limit = 100) -> dict[str, Any]:
    return {"deliveries": [record(d) for d in await request.app.state.forge_store.deliveries(limit)]}


@router.get("/findings", summary="What the reconciler found that does not add up")
async def findings(agent: Reader, request: Request, repo: str | None = None, limit: Limit = 100) -> dict[str, Any]:
    return {"findings": await _store(request).findings(repo=repo, limit=limit)}


@router.post("/repos/{name}/pause", summary="Pause landing on a repository (admin)")
async def pause(name: str, agent: Admin, request: Request) -> dict[str, Any]:
    store = _store(request)
    await store.get_repo(name)
    await store.set_paused(repo=name, paused=True, reason=f"paused by {agent.name}")
    return {"repo": record(await store.get_repo(name))}


@router.post("/repos/{name}/resume", summary="Resume landing; parked candidates go back to the queue (admin)")
async def resume(name: str, agent: Admin, request: Request) -> dict[str, Any]:
    store = _store(request)
    await store.get_repo(name)
    await store.set_paused(repo=name, paused=False, reason=None)
    await store.announce(author_id=agent.id, body=f"[{name}] landing resumed by {agent.name}.")
    request.app.state.queue.poke()
    return {"repo": record(await store.get_repo(name))}


@router.post("/reconcile", summary="Run the reconciler now, between two landings (admin)")
async def reconcile(agent: Admin, request: Request) -> dict[str, Any]:
    reports = await request.app.state.queue.reconcile_now()
    return {"reports": [record(r) for r in reports]}
