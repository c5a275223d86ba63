"""Every verdict an agent can be given, as a typed record: its kind, whether it is final, and the command that
comes next. Pure: the queue and the push checks record a kind and its facts; this module turns them, with the
subtask as it is now, into the ``Verdict`` every door shows (API, CLI, MCP tools, pages, statuses). What each kind
means and what to do next are words, in ``mergebot.messages.kinds``; this module holds the logic only.

Rules:
  * ``KINDS`` is the whole list, one entry for each kind of ``mergebot.messages.kinds``; the agents' guide
    (``docs/agents.md``) explains each one (a test checks it).
  * A candidate's kind is the one its verdict recorded when it was rejected (every rejection records one), else
    its status's; never read from the words of its reason.
  * A verdict is ``final`` when nothing more happens by itself. Waiting (queued, verifying, landing) and a
    pre-existing failure (parked: it lands once main is green again) are not final.
  * A rejection records what its agent was told then (``told``: the message, ``next``, the branch), which the
    candidate's verdict carries from then on; ``next`` itself is always worked out as things are now.
  * ``next`` is one command. While the claim still holds, ``branch`` is the exact ref to push to; once it does
    not (the subtask landed, was reclaimed, went back to ready), there is no branch and ``next`` says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from mergebot.messages import kinds
from mergebot.messages.refs import subtask_ref
from mergebot.models import Candidate, Verdict
from mergebot.models.judgement import Judgement


class Now(Protocol):
    """The subtask as it is now (a ``Subtask``, or the push checks' ``Owner``)."""

    @property
    def status(self) -> str: ...

    @property
    def claim_version(self) -> int: ...


# Waiting (queued, verifying, landing), a pre-existing failure (parked: it lands once main is green again) and a
# passed candidate waiting for an approval are not final; every other kind is.
NOT_FINAL = frozenset({"queued", "verifying", "landing", "pre_existing", "awaiting_approval"})


@dataclass(frozen=True)
class Kind:
    final: bool
    meaning: str
    next: str  # with {sid}, {target} filled in


KINDS: dict[str, Kind] = {name: Kind(name not in NOT_FINAL, words.meaning, words.next)
                          for name, words in kinds.KINDS.items()}

_PUSH_CODES = {"landing": "landing_now"}  # a push refusal's code, where its kind is named apart
_STATUS_KINDS = {"queued": "queued", "verifying": "verifying", "landing": "landing", "landed": "landed",
                 "parked": "pre_existing", "superseded": "superseded", "cancelled": "cancelled",
                 "awaiting_approval": "awaiting_approval"}


def kind_of(cand: Candidate) -> str:
    """The kind of a candidate's verdict: as recorded for a rejection, else from its status."""
    return kind_for(cand.status, cand.verdict)


def kind_for(status: str, verdict: dict[str, Any] | None) -> str:
    """``kind_of`` for a candidate's columns as a page reads them. Every rejection records its kind (migration 0026
    wrote it onto the rows from before kinds were recorded); one without a known kind reads as ``check_failed``."""
    if status != "rejected":
        return _STATUS_KINDS.get(status, "queued")
    kind = (verdict or {}).get("kind")
    return kind if isinstance(kind, str) and kind in KINDS else "check_failed"


def holds(sub: Now | None, claim_version: int) -> bool:
    """Whether the claim at ``claim_version`` still owns the subtask (so its branch is the one to push to)."""
    return sub is not None and sub.claim_version == claim_version and sub.status in ("running", "submitted")


def recorded(kind: str, *, paths: list[str] | None = None, hunks: list[dict[str, Any]] | None = None,
             failing_tests: list[str] | None = None, **more: Any) -> dict[str, Any]:
    """What the queue records with a candidate's new status: the verdict's kind and its facts."""
    assert kind in KINDS, kind
    out: dict[str, Any] = {"kind": kind, **more}
    for name, value in (("paths", paths), ("hunks", hunks), ("failing_tests", failing_tests)):
        if value:
            out[name] = value
    return out


def for_candidate(cand: Candidate, sub: Now | None, target_branch: str) -> Verdict:
    kind = kind_of(cand)
    facts = cand.verdict or {}
    run = cand.verifier or {}
    message = cand.reason or KINDS[kind].meaning.format(target=target_branch)
    return _verdict(kind, message, sub, cand.subtask_id, cand.claim_version, target_branch, candidate_id=cand.id,
                    sha=cand.sha, base_sha=cand.base_sha, merged_sha=cand.merged_sha,
                    paths=list(facts.get("paths") or []), hunks=list(facts.get("hunks") or []),
                    failing_tests=list(facts.get("failing_tests") or run.get("failing_tests") or []),
                    outside_footprint=list(cand.outside_footprint or []), suspicious=list(cand.suspicious or []),
                    log_tail=(run.get("log_tail") or run.get("log_head") or "")[-4000:] if kind in _WITH_LOG else "",
                    sandbox=run.get("sandbox") or None, limits=(run.get("limits") or {}).get("enforced"),
                    tests=tests_facts(run), told=facts.get("told") if isinstance(facts.get("told"), dict) else None,
                    union_merged=list(facts.get("union_merged") or []), in_flight=list(facts.get("in_flight") or []))


def told(kind: str, message: str, sub: Now | None, subtask_id: int, claim_version: int,
         target_branch: str) -> dict[str, Any]:
    """What a rejected candidate's agent is told at the moment of the rejection (``sub``: the subtask then), for the
    queue to record with the verdict: the pages show these words later, not the advice of a later day."""
    v = _verdict(kind, message, sub, subtask_id, claim_version, target_branch)
    return {"message": v.message, "next": v.next, "branch": v.branch}


def tests_facts(run: dict[str, Any]) -> dict[str, Any] | None:
    """What a run's tests came to: the counts and its judgement (the comparison with main's, the held-out checks,
    the own tests, the reset), read as a ``Judgement`` from old and new records alike."""
    tests = run.get("tests")
    judged = Judgement.of_record(run)
    if not isinstance(tests, dict) or (not tests.get("source") and judged.comparison is None):
        return None
    return {**{k: tests[k] for k in ("source", "counts", "total", "problem", "flood") if k in tests},
            **judged.as_json()}


def for_refusal(code: str, message: str, subtask_id: int | None, claim_version: int | None, sha: str | None,
                target_branch: str, sub: Now | None, paths: list[str] | None = None,
                twin: dict[str, Any] | None = None) -> Verdict:
    """A push git refused (its rule's ``code``, ``mergebot.landing.intake.checks``)."""
    kind = _PUSH_CODES.get(code, code if code in KINDS else "history_anomaly")
    return _verdict(kind, message, sub, subtask_id, claim_version, target_branch, sha=sha, paths=paths or [],
                    twin=twin)


_WITH_LOG = frozenset({"check_failed", "check_timeout", "disk_limit", "memory_limit", "flaky_then_failed",
                       "verifier_error", "pre_existing", "tests_weakened", "no_report", "acceptance_failed",
                       "report_flood"})


def _verdict(kind: str, message: str, sub: Now | None, subtask_id: int | None, claim_version: int | None,
             target_branch: str, **facts: Any) -> Verdict:
    k = KINDS[kind]
    sid = subtask_id if subtask_id is not None else "ID"
    nxt = k.next.format(sid=sid, target=target_branch, cand=facts.get("candidate_id") or "CANDIDATE")
    branch = None
    if subtask_id is not None and claim_version is not None and holds(sub, claim_version):
        branch = subtask_ref(subtask_id, claim_version)
    elif k.final and sub is not None and kind not in ("landed", "unknown_subtask", "not_owner", "stale_claim",
                                                      "not_claimed", "claim_superseded"):
        nxt = kinds.claim_gone(sid, sub.status, sub.claim_version)
    return Verdict(kind=kind, message=message, final=k.final, next=nxt, branch=branch, subtask_id=subtask_id,
                   claim_version=claim_version, **facts)
