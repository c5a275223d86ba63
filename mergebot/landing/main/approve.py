"""Approving a candidate: a lead's, a reviewer's or an admin's word that this exact commit may land, where the
repository requires one (``repo set --require-approval``). Every door comes here: ``mergebot approve`` and the API,
``@mergebot approve`` in a pull request's comment, an approving review on the forge.

Rules:
  * Only a role ``mergebot.auth`` allows to ``approve`` may (an agent may not: it does the work), and never for a
    candidate it pushed itself. A refusal is ``Forbidden`` with a sentence, and nothing is recorded.
  * An approval is for the candidate's commit (its subtask and sha), recorded with who gave it and how; a new push
    is a new candidate that needs a new one. A candidate no longer in the queue (landed, rejected, superseded,
    cancelled) cannot be approved.
  * A candidate that waited (``awaiting_approval``) goes back to the queue in the same transaction; the queue
    verifies it again where main moved, and the gate (``mergebot.landing.main.land.gate``) lets it land. One not yet
    judged lands without waiting once it passes.
"""

from __future__ import annotations

from mergebot import auth
from mergebot import messages as say
from mergebot.db.database import Database
from mergebot.errors import Conflict, Forbidden
from mergebot.models import Agent, Candidate

APPROVABLE = frozenset({"queued", "verifying", "landing", "parked", "awaiting_approval"})


async def approve(db: Database, cand_id: int, by: Agent, *, via: str = "api",
                  forge_login: str | None = None) -> Candidate:
    """Record ``by``'s approval of candidate ``cand_id``'s commit; the candidate as it is now."""
    if not auth.allowed(auth.Role(by.role), "approve"):
        raise Forbidden(say.may_not_approve(by.name, str(by.role)))
    cand = await db.landing.get_candidate(cand_id)  # NotFound for no such candidate
    if cand.owner_id == by.id:
        raise Forbidden(say.may_not_approve_own(by.name, cand.id))
    if cand.status not in APPROVABLE:
        raise Conflict(say.approval_too_late(cand.id, cand.status))
    return await db.landing.approve(cand, approver_id=by.id, via=via, forge_login=forge_login,
                                    reason=say.approved_by(by.name, via))
