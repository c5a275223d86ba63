"""Read views for people, dashboards and Prometheus: the status summary, the merge queue, the task tree, what
landed (``db.views.landed``, served by ``board.py``'s ``GET /api/v1/landed``), and ``/metrics``.

Rules of this module:
  * Reading needs a token, of any role: an unauthenticated visitor gets 401 and nothing else, ``/metrics``
    included (Prometheus sends the token with ``authorization: {credentials_file: ...}``; a reviewer token is
    the natural choice for a scraper).
  * Every view is bounded: a ``limit`` (and for the tree a ``depth``) caps what one request reads and returns,
    and the queries (``mergebot/db/queries/views.sql``) go through indexes the write path already keeps.
  * Nothing here writes.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response

from mergebot import cost as costs
from mergebot.api.deps import CurrentAgent, DbDep, Reader, ServicesDep
from mergebot.api.errors import ERROR_RESPONSES

router = APIRouter()
api = APIRouter(prefix="/api/v1", tags=["views"], responses=ERROR_RESPONSES)
Limit = Annotated[int, Query(ge=1, le=1000)]


@api.get("/summary", summary="Subtasks by status, queue depth per repository, agents holding claims")
async def summary(agent: Reader, services: ServicesDep,
                  holders: Annotated[int, Query(ge=1, le=1000)] = 20) -> dict[str, Any]:
    db = services.db
    return {**await db.views.summary(holders=holders), "admission": await services.admission.view(db)}


def _utc(t: datetime | None) -> datetime | None:
    """A time without a zone is UTC, whatever the server's zone."""
    return t if t is None or t.tzinfo else t.replace(tzinfo=UTC)


@api.get("/cost", summary="What landings and agents cost in verifier seconds, pushes and rejections, over a window")
async def cost(agent: Reader, db: DbDep, since: datetime | None = None, until: datetime | None = None,
               repo: str | None = None, limit: Annotated[int, Query(ge=0, le=1000)] = 100) -> dict[str, Any]:
    """Every run that finished in the window is charged once: to a landing (its deciding run, its share of a
    batch's run, the runs on the way there, main's checks after it), as thrown away (pushes of subtasks that have
    not landed), or as other (manual checks); the charges add up to ``total_seconds``. Default: the last day.
    ``landings`` lists the ``limit`` costliest landings of ``landings_total`` (the totals count them all)."""
    end = _utc(until) or datetime.now(UTC)
    start = _utc(since) or end - timedelta(days=1)
    rows = await db.views.cost(since=start, until=end, repo=repo)
    return {"since": start.isoformat(), "until": end.isoformat(), "repo": repo,
            **costs.add_up(rows["runs"], rows["pushes"], rows["landed"]).as_json(landings=limit)}


@api.get("/cost/stages", summary="Where the landings' time went, stage by stage, push to landed (medians, p95)")
async def stages(agent: Reader, db: DbDep, since: datetime | None = None, until: datetime | None = None,
                 repo: str | None = None) -> dict[str, Any]:
    """For the landings in the window (default: the last day): each stage's median and 95th percentile in
    seconds, from the push reaching the bot to the landed row, and how far beyond the check the whole took."""
    end = _utc(until) or datetime.now(UTC)
    start = _utc(since) or end - timedelta(days=1)
    rows = await db.views.stages(since=start, until=end, repo=repo)
    return {"since": start.isoformat(), "until": end.isoformat(), "repo": repo,
            "stages": [{"stage": r["stage"], "n": r["n"], "p50": r["p50"], "p95": r["p95"]} for r in rows]}


@api.get("/queue", summary="The merge queue: what is verified now, what waits, the window, recent refusals")
async def queue(agent: Reader, services: ServicesDep, repo: str | None = None, limit: Limit = 50,
                refusals: Annotated[int, Query(ge=0, le=200)] = 10) -> dict[str, Any]:
    # the widest window (an automatic one: the verifier slots counted); its live width is the leader's
    return await services.db.views.queue(repo=repo, limit=limit, refusals=refusals, window=services.queue.window,
                                         batch=services.settings.batch_size)


@api.get("/tree", summary="The task tree, depth first, with status, dependencies and subtree progress")
async def tree(agent: Reader, db: DbDep, root: Annotated[int | None, Query(ge=1)] = None,
               depth: Annotated[int, Query(ge=0, le=64)] = 3,
               limit: Annotated[int, Query(ge=1, le=5000)] = 500) -> dict[str, Any]:
    return await db.views.tree(root=root, depth=depth, limit=limit)


@router.get("/metrics", tags=["metrics"], response_class=Response,
            summary="Prometheus metrics, read from the database at scrape time (a token of any role)",
            responses={200: {"content": {"text/plain": {}}}, 401: {"description": "no or unknown token"}})
async def metrics(agent: CurrentAgent, services: ServicesDep, request: Request) -> Response:
    body, content_type = await services.metrics.render(services.db, request.headers.get("accept"),
                                                       admission=await services.admission.view(services.db))
    return Response(body, media_type=content_type)


router.include_router(api)
