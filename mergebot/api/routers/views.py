"""Read views for people, dashboards and Prometheus: the status summary, the merge queue, the task tree, what
landed (``Views.landed``, served by ``board.py``'s ``GET /api/v1/landed``), and ``/metrics``.

Rules of this module:
  * Reading needs a token, of any role: an unauthenticated visitor gets 401 and nothing else, ``/metrics``
    included (Prometheus sends the token with ``authorization: {credentials_file: ...}``; a reviewer token is
    the natural choice for a scraper).
  * Every view is bounded: a ``limit`` (and for the tree a ``depth``) caps what one request reads and returns,
    and the queries (``mergebot/db/views.sql``) go through indexes the write path already keeps.
  * Nothing here writes.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response

from mergebot.api.deps import CurrentAgent, Reader, StoreDep
from mergebot.api.errors import ERROR_RESPONSES
from mergebot.errors import NotFound
from mergebot.metrics import exporter_for
from mergebot.models import Landed
from mergebot.store import Store

STATUSES = ("blocked", "ready", "running", "submitted", "landed", "failed", "cancelled")

router = APIRouter()
api = APIRouter(prefix="/api/v1", tags=["views"], responses=ERROR_RESPONSES)
Limit = Annotated[int, Query(ge=1, le=1000)]


class Views(Store):
    """The named queries of ``views.sql`` over the app's pool (the store's plumbing and error translation)."""

    async def landed(self, *, repo: str | None = None, subtask_id: int | None = None, owner: str | None = None,
                     since: datetime | None = None, before_id: int | None = None, limit: int = 100) -> list[Landed]:
        if since is not None and since.tzinfo is None:
            since = since.replace(tzinfo=UTC)  # a time without a zone is UTC, whatever the server's zone
        rows = await self._all("view_landed", repo=repo, subtask_id=subtask_id, owner=owner, since=since,
                               before_id=before_id, limit=limit)
        return [Landed.from_row(r) for r in rows]

    async def summary(self, *, holders: int) -> dict[str, Any]:
        counts = {s: 0 for s in STATUSES} | await self.counts()
        held = await self._all("view_holders", limit=holders)
        totals = await self._one("view_landed_totals")
        return {
            "counts": counts,
            "total": sum(counts.values()),
            "queue": await self._all("view_queue_depth", repo=None),
            "verify_jobs": await self._one("view_verify_jobs"),
            "holders": [{k: v for k, v in h.items() if k not in ("agents_total", "claims_total")} for h in held],
            "agents_holding": held[0]["agents_total"] if held else 0,
            "claims_held": held[0]["claims_total"] if held else 0,
            "landed": totals,
        }

    async def queue(self, *, repo: str | None, limit: int, refusals: int, window: int,
                    batch: int = 1) -> dict[str, Any]:
        depth = {r["repo"]: r for r in await self._all("view_queue_depth", repo=repo)}
        repos = []
        for r in await self._all("view_queue_repos", repo=repo):
            d = {k: v for k, v in depth[r["name"]].items() if k != "repo"}
            repos.append({**r, "depth": d, "window": {"max": window, "batch": batch, "in_flight": d["verifying"]}})
        if repo is not None and not repos:
            raise NotFound(f"no repository named {repo!r}", field="repo")
        return {
            "repos": repos,
            "verifying": await self._all("view_queue_active", repo=repo, limit=limit),
            "waiting": await self._all("view_queue_waiting", repo=repo, limit=limit),
            "verify_jobs": await self._one("view_verify_jobs"),
            "refusals": await self._all("view_refusals", repo=repo, limit=refusals),
        }

    async def tree(self, *, root: int | None, depth: int, limit: int) -> dict[str, Any]:
        rows = await self._all("view_tree", root=root, depth=depth, limit=limit)
        if root is not None and not rows:
            raise NotFound(f"subtask {root} does not exist", subtask_id=root)
        total = rows[0]["total"] if rows else 0
        nodes = [{k: v for k, v in r.items() if k != "total"} for r in rows]
        return {"root": root, "depth": depth, "total": total, "truncated": total > len(nodes), "nodes": nodes}


def views_of(store: Store) -> Views:
    """The views over the same pool as the app's store."""
    return Views(store.pool, lease_seconds=store.lease_seconds)


@api.get("/summary", summary="Subtasks by status, queue depth per repository, agents holding claims")
async def summary(agent: Reader, store: StoreDep,
                  holders: Annotated[int, Query(ge=1, le=1000)] = 20) -> dict[str, Any]:
    return await views_of(store).summary(holders=holders)


@api.get("/queue", summary="The merge queue: what is verified now, what waits, the window, recent refusals")
async def queue(agent: Reader, store: StoreDep, request: Request, repo: str | None = None, limit: Limit = 50,
                refusals: Annotated[int, Query(ge=0, le=200)] = 10) -> dict[str, Any]:
    settings = request.app.state.settings  # the configured widest window; its live width is the leader's
    return await views_of(store).queue(repo=repo, limit=limit, refusals=refusals,
                                       window=settings.speculation_window, batch=getattr(settings, "batch_size", 1))


@api.get("/tree", summary="The task tree, depth first, with status, dependencies and subtree progress")
async def tree(agent: Reader, store: StoreDep, root: Annotated[int | None, Query(ge=1)] = None,
               depth: Annotated[int, Query(ge=0, le=64)] = 3,
               limit: Annotated[int, Query(ge=1, le=5000)] = 500) -> dict[str, Any]:
    return await views_of(store).tree(root=root, depth=depth, limit=limit)


@router.get("/metrics", tags=["metrics"], response_class=Response,
            summary="Prometheus metrics, read from the database at scrape time (a token of any role)",
            responses={200: {"content": {"text/plain": {}}}, 401: {"description": "no or unknown token"}})
async def metrics(agent: CurrentAgent, store: StoreDep, request: Request) -> Response:
    body, content_type = await exporter_for(request.app.state).render(store, request.headers.get("accept"))
    return Response(body, media_type=content_type)


router.include_router(api)
