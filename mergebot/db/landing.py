"""The landing path's records: candidates in the queue, landing intents, landed rows, main's status and the
reconciler's findings (repositories, their rules and their state are ``mergebot.db.repos``).

Rules:
  * An accepted push becomes a candidate in one transaction with the subtask's submission (fenced by owner and
    claim version), superseding its older queued candidates (``enqueue``). The same push announced twice is
    queued once.
  * Before main moves, the intent is written with all its evidence (``begin_landing``); after, one transaction
    writes each member's landed row, marks its subtask landed, releases its dependents, closes its candidate and
    resolves the intent (``settling``, ``mergebot.db.settle``). A crash in between leaves a pending intent the
    reconciler finishes or rolls back from the evidence alone.
  * Landing without the queue (``land``: the seeds' replay, tests) runs the same statements.
  * A red main parks candidates (``finish_candidate``); green again or an admin's resume puts them back in the
    queue (``mergebot.db.repos``).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from psycopg.types.json import Jsonb

from mergebot import messages as say
from mergebot.db.base import Row, Sql, Tx, insert_event, storable
from mergebot.db.settle import Settle
from mergebot.db.waiter import CANDIDATE, PUSH, Waiter, read_until
from mergebot.errors import ClaimSuperseded, NotFound
from mergebot.models import Candidate, Evidence, Intent, Landed, Landing, Owner

# A candidate's statuses that end its push's story (what ``mergebot submit`` waits for).
CANDIDATE_VERDICTS = frozenset({"landed", "rejected", "superseded", "cancelled", "parked", "awaiting_approval"})


@dataclass(frozen=True)
class Unfenced:
    """No intent written: these candidates (by id) no longer hold their fence, each with why."""

    why: dict[int, str]


class LandingStore:
    def __init__(self, sql: Sql, waiter: Waiter, *, lease_seconds: float = 120.0) -> None:
        self.sql = sql
        self.waiter = waiter
        self.lease_seconds = lease_seconds  # a reverted subtask's new lease, as its owner's claim would have

    # -- pushes ------------------------------------------------------------------------------------------

    async def owner_facts(self, ids: list[int]) -> dict[int, Owner]:
        rows = await self.sql.all("subtask_owner_facts", ids=ids)
        return {r["subtask_id"]: Owner(**r) for r in rows}

    async def risk_facts(self, *, repo: str, owner_id: int, subtask_id: int, paths: list[str],
                         own: tuple[str, ...]) -> Row:
        """What a push's failure estimate rests on (``mergebot.landing.intake.risk.Facts``), before it is queued."""
        row = await self.sql.one("candidate_risk_facts", repo=repo, owner_id=owner_id, subtask_id=subtask_id,
                                 paths=paths[:1000], own=list(own))
        assert row is not None
        return row

    async def touching(self, *, repo: str, subtask_id: int, paths: list[str]) -> list[Row]:
        """Other subtasks' live candidates that change any of ``paths`` (``shared``: which)."""
        if not paths:
            return []
        return await self.sql.all("candidates_touching", repo=repo, subtask_id=subtask_id, paths=paths[:1000])

    async def twin(self, *, repo: str, patch_id: str, subtask_id: int) -> Row | None:
        """Another subtask's landed or live candidate with the same change (``patch_id``), if any."""
        return await self.sql.one("candidate_twin", repo=repo, patch_id=patch_id, subtask_id=subtask_id)

    async def enqueue(self, *, repo: str, subtask_id: int, claim_version: int, owner_id: int, sha: str, ref: str,
                      superseded: str, patch_id: str | None = None,
                      outside_footprint: list[str] | None = None, paths: list[str] | None = None,
                      risk: tuple[float, dict[str, Any]] | None = None, pushed_at: float | None = None,
                      suspicious: list[dict[str, Any]] | None = None) -> Candidate:
        """An accepted push: submit the subtask (fenced), supersede its older queued candidates (with the reason
        ``superseded``), queue this one.

        The same push announced twice (a forge's push and pull-request events) is queued once: the existing
        candidate is returned.
        """
        async with self.sql.tx() as tx:
            await tx.all("subtask_push_lock", subtask_id=subtask_id)
            same = await tx.one("candidate_same_push", subtask_id=subtask_id, claim_version=claim_version, sha=sha)
            if same is not None:
                return Candidate.from_row(same)
            if not await tx.all("subtask_submit_push", id=subtask_id, owner_id=owner_id, claim_version=claim_version,
                                sha=sha):
                raise ClaimSuperseded(say.push_not_yours(subtask_id, claim_version), subtask_id=subtask_id)
            await tx.all("candidates_supersede", subtask_id=subtask_id, reason=superseded)
            row = await tx.one("candidate_insert", repo=repo, subtask_id=subtask_id, sha=sha, ref=ref,
                               patch_id=patch_id, outside_footprint=outside_footprint,
                               paths=paths[:1000] if paths is not None else None,
                               failure_risk=risk[0] if risk else None, risk_facts=Jsonb(risk[1]) if risk else None,
                               pushed_at=pushed_at, suspicious=Jsonb(storable(suspicious)) if suspicious else None)
            await insert_event(tx, actor_id=owner_id, kind="push_accepted", subtask_id=subtask_id,
                               claim_version=claim_version, detail={"repo": repo, "ref": ref, "sha": sha})
        assert row is not None
        return Candidate.from_row(row)

    async def live_candidate(self, *, subtask_id: int, claim_version: int, sha: str) -> Candidate | None:
        """The queued, in-flight, parked or landed candidate for exactly this push, if any."""
        row = await self.sql.one("candidate_same_push", subtask_id=subtask_id, claim_version=claim_version, sha=sha)
        return Candidate.from_row(row) if row else None

    async def unaccounted_tips(self, tips: list[tuple[int, int, str]]) -> dict[tuple[int, int, str], bool]:
        """Of these (subtask, claim version, sha) branch tips, the ones no candidate accounts for, each with
        whether a refusal of that push is on record."""
        if not tips:
            return {}
        rows = await self.sql.all("branch_tips_unaccounted", subtask_ids=[t[0] for t in tips],
                                  versions=[t[1] for t in tips], shas=[t[2] for t in tips])
        return {(r["subtask_id"], r["claim_version"], r["sha"]): r["refused"] for r in rows}

    # -- the queue ---------------------------------------------------------------------------------------

    async def next_candidate(self, repo: str, exclude: list[int] | None = None, *,
                             max_passes: int = 4) -> Candidate | None:
        """The next candidate that still holds its fence, taken (verifying); every candidate the queue could take
        that no longer holds its fence is superseded, with the reason why, in the same statement."""
        row = await self.sql.one("candidate_next", repo=repo, exclude=exclude or [], max_passes=max_passes,
                                 words=Jsonb(say.FENCE_WORDS))
        return Candidate.from_row(row) if row else None

    async def waiting_candidates(self, repo: str, exclude: list[int], limit: int) -> list[Candidate]:
        return [Candidate.from_row(r) for r in await self.sql.all("candidates_waiting", repo=repo, exclude=exclude,
                                                                  limit=limit)]

    async def mark_merged(self, cand_id: int) -> None:
        await self.sql.all("candidate_merged", id=cand_id)

    async def take_candidate(self, cand_id: int) -> Candidate | None:
        """Take one queued candidate out of turn; None when it is no longer queued."""
        row = await self.sql.one("candidate_take", id=cand_id)
        return Candidate.from_row(row) if row else None

    async def fences(self, cand_ids: list[int]) -> dict[int, str | None]:
        """Why each candidate no longer holds its fence, by id (None: it does; ``candidate_unfenced``, the rule the
        statement that takes the next candidate applies too). A candidate with no row is gone with its subtask."""
        return await _fences(self.sql, cand_ids)

    async def finish_candidate(self, cand_id: int, status: str, reason: str | None = None, *,
                               base_sha: str | None = None, merged_sha: str | None = None,
                               verifier: dict[str, Any] | None = None,
                               verdict: dict[str, Any] | None = None) -> Candidate:
        """A candidate's new status, with its reason and, for a verdict, its kind and facts (``verdict``)."""
        row = await self.sql.one("candidate_finish", id=cand_id, status=status, reason=reason, base_sha=base_sha,
                                 merged_sha=merged_sha, verifier=Jsonb(verifier) if verifier is not None else None,
                                 verdict=Jsonb(verdict) if verdict is not None else None)
        if row is None:  # it landed meanwhile (another leader's landing): it stays landed
            return await self.get_candidate(cand_id)
        return Candidate.from_row(row)

    async def candidates(self, *, repo: str | None = None, subtask_id: int | None = None,
                         limit: int = 100) -> list[Row]:
        return await self.sql.all("candidate_list", repo=repo, subtask_id=subtask_id, limit=limit)

    async def get_candidate(self, cand_id: int) -> Candidate:
        row = await self.sql.one("candidate_get", id=cand_id)
        if row is None:
            raise NotFound(say.no_such_candidate(cand_id))
        return Candidate.from_row(row)

    async def wait_candidate(self, cand_id: int, timeout: float) -> Candidate:
        """Until the candidate reaches a verdict (``CANDIDATE_VERDICTS``) or ``timeout`` passes: an agent's push
        waits for its verdict with this, in one request."""
        cand: Candidate = await read_until(self.waiter, CANDIDATE, [cand_id], lambda: self.get_candidate(cand_id),
                                           lambda c: c.status in CANDIDATE_VERDICTS, timeout)
        return cand

    async def commit_candidate(self, *, subtask_id: int, sha: str) -> Candidate | None:
        """The subtask's newest candidate for the commit ``sha`` (or a prefix of it), if any."""
        row = await self.sql.one("candidate_of_commit", subtask_id=subtask_id, sha=sha)
        return Candidate.from_row(row) if row else None

    async def wait_commit(self, *, subtask_id: int, sha: str, timeout: float) -> Candidate | None:
        """Until the subtask's candidate for exactly ``sha`` reaches a verdict (``CANDIDATE_VERDICTS``) or
        ``timeout`` passes, waking on the subtask's ``mergebot_push`` announcements (its candidates made or
        changed), so a wait may begin before the commit's candidate exists. A newer or older push of the subtask
        never answers it."""
        cand: Candidate | None = await read_until(
            self.waiter, PUSH, [subtask_id], lambda: self.commit_candidate(subtask_id=subtask_id, sha=sha),
            lambda c: c is not None and c.status in CANDIDATE_VERDICTS, timeout)
        return cand

    async def in_flight(self, subtask_id: int) -> Candidate | None:
        """The subtask's newest candidate still queued or running (or waiting for main or an approval)."""
        row = await self.sql.one("candidate_in_flight", subtask_id=subtask_id)
        return Candidate.from_row(row) if row else None

    async def requeue_stuck(self, repo: str) -> list[int]:
        return [r["id"] for r in await self.sql.all("candidates_requeue_stuck", repo=repo)]

    # -- landing -----------------------------------------------------------------------------------------

    async def begin_landing(self, *, cand: Candidate, target_ref: str, old_sha: str, new_sha: str, tree_sha: str,
                            evidence: Evidence, verdict: dict[str, Any],
                            attestations: list[dict[str, Any]] | None = None) -> Intent | Unfenced:
        """Write the intent (with all the evidence) before main moves; its candidates are ``landing`` now.

        Only while every member still holds its fence: their subtasks are locked (FOR SHARE) and the fence read
        again in the intent's own transaction, so nothing changes a member's claim between that read and the
        intent (a lead's cancel waits for the lock, then is refused: ``SubtaskStore.cancel``). When a member no
        longer holds it, nothing is written and ``Unfenced`` says why, by candidate.

        A batch (``evidence.batch``) is several candidates verified together by one run: each member's merge is
        on main's first-parent chain between ``old_sha`` and ``new_sha``, and the last member is ``cand``.
        ``verdict`` is what each candidate's ``verifier`` shows (the run and its runs); ``attestations``: the
        landing's signed statements, kept with the landed rows when it is recorded.
        """
        ids = [m.candidate_id for m in evidence.batch] or [cand.id]
        async with self.sql.tx() as tx:
            await tx.all("subtasks_lock_members", ids=ids)
            unfenced = {i: w for i, w in (await _fences(tx, ids)).items() if w is not None}
            if unfenced:
                return Unfenced(unfenced)
            row = await tx.one("intent_insert", candidate_id=cand.id, repo=cand.repo, target_ref=target_ref,
                               old_sha=old_sha, new_sha=new_sha, tree_sha=tree_sha, evidence=Jsonb(evidence.to_json()),
                               attestations=Jsonb(attestations) if attestations else None)
            assert row is not None
            intent = Intent.from_row(row)
            for m in intent.members():
                await tx.all("candidate_finish", id=m.candidate_id, status="landing", reason=None,
                             base_sha=m.base_sha, merged_sha=m.merged_sha, verifier=Jsonb(verdict), verdict=None)
        return intent

    async def pending_intents(self, repo: str) -> list[Intent]:
        return [Intent.from_row(r) for r in await self.sql.all("intent_pending", repo=repo)]

    @contextlib.asynccontextmanager
    async def settling(self, intent: Intent) -> AsyncIterator[Settle | None]:
        """One transaction with the intent's row locked: a ``Settle`` to record its landing or roll it back, or
        None when it is no longer pending (another leader settled it). The leader holds it across its
        compare-and-swap, and the reconciler across its look at main, so a leader that lost its lock mid-landing
        and the one that took over decide about one intent one after the other (the protocol model's take-over
        finding, docs/protocol.md)."""
        async with self.sql.tx() as tx:
            held = await tx.one("intent_lock", id=intent.id)
            yield Settle(self, tx, intent) if held is not None and held["status"] == "pending" else None

    async def finish_landing(self, intent: Intent) -> tuple[Landed, list[int]] | None:
        """``Settle.finish`` in a transaction of its own; None when the intent was no longer pending."""
        async with self.settling(intent) as settle:
            return await settle.finish() if settle is not None else None

    async def land(self, landing: Landing, *, actor_id: int | None = None) -> tuple[Landed, list[int]]:
        """Land a fenced submission without the queue, in one transaction: its landed row, the subtask landed,
        its dependents released. Returns the landed row and the ids of subtasks that became ready."""
        async with self.sql.tx() as tx:
            return await self._land_in(tx, landing, actor_id=actor_id, candidate_id=None, intent_id=None)

    async def _land_in(self, tx: Tx, landing: Landing, *, actor_id: int | None, candidate_id: int | None,
                       intent_id: int | None) -> tuple[Landed, list[int]]:
        row = await tx.one(
            "subtask_land", id=landing.subtask_id, owner_id=landing.owner_id, claim_version=landing.claim_version,
            candidate_sha=landing.candidate_sha, repo=landing.repo, target_ref=landing.target_ref,
            base_sha=landing.base_sha, merged_sha=landing.merged_sha, tree_sha=landing.tree_sha,
            verifier_command=landing.verifier_command, verifier_result=landing.verifier_result,
            duration_ms=landing.duration_ms, log_digest=landing.log_digest, actor_id=actor_id,
            main_sha=landing.main_sha, batch_size=landing.batch_size, intent_id=intent_id, candidate_id=candidate_id,
            verifier_cache=Jsonb(landing.verifier_cache) if landing.verifier_cache is not None else None,
            verifier_sandbox=landing.verifier_sandbox, verifier_limits=landing.verifier_limits,
            tests_changed=landing.tests_changed, policy=landing.policy, union_merged=landing.union_merged)
        if row is None:
            raise ClaimSuperseded(say.nothing_landed(landing.subtask_id, landing.claim_version, landing.candidate_sha),
                                  subtask_id=landing.subtask_id)
        locked = [r["id"] for r in await tx.all("dependents_lock", id=landing.subtask_id)]
        released = []
        if locked:
            released = [r["id"] for r in await tx.all("dependents_release", ids=locked, actor_id=actor_id)]
        if row["reverts"] is not None:  # a revert landed: the reverted subtask goes back to its owner
            why = await tx.one("subtask_get", id=landing.subtask_id)
            await tx.all("subtask_send_back", reverts=row["reverts"], lease_seconds=self.lease_seconds,
                         reason=(why or {}).get("description") or "")
        if candidate_id is not None:  # its verdict names the files merged by union, when there are any
            merged = {"kind": "landed", "union_merged": landing.union_merged} if landing.union_merged else None
            await tx.all("candidate_finish", id=candidate_id, status="landed", reason=None, base_sha=landing.base_sha,
                         merged_sha=landing.merged_sha, verifier=None, verdict=Jsonb(merged) if merged else None)
        return Landed.from_row(row), released

    async def landed(self, *, repo: str | None = None, subtask_id: int | None = None, owner: str | None = None,
                     before_id: int | None = None, limit: int = 100) -> list[Landed]:
        rows = await self.sql.all("landed_list", repo=repo, subtask_id=subtask_id, owner=owner, before_id=before_id,
                                  limit=limit)
        return [Landed.from_row(r) for r in rows]

    async def get_landed(self, landed_id: int) -> Landed:
        row = await self.sql.one("landed_get", id=landed_id)
        if row is None:
            raise NotFound(say.no_such_landed(landed_id), field="id")
        return Landed.from_row(row)

    async def landed_chain(self, repo: str) -> dict[str, Row]:
        return {r["merged_sha"]: r for r in await self.sql.all("landed_chain", repo=repo)}

    # -- findings and main's status ----------------------------------------------------------------------

    async def add_finding(self, *, repo: str, kind: str, detail: dict[str, Any]) -> None:
        await self.sql.all("finding_insert", repo=repo, kind=kind, detail=Jsonb(detail))

    async def findings(self, *, repo: str | None = None, limit: int = 100) -> list[Row]:
        return await self.sql.all("finding_list", repo=repo, limit=limit)

    async def set_main_status(self, *, landed_id: int, status: str) -> None:
        await self.sql.all("landed_set_main_status", id=landed_id, main_status=status)

    # -- approvals ---------------------------------------------------------------------------------------

    async def approvers(self, commits: list[tuple[int, str]]) -> dict[tuple[int, str], list[str]]:
        """Who approved each (subtask, sha), by name, oldest first (empty: no one yet)."""
        if not commits:
            return {}
        rows = await self.sql.all("approvers_of", subtask_ids=[c[0] for c in commits], shas=[c[1] for c in commits])
        return {(r["subtask_id"], r["sha"]): list(r["approvers"] or []) for r in rows}

    async def approve(self, cand: Candidate, *, approver_id: int, via: str, forge_login: str | None,
                      reason: str) -> Candidate:
        """Record an approval of the candidate's exact commit; one that waited for it goes back to the queue (with
        ``reason``), in the same transaction. The candidate as it is now."""
        async with self.sql.tx() as tx:
            await tx.all("approval_insert", id=cand.id, approver_id=approver_id, forge_login=forge_login, via=via)
            row = await tx.one("candidate_approved", id=cand.id, reason=reason)
            await insert_event(tx, actor_id=approver_id, kind="candidate_approved", subtask_id=cand.subtask_id,
                               claim_version=cand.claim_version,
                               detail={"candidate": cand.id, "sha": cand.sha, "via": via, "login": forge_login,
                                       "requeued": row is not None})
        return Candidate.from_row(row) if row is not None else await self.get_candidate(cand.id)

    async def approvals(self, cand_id: int) -> list[Row]:
        """A candidate's approvals (of its subtask's same commit): who, when, how."""
        return await self.sql.all("approvals_of_candidate", id=cand_id)

    async def requeue_awaiting(self, repo: str, reason: str) -> list[int]:
        """Every candidate of ``repo`` waiting for an approval goes back to the queue (its rule changed: it is
        judged by the new one when it passes again)."""
        return [r["id"] for r in await self.sql.all("candidates_requeue_awaiting", repo=repo, reason=reason)]


async def _fences(q: Sql | Tx, cand_ids: list[int]) -> dict[int, str | None]:
    """``candidate_unfenced`` for each candidate, by id (None: it holds its fence; no row: gone with its subtask)."""
    rows = await q.all("candidate_fences", ids=sorted(set(cand_ids)), words=Jsonb(say.FENCE_WORDS))
    found = {r["id"]: r["unfenced"] for r in rows}
    return {i: found.get(i, say.FENCE_GONE) for i in cand_ids}
