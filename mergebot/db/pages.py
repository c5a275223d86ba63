"""What the pages read: one method per named query of ``mergebot/db/queries/pages.sql``, keyword arguments only.

``PageStore`` runs the pages' read-only queries on the shared pool (the same ``statement_timeout`` and error
translation as every store). Every read is bounded by its query (LIMIT, keyset paging, or a window over the
newest ids); the limits a page asks for are clamped here, so a query string cannot ask for a million rows. No
decisions and no formatting here: that is ``mergebot.web.present``.
"""

from __future__ import annotations

from datetime import date, datetime, timedelta

from mergebot.db.base import Row, Sql

PAGE = 50  # rows per page of a list
TREE_FANOUT = 25  # children shown per node below the first level of a tree window
TREE_MAX_NODES = 400  # nodes in one tree window, whatever its depth
SUBTREE_MAX_ROWS = 50_000  # rows read to count a subtree's statuses


def clamp(limit: int, most: int = 200) -> int:
    return max(1, min(limit, most))


class PageStore:
    def __init__(self, sql: Sql) -> None:
        self.sql = sql

    # -- landed -------------------------------------------------------------------------------------------

    async def repos(self) -> list[Row]:
        return await self.sql.all("page_repos")

    async def landed_page(self, *, repo: str | None, owner: str | None, subtask_id: int | None, since: date | None,
                     until: date | None, before_id: int | None, limit: int = PAGE) -> list[Row]:
        return await self.sql.all("page_landed", repo=repo, owner=owner, subtask_id=subtask_id, since=since,
                               until=until, before_id=before_id, limit=clamp(limit))

    async def landed_one(self, landed_id: int) -> Row | None:
        return await self.sql.one("page_landed_one", id=landed_id)

    async def candidate(self, cand_id: int) -> Row | None:
        return await self.sql.one("page_candidate", id=cand_id)

    async def candidate_stages(self, cand_id: int) -> Row | None:
        return await self.sql.one("page_candidate_stages", id=cand_id)

    async def job(self, job_id: int) -> Row | None:
        return await self.sql.one("page_job", id=job_id)

    # -- queue --------------------------------------------------------------------------------------------

    async def queue_repos(self) -> list[Row]:
        return await self.sql.all("page_queue_repos")

    async def queue_active(self, limit: int = 100) -> list[Row]:
        return await self.sql.all("page_queue_active", limit=clamp(limit))

    async def queue_waiting(self, limit: int = PAGE) -> list[Row]:
        return await self.sql.all("page_queue_waiting", limit=clamp(limit))

    async def queue_parked(self, limit: int = PAGE) -> list[Row]:
        return await self.sql.all("page_queue_parked", limit=clamp(limit))

    async def queue_rejected(self, limit: int = 20) -> list[Row]:
        return await self.sql.all("page_queue_rejected", limit=clamp(limit))

    async def push_refusals(self, limit: int = 20) -> list[Row]:
        return await self.sql.all("page_queue_push_refusals", limit=clamp(limit))

    async def recently_landed(self, limit: int = 10) -> list[Row]:
        return await self.sql.all("page_queue_landed_recent", limit=clamp(limit))

    async def queue_fingerprint(self) -> str:
        row = await self.sql.one("page_queue_fingerprint")
        return str(row["fingerprint"]) if row else ""

    # -- subtasks -----------------------------------------------------------------------------------------

    async def first_level(self, *, root: int | None, after_id: int, limit: int) -> list[int]:
        """The ids of the first level of a tree window: the top level, or the children of ``root``."""
        if root is None:
            rows = await self.sql.all("page_tree_roots", after_id=after_id, limit=clamp(limit))
        else:
            rows = await self.sql.all("page_tree_children", parent_id=root, after_id=after_id, limit=clamp(limit))
        return [r["id"] for r in rows]

    async def tree_window(self, *, ids: list[int], depth: int, fanout: int = TREE_FANOUT,
                          max_nodes: int = TREE_MAX_NODES) -> list[Row]:
        if not ids:
            return []
        return await self.sql.all("page_tree_window", ids=ids, depth=max(1, min(depth, 10)),
                               fanout=clamp(fanout, 100), max_nodes=clamp(max_nodes, 1000))

    async def ancestors(self, subtask_id: int) -> list[Row]:
        return await self.sql.all("page_subtask_ancestors", id=subtask_id)

    async def subtree_counts(self, subtask_id: int) -> dict[str, int]:
        rows = await self.sql.all("page_subtree_counts", id=subtask_id, max_rows=SUBTREE_MAX_ROWS)
        return {r["status"]: r["n"] for r in rows}

    async def subtasks_by_status(self, *, status: str, after_id: int, limit: int = PAGE) -> list[Row]:
        return await self.sql.all("page_subtasks_by_status", status=status, after_id=after_id, limit=clamp(limit))

    async def deps(self, subtask_id: int, limit: int = 100) -> list[Row]:
        return await self.sql.all("page_subtask_deps", id=subtask_id, limit=clamp(limit))

    async def dependents(self, subtask_id: int, limit: int = 100) -> list[Row]:
        return await self.sql.all("page_subtask_dependents", id=subtask_id, limit=clamp(limit))

    async def subtask_events(self, subtask_id: int, limit: int = PAGE) -> list[Row]:
        return await self.sql.all("page_subtask_events", id=subtask_id, limit=clamp(limit))

    async def subtask_candidates(self, subtask_id: int, limit: int = 20) -> list[Row]:
        return await self.sql.all("page_subtask_candidates", id=subtask_id, limit=clamp(limit))

    async def subtask_landed_id(self, subtask_id: int) -> int | None:
        row = await self.sql.one("page_subtask_landed", id=subtask_id)
        return int(row["id"]) if row else None

    # -- agents, board, reconciliation ---------------------------------------------------------------------

    async def agents(self, *, after_id: int, limit: int = 100) -> list[Row]:
        return await self.sql.all("page_agents", after_id=after_id, limit=clamp(limit))

    async def announcements_page(self, *, before_id: int | None, limit: int = PAGE) -> list[Row]:
        return await self.sql.all("page_announcements", before_id=before_id, limit=clamp(limit))

    async def notes_page(self, *, subtask_id: int | None, group_name: str | None, before_id: int | None,
                         limit: int = PAGE) -> list[Row]:
        return await self.sql.all("page_notes", subtask_id=subtask_id, group_name=group_name, before_id=before_id,
                               limit=clamp(limit))

    async def findings_page(self, *, before_id: int | None, limit: int = PAGE) -> list[Row]:
        return await self.sql.all("page_findings", before_id=before_id, limit=clamp(limit))

    async def intents_pending(self, limit: int = PAGE) -> list[Row]:
        return await self.sql.all("page_intents_pending", limit=clamp(limit))

    async def main_not_green(self, limit: int = PAGE) -> list[Row]:
        return await self.sql.all("page_main_not_green", limit=clamp(limit))

    async def submitted_unqueued(self, limit: int = PAGE) -> list[Row]:
        return await self.sql.all("page_submitted_unqueued", limit=clamp(limit))

    async def landed_without_row(self, limit: int = PAGE) -> list[Row]:
        return await self.sql.all("page_landed_without_row", limit=clamp(limit))

    # -- charts -------------------------------------------------------------------------------------------

    async def chart_buckets(self, *, since: datetime, until: datetime, step: timedelta,
                            repo: str | None) -> list[Row]:
        """One row per bucket of ``step`` from ``since`` to ``until`` (the caller bounds how many)."""
        return await self.sql.all("page_chart_buckets", since=since, until=until, step=step, repo=repo)

    async def timeline_runs(self, *, since: datetime, until: datetime, repo: str | None, limit: int) -> list[Row]:
        return await self.sql.all("page_timeline_runs", since=since, until=until, repo=repo,
                                  limit=clamp(limit, 2000))

    # -- the tree at a glance -----------------------------------------------------------------------------

    async def child_progress(self, subtask_id: int, limit: int = 50) -> list[Row]:
        return await self.sql.all("page_child_progress", id=subtask_id, limit=clamp(limit),
                                  max_rows=SUBTREE_MAX_ROWS)

    async def blocking_graph(self, subtask_id: int, *, hops: int, limit: int) -> list[Row]:
        return await self.sql.all("page_blocking_graph", id=subtask_id, hops=max(1, min(hops, 10)),
                                  limit=clamp(limit, 200))
