"""The landing path's records: repositories, candidates in the queue, landing intents, findings.

``LandingStore`` extends the subtask store with the queries of the landing path (same plumbing, same error
translation). The one write that crosses both — landing — is ``finish_landing``: one transaction that marks the
subtask landed with its landed row, releases dependents, resolves the intent and closes the candidate.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from mergebot.errors import ClaimSuperseded, NotFound
from mergebot.landing.checks import Owner
from mergebot.models import Landed, Landing, _FromRow
from mergebot.store import Store

# A candidate's statuses that end its push's story (what ``mergebot submit`` waits for).
CANDIDATE_VERDICTS = frozenset({"landed", "rejected", "superseded", "cancelled", "parked"})


@dataclass
class Repo(_FromRow):
    name: str
    target_branch: str
    verifier_command: str
    verifier_timeout_s: int
    protected_paths: list[str]
    max_push_bytes: int
    max_file_bytes: int
    root_sha: str
    paused: bool = False
    paused_reason: str | None = None
    red_since: str | None = None  # main's head when its check failed; None while main is green
    created_at: datetime | None = None
    forge: str | None = None  # "github", "gitea" or "forgejo" for a forge repository; None when hosted here
    forge_repo: str | None = None  # "owner/name" on the forge
    forge_api_url: str | None = None
    forge_git_url: str | None = None
    webhook_secret_env: str | None = None  # names of environment variables, never the secrets themselves
    forge_token_env: str | None = None

    @property
    def target_ref(self) -> str:
        return f"refs/heads/{self.target_branch}"


@dataclass
class Candidate(_FromRow):
    id: int
    repo: str
    subtask_id: int
    claim_version: int
    owner_id: int
    sha: str
    ref: str
    priority: int
    status: str
    reason: str | None = None
    base_sha: str | None = None
    merged_sha: str | None = None
    verifier: dict[str, Any] | None = None
    queued_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None


@dataclass
class Intent(_FromRow):
    id: int
    candidate_id: int
    repo: str
    target_ref: str
    old_sha: str
    new_sha: str
    tree_sha: str
    evidence: dict[str, Any]
    status: str


class LandingStore(Store):
    # -- repositories ------------------------------------------------------------------------------------

    async def create_repo(self, *, name: str, target_branch: str, verifier_command: str, verifier_timeout_s: int,
                          protected_paths: list[str], max_push_bytes: int, max_file_bytes: int,
                          root_sha: str, forge: dict[str, str] | None = None) -> Repo:
        f = forge or {}
        row = await self._one("repo_create", name=name, target_branch=target_branch,
                              verifier_command=verifier_command, verifier_timeout_s=verifier_timeout_s,
                              protected_paths=protected_paths, max_push_bytes=max_push_bytes,
                              max_file_bytes=max_file_bytes, root_sha=root_sha, forge=f.get("forge"),
                              forge_repo=f.get("forge_repo"), forge_api_url=f.get("forge_api_url"),
                              forge_git_url=f.get("forge_git_url"), webhook_secret_env=f.get("webhook_secret_env"),
                              forge_token_env=f.get("forge_token_env"))
        assert row is not None
        await self.log_event(actor_id=None, kind="repo_added", detail={"repo": name})
        return Repo.from_row(row)

    async def get_repo(self, name: str) -> Repo:
        row = await self._one("repo_get", name=name)
        if row is None:
            raise NotFound(f"no repository named {name!r}", field="repo")
        return Repo.from_row(row)

    async def list_repos(self) -> list[Repo]:
        return [Repo.from_row(r) for r in await self._all("repo_list")]

    # -- pushes ------------------------------------------------------------------------------------------

    async def owner_facts(self, ids: list[int]) -> dict[int, Owner]:
        rows = await self._all("subtask_owner_facts", ids=ids)
        return {r["subtask_id"]: Owner(**r) for r in rows}

    async def enqueue(self, *, repo: str, subtask_id: int, claim_version: int, owner_id: int, sha: str,
                      ref: str) -> Candidate:
        """An accepted push: submit the subtask (fenced), supersede its older queued candidates, queue this one.

        The same push announced twice (a forge's push and pull-request events) is queued once: the existing
        candidate is returned.
        """
        async with self._tx() as cur:
            await self._q(cur, "subtask_push_lock", subtask_id=subtask_id)
            same = await self._q(cur, "candidate_same_push", subtask_id=subtask_id, claim_version=claim_version,
                                 sha=sha)
            if same:
                return Candidate.from_row(same[0])
            if not await self._q(cur, "subtask_submit_push", id=subtask_id, owner_id=owner_id,
                                 claim_version=claim_version, sha=sha):
                raise ClaimSuperseded(f"subtask {subtask_id} is no longer yours at claim version {claim_version}",
                                      subtask_id=subtask_id)
            await self._q(cur, "candidates_supersede", subtask_id=subtask_id,
                          reason=f"superseded by a newer push ({sha[:12]})")
            rows = await self._q(cur, "candidate_insert", repo=repo, subtask_id=subtask_id, sha=sha, ref=ref)
            await self._q(cur, "event_insert", actor_id=owner_id, kind="push_accepted", subtask_id=subtask_id,
                          claim_version=claim_version, detail=Jsonb({"repo": repo, "ref": ref, "sha": sha}))
        return Candidate.from_row(rows[0])

    async def live_candidate(self, *, subtask_id: int, claim_version: int, sha: str) -> Candidate | None:
        """The queued, in-flight, parked or landed candidate for exactly this push, if any."""
        row = await self._one("candidate_same_push", subtask_id=subtask_id, claim_version=claim_version, sha=sha)
        return Candidate.from_row(row) if row else None

    async def candidate_exists(self, *, subtask_id: int, claim_version: int, sha: str) -> bool:
        return await self._one("candidate_exists", subtask_id=subtask_id, claim_version=claim_version,
                               sha=sha) is not None

    # -- the queue ---------------------------------------------------------------------------------------

    async def next_candidate(self, repo: str, exclude: list[int] | None = None) -> Candidate | None:
        row = await self._one("candidate_next", repo=repo, exclude=exclude or [])
        return Candidate.from_row(row) if row else None

    async def candidate_fence(self, cand: Candidate) -> tuple[bool, str]:
        """Whether the subtask still waits on exactly this candidate, and if not, why."""
        return (await self.candidate_fences([cand]))[cand.id]

    async def candidate_fences(self, cands: list[Candidate]) -> dict[int, tuple[bool, str]]:
        """``candidate_fence`` for many candidates in one query, by candidate id."""
        rows = {r["subtask_id"]: r for r in await self._all(
            "candidate_fence", subtask_ids=sorted({c.subtask_id for c in cands}))}
        return {c.id: _fence(rows.get(c.subtask_id), c) for c in cands}

    async def finish_candidate(self, cand_id: int, status: str, reason: str | None = None, *,
                               base_sha: str | None = None, merged_sha: str | None = None,
                               verifier: dict[str, Any] | None = None) -> Candidate:
        row = await self._one("candidate_finish", id=cand_id, status=status, reason=reason, base_sha=base_sha,
                              merged_sha=merged_sha, verifier=Jsonb(verifier) if verifier is not None else None)
        assert row is not None
        return Candidate.from_row(row)

    async def candidates(self, *, repo: str | None = None, subtask_id: int | None = None,
                         limit: int = 100) -> list[dict[str, Any]]:
        return await self._all("candidate_list", repo=repo, subtask_id=subtask_id, limit=limit)

    async def get_candidate(self, cand_id: int) -> Candidate:
        row = await self._one("candidate_get", id=cand_id)
        if row is None:
            raise NotFound(f"candidate {cand_id} does not exist")
        return Candidate.from_row(row)

    async def requeue_stuck(self, repo: str) -> list[int]:
        return [r["id"] for r in await self._all("candidates_requeue_stuck", repo=repo)]

    # -- landing -----------------------------------------------------------------------------------------

    async def begin_landing(self, *, cand: Candidate, target_ref: str, old_sha: str, new_sha: str, tree_sha: str,
                            evidence: dict[str, Any], batch: list[dict[str, Any]] | None = None) -> Intent:
        """Write the intent (with all the evidence) before main moves.

        ``batch``: a landing of several candidates verified together by one run, one entry per member in landing
        order (the last is ``cand``, whose merge is ``new_sha``): candidate_id, subtask_id, claim_version,
        owner_id, candidate_sha, base_sha, merged_sha, tree_sha. Each member's merge is on main's first-parent
        chain between ``old_sha`` and ``new_sha``.
        """
        if batch:
            evidence = {**evidence, "batch": batch}
        async with self._tx() as cur:
            rows = await self._q(cur, "intent_insert", candidate_id=cand.id, repo=cand.repo, target_ref=target_ref,
                                 old_sha=old_sha, new_sha=new_sha, tree_sha=tree_sha, evidence=Jsonb(evidence))
            for m in batch or [{"candidate_id": cand.id, "base_sha": old_sha, "merged_sha": new_sha}]:
                await self._q(cur, "candidate_finish", id=m["candidate_id"], status="landing", reason=None,
                              base_sha=m["base_sha"], merged_sha=m["merged_sha"],
                              verifier=Jsonb(evidence.get("verifier")))
        return Intent.from_row(rows[0])

    async def pending_intents(self, repo: str) -> list[Intent]:
        return [Intent.from_row(r) for r in await self._all("intent_pending", repo=repo)]

    @staticmethod
    def _intent_candidates(intent: Intent) -> list[int]:
        return [m["candidate_id"] for m in intent.evidence.get("batch", [])] or [intent.candidate_id]

    async def finish_landing(self, intent: Intent) -> tuple[Landed, list[int]]:
        """main has moved to the intent's commit: record it, in one transaction with the subtasks and intent.

        A batch writes one landed row per member, each naming its own merge commit and the commit main moved to.
        A member whose claim changed under the landing (it should not happen: every member is fenced just
        before main moves) is recorded as a finding and its candidate cancelled; if none could take the landing,
        ``ClaimSuperseded`` is raised and nothing is written.
        """
        e = intent.evidence
        v = e["verifier"]
        members = e.get("batch") or [{"candidate_id": intent.candidate_id, "subtask_id": e["subtask_id"],
                                       "claim_version": e["claim_version"], "owner_id": e["owner_id"],
                                       "candidate_sha": e["candidate_sha"], "base_sha": intent.old_sha,
                                       "merged_sha": intent.new_sha, "tree_sha": intent.tree_sha}]
        landed: Landed | None = None
        released: list[int] = []
        refused: list[tuple[dict[str, Any], str]] = []
        async with self._tx() as cur:
            for m in members:
                landing = Landing(
                    subtask_id=m["subtask_id"], claim_version=m["claim_version"], owner_id=m["owner_id"],
                    repo=intent.repo, target_ref=intent.target_ref, candidate_sha=m["candidate_sha"],
                    base_sha=m["base_sha"], merged_sha=m["merged_sha"], tree_sha=m["tree_sha"],
                    verifier_command=v["command"], verifier_result=v["outcome"], duration_ms=v["duration_ms"],
                    log_digest=v["log_digest"], main_sha=intent.new_sha, batch_size=len(members))
                try:
                    async with cur.connection.transaction():  # a savepoint: one member's refusal undoes only it
                        row, freed = await self._land_in(cur, landing, actor_id=None, candidate_id=m["candidate_id"])
                except ClaimSuperseded as err:
                    refused.append((m, err.message))
                    continue
                landed = row
                released += freed
            if landed is None:
                raise ClaimSuperseded(refused[-1][1], subtask_id=members[-1]["subtask_id"])
            for m, why in refused:
                await self._q(cur, "candidate_finish", id=m["candidate_id"], status="cancelled", reason=why,
                              base_sha=None, merged_sha=None, verifier=None)
                await self._q(cur, "finding_insert", repo=intent.repo, kind="landed_without_claim",
                              detail=Jsonb({"sha": m["merged_sha"], "subtask_id": m["subtask_id"], "why": why}))
            await self._q(cur, "intent_resolve", id=intent.id, status="done")
        return landed, released

    async def roll_back(self, intent: Intent, reason: str) -> None:
        """main never moved: forget the intent and give the candidates back to the queue."""
        async with self._tx() as cur:
            await self._q(cur, "intent_resolve", id=intent.id, status="rolled_back")
            for cand_id in self._intent_candidates(intent):
                await self._q(cur, "candidate_finish", id=cand_id, status="queued", reason=reason,
                              base_sha=None, merged_sha=None, verifier=None)

    async def abandon_intent(self, intent: Intent, reason: str) -> None:
        """main moved but no subtask could take the landing (should not happen): keep the evidence."""
        async with self._tx() as cur:
            await self._q(cur, "intent_resolve", id=intent.id, status="rolled_back")
            for cand_id in self._intent_candidates(intent):
                await self._q(cur, "candidate_finish", id=cand_id, status="cancelled", reason=reason,
                              base_sha=None, merged_sha=None, verifier=None)

    async def landed_chain(self, repo: str) -> dict[str, dict[str, Any]]:
        return {r["merged_sha"]: r for r in await self._all("landed_chain", repo=repo)}

    async def add_finding(self, *, repo: str, kind: str, detail: dict[str, Any]) -> None:
        await self._all("finding_insert", repo=repo, kind=kind, detail=Jsonb(detail))

    async def findings(self, *, repo: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        return await self._all("finding_list", repo=repo, limit=limit)


def _fence(row: dict[str, Any] | None, cand: Candidate) -> tuple[bool, str]:
    """Whether the subtask's row still waits on exactly this candidate, and if not, why."""
    if row is None:
        return False, "the subtask no longer exists"
    if row["claim_version"] != cand.claim_version or row["owner_id"] != cand.owner_id:
        return False, f"the subtask was reclaimed (claim version {row['claim_version']})"
    if row["status"] != "submitted":
        return False, f"the subtask is {row['status']}"
    if row["candidate_sha"] != cand.sha:
        return False, "a newer push replaced this candidate"
    return True, ""
