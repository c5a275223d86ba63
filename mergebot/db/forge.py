"""The forge records: login links, webhook deliveries (deduplicated by delivery id) and the status outbox.

Rules:
  * A forge login acts as the agent it is linked to, and only linked logins' pushes can land.
  * A delivery is recorded by its id: one already processed is not processed again, one whose processing died
    is taken again after ``stale_s``, and the same id with another body is refused.
  * Candidate status changes reach the outbox through a trigger (``candidates_forge_status``), so no landing
    path can forget to report; the webhook handler adds the refusals that never became candidates. The newest
    status per commit is sent; a failed send backs off and is retried, durable across restarts.
"""

from __future__ import annotations

from psycopg.types.json import Jsonb

from mergebot.db.base import Row, Sql, insert_event
from mergebot.models import Agent, Candidate, CheckRunRow, DeliveryRow, PullRow, StatusRow

GITHUB_FAMILY = ("github",)
GITEA_FAMILY = ("gitea", "forgejo")


class ForgeStore:
    def __init__(self, sql: Sql) -> None:
        self.sql = sql

    # -- identity ----------------------------------------------------------------------------------------

    async def link(self, *, forge: str, login: str, agent_id: int) -> Row:
        row = await self.sql.one("forge_link", forge=forge, login=login, agent_id=agent_id)
        assert row is not None
        await insert_event(self.sql, actor_id=None, kind="forge_link",
                           detail={"forge": forge, "login": login.lower(), "agent_id": agent_id})
        return row

    async def unlink(self, *, forge: str, login: str) -> bool:
        return await self.sql.one("forge_unlink", forge=forge, login=login) is not None

    async def links(self) -> list[Row]:
        return await self.sql.all("forge_links")

    async def agent_for(self, *, forge: str, login: str) -> Agent | None:
        row = await self.sql.one("forge_agent", forge=forge, login=login)
        return Agent.from_row(row) if row else None

    # -- deliveries --------------------------------------------------------------------------------------

    async def begin_delivery(self, *, forge: str, delivery_id: str, event: str, body_sha256: str,
                             stale_s: float = 900.0) -> tuple[str, DeliveryRow]:
        """("new" | "retry" | "done" | "in_progress" | "mismatch", the row) for a delivery that just arrived.

        A delivery still "processing" after ``stale_s`` (longer than any fetch may take) is taken again: its
        processing died with its process."""
        key = {"forge": forge, "delivery_id": delivery_id}
        row = await self.sql.one("delivery_insert", **key, event=event, body_sha256=body_sha256)
        if row is not None:
            return "new", DeliveryRow.from_row(row)
        row = await self.sql.one("delivery_retake", **key, body_sha256=body_sha256, stale_s=stale_s)
        if row is not None:
            return "retry", DeliveryRow.from_row(row)
        row = await self.sql.one("delivery_get", **key)
        assert row is not None  # inserted by someone else (we conflicted) and never deleted
        have = DeliveryRow.from_row(row)
        if have.body_sha256 != body_sha256:
            return "mismatch", have
        return ("done" if have.status == "done" else "in_progress"), have

    async def finish_delivery(self, *, forge: str, delivery_id: str, attempt: int, ok: bool, http_status: int,
                              outcome: str, repo: str | None) -> None:
        """Record the outcome of the attempt that processed it (a later retake's attempt is not overwritten)."""
        await self.sql.all("delivery_finish", forge=forge, delivery_id=delivery_id, attempt=attempt,
                        status="done" if ok else "failed", http_status=http_status, outcome=outcome[:2000], repo=repo)

    async def deliveries(self, limit: int = 100) -> list[DeliveryRow]:
        return [DeliveryRow.from_row(r) for r in await self.sql.all("delivery_list", limit=limit)]

    # -- the status outbox -------------------------------------------------------------------------------

    async def queue_status(self, *, repo: str, sha: str, state: str, description: str) -> StatusRow:
        row = await self.sql.one("forge_status_insert", repo=repo, sha=sha, state=state, description=description[:2000])
        assert row is not None
        return StatusRow.from_row(row)

    async def take_statuses(self, limit: int = 20) -> list[StatusRow]:
        return [StatusRow.from_row(r) for r in await self.sql.all("forge_status_take", limit=limit)]

    async def status_sent(self, status_id: int) -> None:
        await self.sql.all("forge_status_sent", id=status_id)

    async def status_failed(self, status_id: int, *, error: str, delay_s: float, give_up: bool) -> None:
        await self.sql.all("forge_status_failed", id=status_id, error=error[:2000], delay_s=delay_s, give_up=give_up)

    # -- the check run outbox (GitHub Apps) -------------------------------------------------------------------

    async def take_check_runs(self, limit: int = 20) -> list[CheckRunRow]:
        return [CheckRunRow.from_row(r) for r in await self.sql.all("check_runs_take", limit=limit)]

    async def check_run_sent(self, row_id: int, *, version: int, check_run_id: int,
                             named_runs: dict[str, int] | None = None) -> None:
        """Sent as of ``version``; ``named_runs``: the check runs of the named checks made now, by check name."""
        await self.sql.all("check_run_sent", id=row_id, version=version, check_run_id=check_run_id,
                           named_runs=Jsonb(named_runs or {}))

    async def check_run_failed(self, row_id: int, *, error: str, delay_s: float, give_up: bool) -> None:
        await self.sql.all("check_run_failed", id=row_id, error=error[:2000], delay_s=delay_s, give_up=give_up)

    # -- the pull requests' living comments ---------------------------------------------------------------------

    async def pull_seen(self, *, repo: str, number: int, head_ref: str) -> PullRow:
        row = await self.sql.one("pull_seen", repo=repo, number=number, head_ref=head_ref)
        assert row is not None
        return PullRow.from_row(row)

    async def pull(self, *, repo: str, number: int) -> PullRow | None:
        row = await self.sql.one("pull_get", repo=repo, number=number)
        return PullRow.from_row(row) if row else None

    async def pull_answer(self, *, repo: str, number: int, answer: str, full: bool = False) -> None:
        await self.sql.all("pull_answer", repo=repo, number=number, answer=answer[:2000], full=full)

    async def set_priority(self, *, subtask_id: int, priority: int, actor_id: int | None) -> int:
        """A subtask's priority, and its waiting candidates'; how many candidates it moved."""
        async with self.sql.tx() as tx:
            moved = await tx.all("subtask_set_priority", id=subtask_id, priority=priority)
            await insert_event(tx, actor_id=actor_id, kind="priority_set", subtask_id=subtask_id,
                               detail={"priority": priority, "candidates": len(moved)})
        return len(moved)

    async def withdraw(self, *, candidate_id: int, reason: str, actor_id: int | None) -> bool:
        """Take a waiting candidate out of the queue; False when it is past waiting (verified, landing, done)."""
        async with self.sql.tx() as tx:
            row = await tx.one("candidate_withdraw", id=candidate_id, reason=reason)
            if row is not None:
                await insert_event(tx, actor_id=actor_id, kind="candidate_withdrawn", subtask_id=row["subtask_id"],
                                   detail={"candidate": candidate_id})
        return row is not None

    async def take_pulls(self, limit: int = 20) -> list[PullRow]:
        return [PullRow.from_row(r) for r in await self.sql.all("pulls_take", limit=limit)]

    async def pull_comment_sent(self, pull: PullRow, *, version: int, comment_id: int | None, digest: str) -> None:
        await self.sql.all("pull_comment_sent", repo=pull.repo, number=pull.number, version=version,
                           comment_id=comment_id, digest=digest)

    async def pull_comment_failed(self, pull: PullRow, *, error: str, delay_s: float, give_up: bool) -> None:
        await self.sql.all("pull_comment_failed", repo=pull.repo, number=pull.number, error=error[:2000],
                           delay_s=delay_s, give_up=give_up)

    async def pulls(self, *, repo: str) -> list[PullRow]:
        return [PullRow.from_row(r) for r in await self.sql.all("pulls_of", repo=repo)]

    async def candidates_on(self, *, repo: str, ref: str) -> list[Candidate]:
        return [Candidate.from_row(r) for r in await self.sql.all("candidates_on_ref", repo=repo, ref=ref)]

    async def check_runs(self, *, repo: str) -> list[CheckRunRow]:
        return [CheckRunRow.from_row(r) for r in await self.sql.all("check_runs_of", repo=repo)]

    async def outbox(self, *, repo: str, sha: str | None = None) -> list[StatusRow]:
        return [StatusRow.from_row(r) for r in await self.sql.all("forge_status_list", repo=repo, sha=sha)]
