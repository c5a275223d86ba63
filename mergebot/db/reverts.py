"""A red main's mending, as the database keeps it: the landings since main was last green (the suspects), the
bot's revert of a culprit queued once as a candidate of its own, what builds on a reverted landing held until it
lands again, and a mend that gave up remembered (``mergebot.landing.main.mend`` does the work).

Rules:
  * A revert is queued once per culprit: a second call returns the first candidate (an idempotency key on its
    subtask).
  * A candidate of a subtask whose dependency is no longer landed is never taken (``candidate_next``); here its
    candidates and its owner are told why.
"""

from __future__ import annotations

from mergebot.db.base import Sql, insert_event
from mergebot.models import Candidate, Landed


class RevertStore:
    def __init__(self, sql: Sql) -> None:
        self.sql = sql

    async def mend_given_up(self, repo: str, sha: str | None) -> None:
        """Record that mending main at ``sha`` gave up (None: it may be tried again)."""
        await self.sql.all("repo_mend_given_up", name=repo, sha=sha)

    async def since_green(self, repo: str, upto: int) -> list[Landed]:
        """The landings since main's check last passed, up to landed row ``upto``, oldest first (at most 64)."""
        return [Landed.from_row(r) for r in await self.sql.all("landed_since_green", repo=repo, upto=upto)]

    async def hold_dependents(self, subtask_id: int, *, bot_id: int, reason: str) -> list[int]:
        """A landing of ``subtask_id`` was reverted: its dependents that have not landed wait for it to land again,
        told ``reason`` on their candidates and in a note (``dependents_hold``). Their ids."""
        return [r["id"] for r in await self.sql.all("dependents_hold", id=subtask_id, bot_id=bot_id, reason=reason)]

    async def unlanded_dependencies(self, subtask_id: int) -> list[int]:
        return [r["id"] for r in await self.sql.all("subtask_unlanded_dependencies", id=subtask_id)]

    async def reverts_queued(self, landed_ids: list[int]) -> bool:
        """Whether the bot has queued a revert of any of these landings."""
        return await self.sql.one("reverts_queued", ids=landed_ids) is not None

    async def queue_revert(self, *, repo: str, culprit: Landed, bot_id: int, title: str, evidence: str, sha: str,
                           ref: str) -> Candidate:
        """Queue the bot's revert of ``culprit``: its own subtask, submitted by the bot, and a candidate that names
        the landing it reverts (first in the queue). Once per culprit: a second call returns the first candidate.
        ``evidence`` is what the culprit's owner is told when the revert lands."""
        async with self.sql.tx() as tx:
            sub = await tx.one("revert_subtask_create", title=title[:200], description=evidence[:20000],
                               bot_id=bot_id, sha=sha, reverts=culprit.id)
            if sub is None:
                row = await tx.one("revert_candidate_of", reverts=culprit.id)
                assert row is not None
                return Candidate.from_row(row)
            row = await tx.one("revert_candidate_insert", repo=repo, subtask_id=sub["id"], bot_id=bot_id, sha=sha,
                               ref=ref, reverts=culprit.id)
            await insert_event(tx, actor_id=None, kind="revert_queued", subtask_id=culprit.subtask_id,
                               claim_version=culprit.claim_version,
                               detail={"repo": repo, "landed": culprit.id, "sha": sha, "revert_subtask": sub["id"]})
        assert row is not None
        return Candidate.from_row(row)
