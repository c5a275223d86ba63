"""What an agent is told about its work: a candidate's verdict, a subtask with its branch and latest verdict, one
commit's verdict (a wait keyed on subtask and commit), and a retry that found its commit already in flight, read
with the subtask and repository as they are now (``verdicts`` decides what they say)."""

from __future__ import annotations

from typing import Any

from mergebot import messages as say
from mergebot.db.database import Database
from mergebot.db.landing import CANDIDATE_VERDICTS
from mergebot.landing.judge import verdicts
from mergebot.messages.refs import subtask_branch
from mergebot.models import Candidate, Subtask, Verdict, record


async def candidate_verdict(db: Database, cand: Candidate, sub: Subtask | None = None) -> Verdict:
    sub = sub or await db.subtasks.get_subtask(cand.subtask_id)
    repo = await db.repos.get_repo(cand.repo)
    return verdicts.for_candidate(cand, sub, repo.target_branch)


async def candidate_record(db: Database, cand: Candidate) -> dict[str, Any]:
    """The candidate as the API answers it: its row, with its typed verdict."""
    return {**record(cand), "verdict": record(await candidate_verdict(db, cand))}


async def subtask_record(db: Database, sub: Subtask) -> dict[str, Any]:
    """The subtask as the API answers it: its row, the branch its claim pushes to, and its latest verdict."""
    out = record(sub)
    out["branch"] = subtask_branch(sub.id, sub.claim_version) if sub.claim_version > 0 else None
    rows = await db.landing.candidates(subtask_id=sub.id, limit=1)
    latest = Candidate.from_row(rows[0]) if rows else None
    out["candidate_id"] = latest.id if latest else None
    out["verdict"] = record(await candidate_verdict(db, latest, sub)) if latest else None
    out["acceptance"] = (await db.subtasks.acceptance_paths([sub.id])).get(sub.id, [])  # its contract, by path
    return out


async def commit_record(db: Database, subtask_id: int, sha: str, cand: Candidate | None) -> dict[str, Any]:
    """The verdict of one commit of a subtask, as a wait keyed on (subtask, head commit) answers it: that
    commit's newest candidate with its typed verdict, or ``unknown`` while none exists. ``done``: the commit
    reached a verdict that ends a wait (``landed``, ``rejected``, ``superseded``, ...)."""
    if cand is None:
        return {"subtask_id": subtask_id, "sha": sha, "status": "unknown", "done": False, "candidate_id": None,
                "candidate": None, "verdict": None, "message": say.no_candidate_for_commit(subtask_id, sha)}
    out = await candidate_record(db, cand)
    return {"subtask_id": subtask_id, "sha": cand.sha, "status": cand.status,
            "done": cand.status in CANDIDATE_VERDICTS, "candidate_id": cand.id, "candidate": out,
            "verdict": out["verdict"], "message": out["verdict"]["message"]}


async def already_record(db: Database, cand: Candidate) -> dict[str, Any]:
    """A retry (``submit --again``, ``@mergebot retry``, a lead's retry) while the commit is in flight: a no-op
    answered with that candidate, and how to wait for it."""
    return {"candidate": await candidate_record(db, cand), "already": True,
            "message": say.already_in_flight(cand.id, cand.status, cand.subtask_id, cand.sha)}
