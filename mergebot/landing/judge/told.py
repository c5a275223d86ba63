"""What an agent is told about its work: a candidate's verdict, and a subtask with its branch and latest verdict,
read with the subtask and repository as they are now (``verdicts`` decides what they say)."""

from __future__ import annotations

from typing import Any

from mergebot.db.database import Database
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
