"""The offered-load fleet's accounting (``python -m bench.fleet --offered``), pure: what the agents saw, as a list of
events, turned into the figures issue 45 asks for.

Rules:

* **Events.** Each agent records ``Event(at, agent, kind, subtask, claim_version, detail)`` as it goes:
  ``claim`` (a claim was answered), ``pushed`` (a push was queued as a candidate), ``beat_refused`` (a heartbeat of
  that claim was refused: the lease is gone), ``push_refused`` (a push was refused at push time; ``detail`` is the
  refusal's kind and text), ``landed``, ``rejected`` (a verdict sent the work back: the agent fixes it under the same
  claim), ``given_up`` (the agent stopped holding the claim without it landing).
* **Lost leases.** A claim is *lost while working* when a heartbeat of it was refused, or a push under it was
  refused as not under a claim ("only work under a claim can be pushed"), and it never landed. Its work is *redone*
  when the subtask was claimed again at a later claim version (counted once per lost claim).
* **Work in progress.** An agent's WIP is its claims held: from ``claim`` until ``landed``, ``given_up`` or the claim
  being lost; a held claim is a running claim or a queued candidate. The figure is the most any agent held at once.
* **Refusals.** Every refusal an agent received, at claim or push time, is ``Refusal(where, kind, next_named)``:
  tallied by kind with how many named a next step.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

NOT_UNDER_CLAIM = "only work under a claim can be pushed"
# the push refusals that say the claim is gone (the pre-receive's codes and the verdicts' kinds for them)
CLAIM_GONE_KINDS = ("not_running", "stale_claim", "claim_superseded", "claim_gone", "not_owner")


@dataclass(frozen=True)
class Event:
    at: float
    agent: int
    kind: str  # claim, pushed, beat_refused, push_refused, landed, rejected, given_up
    subtask: int
    claim_version: int
    detail: str = ""


@dataclass(frozen=True)
class Refusal:
    where: str  # claim or push
    kind: str
    next_named: bool
    message: str = ""


def claim_gone(kind: str, text: str) -> bool:
    """Whether a push refusal says the work was not under a (live) claim."""
    return NOT_UNDER_CLAIM in text or kind in CLAIM_GONE_KINDS


def lease_accounting(events: Iterable[Event]) -> dict[str, int]:
    """Claims, claims lost while working, pushes refused as not under a claim, and work redone after a lost claim
    (a later claim version of the subtask, whenever its agent learnt of the loss). A claim that landed was not
    lost, whatever a heartbeat racing its landing was told."""
    ordered = list(events)
    landed = {(e.subtask, e.claim_version) for e in ordered if e.kind == "landed"}
    claimed: dict[int, set[int]] = defaultdict(set)
    refused_not_under = 0
    lost: set[tuple[int, int]] = set()
    for e in ordered:
        key = (e.subtask, e.claim_version)
        if e.kind == "claim":
            claimed[e.subtask].add(e.claim_version)
        elif e.kind == "beat_refused" and key not in landed:
            lost.add(key)
        elif e.kind == "push_refused" and key not in landed and claim_gone(*_kind_text(e.detail)):
            refused_not_under += 1
            lost.add(key)
    redone = sum(1 for sid, cv in lost if any(v > cv for v in claimed[sid]))
    return {"claims": sum(len(v) for v in claimed.values()), "claims_lost_while_working": len(lost),
            "pushes_refused_not_under_claim": refused_not_under, "work_redone": redone}


def _kind_text(detail: str) -> tuple[str, str]:
    kind, _, text = detail.partition(":")
    return kind.strip(), text


def max_wip(events: Iterable[Event]) -> dict[str, Any]:
    """The most claims (running, or queued as a candidate) any agent held at once, and which agent."""
    held: dict[int, set[tuple[int, int]]] = defaultdict(set)
    best, who = 0, None
    for e in sorted(events, key=lambda e: e.at):
        key = (e.subtask, e.claim_version)
        if e.kind == "claim":
            held[e.agent].add(key)
            if len(held[e.agent]) > best:
                best, who = len(held[e.agent]), e.agent
        elif e.kind in ("landed", "given_up", "beat_refused") or (
                e.kind == "push_refused" and claim_gone(*_kind_text(e.detail))):
            held[e.agent].discard(key)
    return {"max": best, "agent": who}


def refusal_tally(refusals: Iterable[Refusal]) -> dict[str, dict[str, Any]]:
    """Refusals by ``where:kind``: how many, and how many named a next step (and one message of each)."""
    out: dict[str, dict[str, Any]] = {}
    for r in refusals:
        row = out.setdefault(f"{r.where}:{r.kind}", {"n": 0, "named_next": 0, "example": r.message[:300]})
        row["n"] += 1
        row["named_next"] += int(r.next_named)
    return dict(sorted(out.items(), key=lambda kv: -kv[1]["n"]))


def every_refusal_named_next(tally: dict[str, dict[str, Any]]) -> bool:
    return all(row["named_next"] == row["n"] for row in tally.values())


def typed_refusal(status: int, body: Any) -> tuple[str, float | None, bool, list[int], str]:
    """A claim refused with a typed answer (HTTP 429 or 503 with a JSON ``kind``): its kind, how long to wait
    (``retry_after``), whether it names a next step, the other work it offers (subtask ids) and its message. Read
    tolerantly: the kind may sit in the error record or at the top, and an untyped refusal is named by its code."""
    top = body if isinstance(body, dict) else {}
    err = top.get("error") if isinstance(top.get("error"), dict) else {}
    rec = {**top, **err}
    kind = str(rec.get("kind") or rec.get("code") or f"http_{status}")
    retry = rec.get("retry_after", rec.get("retry_after_s"))
    retry_after = float(retry) if isinstance(retry, (int, float)) and not isinstance(retry, bool) else None
    offered: list[int] = []
    for key in ("other_work", "instead", "alternatives", "ready"):
        items = rec.get(key)
        if isinstance(items, list):
            for item in items:
                sid = item.get("id", item.get("subtask_id")) if isinstance(item, dict) else item
                if isinstance(sid, int) and not isinstance(sid, bool):
                    offered.append(sid)
    named = bool(rec.get("next")) or retry_after is not None or bool(offered)
    return kind, retry_after, named, offered, str(rec.get("message") or "")


def counts_by_kind(events: Iterable[Event]) -> dict[str, int]:
    return dict(Counter(e.kind for e in events))
