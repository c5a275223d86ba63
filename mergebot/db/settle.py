"""Settling a landing intent: recording its landing, or rolling it back, in the one transaction that holds the
intent's row locked (``LandingStore.settling``). The leader settles its own intent across its compare-and-swap; the
reconciler settles what a crash (or a leader that lost its lock) left pending, across its look at main.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from psycopg.types.json import Jsonb

from mergebot.db.base import Tx
from mergebot.errors import ClaimSuperseded
from mergebot.models import Intent, Landed, Landing, Member
from mergebot.models.judgement import Judgement

if TYPE_CHECKING:
    from mergebot.db.landing import LandingStore


class Settle:
    """What may be done with one pending intent while its row is locked (``LandingStore.settling``)."""

    def __init__(self, store: LandingStore, tx: Tx, intent: Intent) -> None:
        self.store, self.tx, self.intent = store, tx, intent

    async def finish(self) -> tuple[Landed, list[int]]:
        """main has moved to the intent's commit: record it with the subtasks and the intent.

        A batch writes one landed row per member, each naming its own merge commit and the commit main moved to.
        A member whose claim changed under the landing (it should not happen: every member is fenced just
        before main moves) is recorded as a finding and its candidate cancelled; if none could take the landing,
        ``ClaimSuperseded`` is raised and nothing of it is written (``abandon`` then keeps the evidence). Returns
        the last landed row and the subtasks that became ready.
        """
        e, v = self.intent.evidence, self.intent.evidence.verifier
        members = self.intent.members()
        landed: Landed | None = None
        released: list[int] = []
        refused: list[tuple[Member, str]] = []
        landed_ids: dict[str, int] = {}
        tx, intent = self.tx, self.intent
        for m in members:
            landing = Landing(
                subtask_id=m.subtask_id, claim_version=m.claim_version, owner_id=m.owner_id, repo=intent.repo,
                target_ref=intent.target_ref, candidate_sha=m.candidate_sha, base_sha=m.base_sha,
                merged_sha=m.merged_sha, tree_sha=m.tree_sha, verifier_command=v["command"],
                verifier_result=m.outcome or e.outcome, duration_ms=v["duration_ms"], log_digest=v["log_digest"],
                main_sha=intent.new_sha, batch_size=len(members), verifier_cache=v.get("cache"),
                verifier_sandbox=v.get("sandbox"), verifier_limits=(v.get("limits") or {}).get("enforced"),
                tests_changed=list(Judgement.of_record(v).changed) or None,
                policy=e.policy, union_merged=list(m.union_merged) or None)
            try:
                async with tx.savepoint():  # one member's refusal undoes only it
                    row, freed = await self.store._land_in(tx, landing, actor_id=None,
                                                           candidate_id=m.candidate_id, intent_id=intent.id)
            except ClaimSuperseded as err:
                refused.append((m, err.message))
                continue
            landed = row
            landed_ids[row.merged_sha] = row.id
            released += freed
        if landed is None:
            raise ClaimSuperseded(refused[-1][1], subtask_id=members[-1].subtask_id)
        for a in intent.attestations:  # every commit main moved through keeps its statements
            await tx.all("attest_insert", repo=intent.repo, landed_id=landed_ids.get(a["sha"]), kind=a["kind"],
                         subject_sha=a["sha"], sequence=a.get("sequence"), keyid=a["keyid"],
                         envelope=Jsonb(a["envelope"]))
        for m, why in refused:
            await tx.all("candidate_finish", id=m.candidate_id, status="cancelled", reason=why, base_sha=None,
                         merged_sha=None, verifier=None, verdict=None)
            await tx.all("finding_insert", repo=intent.repo, kind="landed_without_claim",
                         detail=Jsonb({"sha": m.merged_sha, "subtask_id": m.subtask_id, "why": why}))
        await tx.all("intent_resolve", id=intent.id, status="done")
        return landed, released

    async def roll_back(self, reason: str) -> None:
        """main never moved: forget the intent and give the candidates back to the queue."""
        await self._close("queued", reason)

    async def abandon(self, reason: str) -> None:
        """main moved but no subtask could take the landing (should not happen): keep the evidence, and say so (a
        ``landed_without_claim`` finding)."""
        await self._close("cancelled", reason)
        await self.tx.all("finding_insert", repo=self.intent.repo, kind="landed_without_claim",
                          detail=Jsonb({"sha": self.intent.new_sha, "why": reason}))

    async def _close(self, status: str, reason: str) -> None:
        await self.tx.all("intent_resolve", id=self.intent.id, status="rolled_back")
        for m in self.intent.members():
            await self.tx.all("candidate_finish", id=m.candidate_id, status=status, reason=reason, base_sha=None,
                              merged_sha=None, verifier=None, verdict=None)
