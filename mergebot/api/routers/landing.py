"""Repositories, the merge queue's candidates, and what the reconciler found."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request

from mergebot.api.deps import Admin, Reader
from mergebot.landing.store import LandingStore

router = APIRouter(prefix="/api/v1", tags=["landing"])
Limit = Annotated[int, Query(ge=1, le=1000)]


def _store(request: Request) -> LandingStore:
    store: LandingStore = request.app.state.store
    return store


@router.get("/repos", summary="Managed repositories and their landing configuration")
async def repos(agent: Reader, request: Request) -> dict[str, Any]:
    return {"repos": [asdict(r) for r in await _store(request).list_repos()]}


@router.get("/candidates", summary="The merge queue: candidates, newest first")
async def candidates(agent: Reader, request: Request, repo: str | None = None, subtask: int | None = None,
                     limit: Limit = 100) -> dict[str, Any]:
    return {"candidates": await _store(request).candidates(repo=repo, subtask_id=subtask, limit=limit)}


@router.get("/findings", summary="What the reconciler found that does not add up")
async def findings(agent: Reader, request: Request, repo: str | None = None, limit: Limit = 100) -> dict[str, Any]:
    return {"findings": await _store(request).findings(repo=repo, limit=limit)}


@router.post("/reconcile", summary="Run the reconciler now, between two landings (admin)")
async def reconcile(agent: Admin, request: Request) -> dict[str, Any]:
    reports = await request.app.state.queue.reconcile_now()
    return {"reports": [asdict(r) for r in reports]}
