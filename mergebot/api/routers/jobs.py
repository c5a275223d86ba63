"""Verify jobs over HTTP, for verifier workers on other machines (role verifier), fenced like subtasks."""

from __future__ import annotations

import base64
import logging
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Response
from pydantic import BaseModel, ConfigDict, Field

from mergebot.api.deps import DbDep, Reader, ServicesDep, require
from mergebot.api.errors import ERROR_RESPONSES
from mergebot.errors import MergebotError
from mergebot.landing.judge import heldout
from mergebot.models import Agent, record
from mergebot.verify.worker import have_commit
from verifier.runner import OUTCOMES, Result

router = APIRouter(prefix="/api/v1/verify-jobs", tags=["verifier"], responses=ERROR_RESPONSES)
log = logging.getLogger(__name__)
Verifier = Annotated[Agent, Depends(require("verify"))]


class ClaimIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    worker: Annotated[str, Field(min_length=1, max_length=200)]


class FenceIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    claim_version: Annotated[int, Field(ge=1)]


class ResultIn(FenceIn):
    result: dict[str, Any]


@router.post("/claim", summary="Claim the oldest queued job (204 when there is none)",
             responses={204: {"description": "no job is queued"}})
async def claim(body: ClaimIn, agent: Verifier, db: DbDep, services: ServicesDep) -> Any:
    job = await db.jobs.claim_job(worker_id=agent.id, worker_name=f"{agent.name}:{body.worker}")
    if job is None:
        return Response(status_code=204)
    # The worker fetches the commit from this replica next: a forge repository's, made by another replica, is
    # brought from its queue branch first. If the forge cannot give it, the worker's fetch fails and says so.
    try:
        await have_commit(services.root, await db.repos.get_repo(job.repo), job.commit_sha)
    except MergebotError as e:
        log.warning("job %s: cannot bring %s of %s here: %s", job.id, job.commit_sha[:12], job.repo, e.message)
    return {"job": record(job)}


@router.post("/{job_id}/heartbeat", summary="Renew the job's lease (the claim holder only)")
async def heartbeat(job_id: int, body: FenceIn, agent: Verifier, db: DbDep) -> dict[str, Any]:
    await db.jobs.heartbeat_job(job_id=job_id, worker_id=agent.id, claim_version=body.claim_version)
    return {"ok": True}


@router.post("/{job_id}/result", summary="Report the result; 409 if the claim was lost")
async def result(job_id: int, body: ResultIn, agent: Verifier, db: DbDep, services: ServicesDep) -> dict[str, Any]:
    data = body.result
    if str(data.get("outcome")) not in OUTCOMES:
        data = {**data, "outcome": "error"}
    outcome = Result.from_json(data).overall  # the job's: the run's, or its own tests' when they failed
    if outcome not in OUTCOMES:
        outcome = "error"
    # A worker on another machine masked what it knew; the server's own secrets are masked here, before anything
    # stores the result (and so before any verdict, page or status can show it).
    masker = await services.masker()
    if masker:
        masked = masker.json(data)  # everything it holds, whole result or not
        data = Result.from_json(masked).masked(masker).as_json() if isinstance(masked, dict) else {}
    job = await db.jobs.finish_job(job_id=job_id, worker_id=agent.id, claim_version=body.claim_version,
                                   outcome=outcome, result=data)
    return {"job": record(job)}


@router.get("/{job_id}/held-out", summary="A held-out run's checks, to the verifier holding it (fenced)",
            include_in_schema=True)
async def held_out(job_id: int, agent: Verifier, db: DbDep,
                   claim_version: Annotated[int, Query(ge=1)]) -> dict[str, Any]:
    files = await db.jobs.held_out_files(job_id=job_id, worker_id=agent.id, claim_version=claim_version)
    return {"files": [{"path": p, "content": base64.b64encode(c).decode()} for p, c in files]}


@router.get("", summary="Verify jobs, newest first")
async def list_jobs(agent: Reader, db: DbDep,
                    status: Annotated[str | None, Query(pattern="^(queued|running|done|cancelled)$")] = None,
                    candidate: int | None = None, limit: Annotated[int, Query(ge=1, le=1000)] = 100) -> dict[str, Any]:
    rows = await db.jobs.jobs(status=status, candidate_id=candidate, limit=limit)
    return {"jobs": [heldout.for_viewer(dict(r), agent.role) for r in rows]}
