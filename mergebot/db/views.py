"""The read views of the JSON API and the CLI (``mergebot/db/queries/views.sql``), and the one-snapshot read behind
``/metrics`` (``mergebot/db/queries/metrics.sql``).

Rules:
  * Every view is bounded: a ``limit`` (and for the tree a ``depth``) caps what one request reads and returns,
    and the queries go through indexes the write path already keeps.
  * A metrics scrape reads every metric query in one read-only transaction: one consistent snapshot.
  * Nothing here writes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from mergebot import messages as say
from mergebot.db.base import Row, Sql
from mergebot.errors import NotFound
from mergebot.models import Landed

STATUSES = ("blocked", "ready", "running", "submitted", "landed", "failed", "cancelled")
METRIC_QUERIES = ("metric_subtasks", "metric_holders", "metric_landings", "metric_queue_depth", "metric_events",
                  "metric_verify_runs", "metric_verify_buckets", "metric_verify_expiries", "metric_webhook_deliveries",
                  "metric_unattested")


@dataclass
class Snapshot:
    """The rows of every metric query, as read in one transaction."""

    rows: dict[str, list[Row]] = field(default_factory=dict)
    seconds: float = 0.0

    def of(self, query: str) -> list[Row]:
        return self.rows.get(query, [])


class ViewStore:
    def __init__(self, sql: Sql) -> None:
        self.sql = sql

    async def landed(self, *, repo: str | None = None, subtask_id: int | None = None, owner: str | None = None,
                     since: datetime | None = None, before_id: int | None = None, limit: int = 100) -> list[Landed]:
        if since is not None and since.tzinfo is None:
            since = since.replace(tzinfo=UTC)  # a time without a zone is UTC, whatever the server's zone
        rows = await self.sql.all("view_landed", repo=repo, subtask_id=subtask_id, owner=owner, since=since,
                                  before_id=before_id, limit=limit)
        return [Landed.from_row(r) for r in rows]

    async def summary(self, *, holders: int) -> dict[str, Any]:
        counts = {s: 0 for s in STATUSES} | {r["status"]: r["n"] for r in await self.sql.all("subtask_counts")}
        held = await self.sql.all("view_holders", limit=holders)
        return {
            "counts": counts,
            "total": sum(counts.values()),
            "queue": await self.sql.all("view_queue_depth", repo=None),
            "verify_jobs": await self.sql.one("view_verify_jobs"),
            "holders": [{k: v for k, v in h.items() if k not in ("agents_total", "claims_total")} for h in held],
            "agents_holding": held[0]["agents_total"] if held else 0,
            "claims_held": held[0]["claims_total"] if held else 0,
            "landed": await self.sql.one("view_landed_totals"),
        }

    async def queue(self, *, repo: str | None, limit: int, refusals: int, window: int,
                    batch: int = 1) -> dict[str, Any]:
        depth = {r["repo"]: r for r in await self.sql.all("view_queue_depth", repo=repo)}
        repos = []
        for r in await self.sql.all("view_queue_repos", repo=repo):
            d = {k: v for k, v in depth[r["name"]].items() if k != "repo"}
            repos.append({**r, "depth": d, "window": {"max": window, "batch": batch, "in_flight": d["verifying"]}})
        if repo is not None and not repos:
            raise NotFound(say.no_such_repository(repo), field="repo")
        return {
            "repos": repos,
            "verifying": await self.sql.all("view_queue_active", repo=repo, limit=limit),
            "waiting": await self.sql.all("view_queue_waiting", repo=repo, limit=limit),
            "verify_jobs": await self.sql.one("view_verify_jobs"),
            "refusals": await self.sql.all("view_refusals", repo=repo, limit=refusals),
        }

    async def tree(self, *, root: int | None, depth: int, limit: int) -> dict[str, Any]:
        rows = await self.sql.all("view_tree", root=root, depth=depth, limit=limit)
        if root is not None and not rows:
            raise NotFound(say.no_such_subtask(root), subtask_id=root)
        total = rows[0]["total"] if rows else 0
        nodes = [{k: v for k, v in r.items() if k != "total"} for r in rows]
        return {"root": root, "depth": depth, "total": total, "truncated": total > len(nodes), "nodes": nodes}

    async def cost(self, *, since: datetime, until: datetime, repo: str | None = None) -> dict[str, list[Row]]:
        """The rows ``mergebot.cost.add_up`` adds up for a window: runs with their charges, pushes, landings."""
        window = {"since": since, "until": until, "repo": repo}
        queries = {"runs": "view_cost_runs", "pushes": "view_cost_pushes", "landed": "view_cost_landed"}
        return {name: await self.sql.all(query, **window) for name, query in queries.items()}

    async def stages(self, *, since: datetime, until: datetime, repo: str | None = None) -> list[Row]:
        """Where the landings' time went, stage by stage: medians and 95th percentiles (``view_stages``)."""
        return await self.sql.all("view_stages", since=since, until=until, repo=repo)

    async def metrics_snapshot(self, bounds: list[float]) -> Snapshot:
        """Every metric query in one read-only transaction; ``bounds`` are the duration histogram's buckets."""
        started = time.perf_counter()
        rows: dict[str, list[Row]] = {}
        async with self.sql.tx() as tx:
            await tx.all("metric_snapshot")
            for name in METRIC_QUERIES:
                rows[name] = await tx.all(name, bounds=bounds)
        return Snapshot(rows, time.perf_counter() - started)
