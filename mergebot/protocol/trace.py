"""Real runs traced against the model: does a finished run's events table record a behaviour the model allows?

The events table records, for every subtask, each change of its row (``kind = 'status'``: its status, claim
version, owner or pushed commit, written by a trigger in the transaction that changed it) and the protocol's other
steps (``push_accepted``, ``candidate_rejected``, ``created``). The checker reads them in order and holds each
event to the model in two ways:

* **Each subtask's own steps are the model's.** ``moves`` explores the model (``TRACE``, a small bound,
  ``TRACE_RED``, one with a red main's mending, and ``TRACE_OPS``, one with an operator's cancel and retry and a
  subtask failed at its last attempt) and keeps, for every step and every subtask whose row it changed, the
  change as the events table would record it: the status before and after, whether the claim version went up, and
  what happened to the owner (``Move``). An event whose change no step of the model makes (a subtask landed from
  ``running``, a claim taken without a new version, a landed subtask claimed again other than by a revert's
  reclaim) is rejected. The moves are computed from the model, not written down, so a step
  added to the model (``docs/protocol.md``, "Adding a step") widens what a trace may do, and nothing else does.
* **Across subtasks, the model's invariants** (``mergebot.protocol.check``), as the events can show them: a
  dependent is released (or created ready) only after everything it depends on landed; a subtask lands only with a
  commit pushed under its current claim version, and at most once; a push is accepted only under the claim the
  subtask holds; a commit its agent was told was rejected never lands; at the end no landing intent is pending.
* **The bot's revert is the model's revert candidate** (``Cand.reverts``): the bot's own subtask for a revert,
  created ``submitted``, is held until ``revert_queued`` names it; it may only land, with the commit it was queued
  with, while the landing it reverts stands, and the culprit's subtask runs again only after that, for the owner
  that landed it.

The first event that breaks either is named with why (``Rejected``). Pure: ``mergebot.protocol.replay`` reads the
rows from a database.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cache
from typing import Any

from mergebot.protocol.check import Symmetry
from mergebot.protocol.model import Model
from mergebot.protocol.state import Config, State

# The bound the moves are read from: every kind of step at least once (a claim, a push, a push again while the first
# waits, a rejection that keeps the claim, a lease that expires, a landing, a release), small enough to explore in
# about a second.
TRACE = Config(agents=2, subtasks=2, depends=((1, 0),), window=2, versions=2, pushes=3, bad=1, crashes=1, lost=0,
               forge=0, repushes=1)
# and a red main's mending (``mergebot.protocol.red``): a landed change breaks main, its revert lands and sends the
# subtask back to its owner at a new claim version; with one attempt a subtask's lease running out fails it, and an
# operator may retry it once (blocked again while its dependency's landing is reverted). Apart, as the two together
# take ten times as long (12 s).
TRACE_RED = Config(agents=2, subtasks=2, depends=((1, 0),), window=2, versions=2, pushes=3, bad=0, crashes=0, lost=0,
                   forge=0, breaks=1, retries=1, attempts=1)
# and the operators' steps: a cancel of a subtask in any status it may be cancelled from, a subtask failed at its
# last attempt and retried (a few hundredths of a second: they need no crash or push again)
TRACE_OPS = Config(agents=2, subtasks=2, depends=((1, 0),), window=2, versions=2, pushes=2, bad=1, crashes=0, lost=0,
                   forge=0, cancels=1, retries=1, attempts=1)


@dataclass(frozen=True, order=True)
class Move:
    """One subtask's row changed by one step, as the events table records it."""

    before: str  # its status before the step
    after: str  # and after
    version: int  # how much the claim version went up (0 or 1)
    owner: str  # "none" (nobody before or after), "kept", "taken" (nobody had it), "dropped", "changed"

    def __str__(self) -> str:
        return (f"{self.before} -> {self.after}, claim version {'+1' if self.version else 'kept'}, "
                f"owner {self.owner}")


def owner_change(before: object, after: object) -> str:
    if before is None and after is None:
        return "none"
    if before is None:
        return "taken"
    if after is None:
        return "dropped"
    return "kept" if before == after else "changed"


def _moves_of(s: State, nxt: State) -> Iterable[Move]:
    # a push changes the row's commit, if nothing else (a revert is a candidate of the bot's own subtask)
    pushed = {c.sub for c in nxt.cands[len(s.cands):] if c.reverts < 0}
    for t, (a, b) in enumerate(zip(s.subs, nxt.subs, strict=True)):
        if (a.status, a.owner, a.version) != (b.status, b.owner, b.version) or t in pushed:
            yield Move(a.status, b.status, b.version - a.version,
                       owner_change(a.owner if a.owner >= 0 else None, b.owner if b.owner >= 0 else None))


def explore(model: Model) -> dict[Move, str]:
    """Every move a step of ``model`` makes on some subtask in a reachable state, each with the name of one step
    that makes it (breadth first over the whole bounded graph, states reduced by symmetry)."""
    sym = Symmetry(model.config)
    start = sym.canonical(model.initial())
    seen = {start}
    todo = [start]
    found: dict[Move, str] = {}
    while todo:
        s = todo.pop()
        for name, nxt in model.steps(s):
            for m in _moves_of(s, nxt):
                found.setdefault(m, name)
            c = sym.canonical(nxt)
            if c not in seen:
                seen.add(c)
                todo.append(c)
    return found


@cache
def moves() -> dict[Move, str]:
    """The model's moves at the ``TRACE``, ``TRACE_RED`` and ``TRACE_OPS`` bounds (computed once per process)."""
    return {**explore(Model(TRACE_OPS)), **explore(Model(TRACE_RED)), **explore(Model(TRACE))}


@dataclass(frozen=True)
class Rejected:
    event: int  # the event's id (0: the end of the log)
    why: str

    def __str__(self) -> str:
        return f"event {self.event}: {self.why}" if self.event else f"at the end: {self.why}"


@dataclass
class Verdict:
    events: int = 0  # events read
    steps: int = 0  # of which steps of the protocol (the others change nothing the model holds)
    subtasks: int = 0
    landed: int = 0
    reverts: int = 0  # of which the bot's reverts
    rejected: Rejected | None = None
    used: dict[Move, int] = field(default_factory=dict)  # how often each of the model's moves was seen

    @property
    def accepted(self) -> bool:
        return self.rejected is None

    def __str__(self) -> str:
        head = (f"{self.events} events ({self.steps} protocol steps) of {self.subtasks} subtasks, "
                f"{self.landed} landed{f' ({self.reverts} reverts)' * bool(self.reverts)}")
        if self.rejected is not None:
            return f"{head}: REJECTED at {self.rejected}"
        kinds = ", ".join(f"{m} x{n}" for m, n in sorted(self.used.items()))
        return f"{head}: accepted, every step one the model takes ({kinds})"


@dataclass
class Row:
    """A subtask as the events so far have left it."""

    status: str
    version: int
    owner: int | None = None
    sha: str | None = None
    pushed: dict[int, set[str]] = field(default_factory=dict)  # commits accepted under each claim version
    rejected: set[str] = field(default_factory=set)  # commits their agent was told were rejected
    created: int = 0  # the id of its ``created`` event
    # the bot's own subtask for a revert (created submitted): the culprit's subtask id once ``revert_queued`` named
    # it (0: not yet), and the claim version of the culprit's landing it reverts
    revert: int | None = None
    reverts_version: int = 0
    landed_by: int | None = None  # the owner its last landing took the claim from


class Tracer:
    """Holds a run's events to the model one at a time (``feed``); ``end`` checks what must hold once the run is
    over."""

    def __init__(self, deps: Mapping[int, Sequence[int]], allowed: Mapping[Move, str] | None = None) -> None:
        self.deps = deps
        self.allowed = moves() if allowed is None else allowed
        self.rows: dict[int, Row] = {}
        self.verdict = Verdict()
        self.reverts_queued: set[tuple[int, int]] = set()  # (culprit's subtask, its landed claim version)
        self.sent_back: dict[int, int] = {}  # a culprit's subtask whose revert landed -> the claim version it reverts

    def feed(self, e: Mapping[str, Any]) -> Rejected | None:
        """One event (a row of ``events``: id, kind, subtask_id, from_status, to_status, claim_version, actor_id,
        detail); the reason it is not a behaviour of the model, or None."""
        v = self.verdict
        v.events += 1
        kind, sid = e["kind"], e["subtask_id"]
        if kind == "created":
            why = self._created(sid, e)
        elif kind == "revert_queued":
            why = self._revert_queued(sid, e)
        elif kind in ("status", "push_accepted", "candidate_rejected"):
            row = self.rows.get(sid)
            if row is None:
                why = f"{kind} before it was created"
            elif row.revert is not None:
                why = self._revert_step(row, e)
            elif kind == "status":
                why = self._status(sid, row, e)
            else:
                why = self._pushed(row, e) if kind == "push_accepted" else self._told_rejected(row, e)
        else:
            return None  # notes, refusals, settings, assignments: they change nothing the model holds
        v.steps += 1
        if why is not None:
            v.rejected = Rejected(int(e["id"]), f"subtask {sid}: {why}")
        return v.rejected

    def _created(self, sid: int, e: Mapping[str, Any]) -> str | None:
        if sid in self.rows:
            return "created twice"
        version = int(e["claim_version"] or 0)
        self.rows[sid] = Row(e["to_status"], version, created=int(e["id"]))
        self.verdict.subtasks += 1
        if e["to_status"] == "submitted" and version == 1:  # the bot's revert, if ``revert_queued`` names it
            self.rows[sid].revert = 0
            return None
        if e["to_status"] not in ("blocked", "ready"):
            return f"created {e['to_status']}: the model starts every subtask blocked or ready"
        if e["to_status"] == "ready":
            return self._unlanded(sid, "created ready")
        return None

    def _revert_queued(self, sid: int, e: Mapping[str, Any]) -> str | None:
        """The mend queued the bot's revert of ``sid``'s landing (``queue_revert``): the model's revert candidate,
        kept with the culprit's subtask; the subtask the bot created for it (submitted) is that candidate."""
        detail, version = e["detail"] or {}, int(e["claim_version"] or 0)
        culprit, bot = self.rows.get(sid), self.rows.get(int(detail.get("revert_subtask") or 0))
        if culprit is None or culprit.status != "landed" or culprit.version != version:
            return (f"a revert of its landing at claim version {version} queued, but it is "
                    f"{culprit.status if culprit else 'unknown'} at version {culprit.version if culprit else 0}")
        if bot is None or bot.revert != 0:
            return (f"its revert queued as subtask {detail.get('revert_subtask')}, which was not created submitted "
                    f"for it")
        if (sid, version) in self.reverts_queued:
            return f"a second revert of its landing at claim version {version}: the mend queues one per culprit"
        self.reverts_queued.add((sid, version))
        bot.revert, bot.reverts_version, bot.sha = sid, version, detail.get("sha")
        bot.pushed = {bot.version: {bot.sha or ""}}
        return None

    def _revert_step(self, row: Row, e: Mapping[str, Any]) -> str | None:
        """A change of the bot's revert subtask: only its landing (the model's revert candidate landed), with the
        commit it was queued with, while the landing it reverts stands."""
        if not row.revert:
            return ("created submitted, but no revert was queued for it: only the bot's revert subtask starts "
                    "submitted (the model starts every other one blocked or ready)")
        detail = e["detail"] or {}
        if e["kind"] != "status":
            return f"{e['kind']} on the bot's revert subtask: the model pushes or rejects no revert"
        before, after, sha = e["from_status"], e["to_status"], detail.get("sha")
        if before != row.status:
            return f"left {before}, but the events before left it {row.status}"
        if before == after and sha == row.sha:
            return None
        if (before, after) != ("submitted", "landed") or int(e["claim_version"] or 0) != row.version:
            return f"the bot's revert subtask {before} -> {after}: no step of the model changes a revert so"
        if sha != row.sha:
            return f"the bot's revert landed {sha}, but it was queued with {row.sha}"
        culprit = self.rows[row.revert]
        if culprit.status != "landed" or culprit.version != row.reverts_version:
            return (f"the revert of subtask {row.revert}'s landing at claim version {row.reverts_version} landed, "
                    f"but that subtask is {culprit.status} at version {culprit.version}")
        self.sent_back[row.revert] = row.reverts_version
        row.status = "landed"
        self.verdict.landed += 1
        self.verdict.reverts += 1
        return None

    def _unlanded(self, sid: int, what: str) -> str | None:
        waiting = [d for d in self.deps.get(sid, ()) if self.rows.get(d, Row("", 0)).status != "landed"]
        if waiting:
            return f"{what} before subtask {waiting[0]}, which it depends on, landed"
        return None

    def _status(self, sid: int, row: Row, e: Mapping[str, Any]) -> str | None:
        detail = e["detail"] or {}
        before, after = e["from_status"], e["to_status"]
        version, owner, sha = int(e["claim_version"] or 0), detail.get("owner"), detail.get("sha")
        if before != row.status:
            return f"left {before}, but the events before left it {row.status}"
        move = Move(before, after, version - row.version, owner_change(row.owner, owner))
        if before == after and move.version == 0 and move.owner in ("kept", "none") and sha == row.sha:
            return None  # nothing the model holds changed (a reason, a previous owner)
        if move not in self.allowed:
            return f"{move}: no step of the model changes a subtask so"
        if after == "ready" and before in ("blocked", "failed") and (why := self._unlanded(
                sid, "released" if before == "blocked" else "retried ready")):
            return why
        if (before, after) == ("failed", "blocked") and not self._unlanded(sid, ""):
            return "retried blocked, but every subtask it depends on is landed"
        if before == "landed":  # ``subtask_send_back``: its revert landed, it goes back to the owner that landed it
            if self.sent_back.pop(sid, None) != row.version:
                return f"runs again at claim version {version}, but no revert of its landing landed"
            if owner != row.landed_by:
                return f"sent back to agent {owner}, but agent {row.landed_by} landed it"
        if after == "submitted":
            row.pushed.setdefault(version, set()).add(sha or "")
        if after == "landed":
            if sha not in row.pushed.get(version, set()):
                return f"landed {sha}, which was not pushed under its claim version {version}"
            if sha in row.rejected:
                return f"landed {sha}, which its agent was told was rejected"
            self.verdict.landed += 1
        self.verdict.used[move] = self.verdict.used.get(move, 0) + 1
        self.rows[sid] = replace(row, status=after, version=version, owner=owner, sha=sha,
                                 landed_by=detail.get("previous_owner") if after == "landed" else row.landed_by)
        return None

    @staticmethod
    def _pushed(row: Row, e: Mapping[str, Any]) -> str | None:
        version, sha = int(e["claim_version"] or 0), (e["detail"] or {}).get("sha")
        if row.status != "submitted" or version != row.version or sha != row.sha:
            return (f"a push of {sha} accepted at claim version {version}, but it is {row.status} at version "
                    f"{row.version}{f' with {row.sha}' if row.sha else ''}: only the claim it holds may push")
        if e["actor_id"] is not None and e["actor_id"] != row.owner:
            return f"a push accepted from agent {e['actor_id']}, but agent {row.owner} holds the claim"
        return None

    @staticmethod
    def _told_rejected(row: Row, e: Mapping[str, Any]) -> str | None:
        sha = (e["detail"] or {}).get("sha")
        if row.status == "landed" and row.sha == sha:
            return f"its agent is told {sha} was rejected, but it landed"
        row.rejected.add(sha or "")
        return None

    def end(self, pending_intents: Sequence[int] = ()) -> Rejected | None:
        """Once the run is over (and the reconciler has run): no landing intent is left pending, every subtask
        created submitted was the bot's revert, and every culprit whose revert landed ran again."""
        if self.verdict.rejected is not None:
            return self.verdict.rejected
        unnamed = [r for r in self.rows.values() if r.revert == 0]
        if unnamed:
            self.verdict.rejected = Rejected(unnamed[0].created, "a subtask created submitted, but no revert was "
                                                                 "queued for it: only the bot's revert starts so")
        elif self.sent_back:
            sid, version = next(iter(self.sent_back.items()))
            self.verdict.rejected = Rejected(0, f"subtask {sid}: the revert of its landing at claim version {version} "
                                                f"landed, but it never ran again (``subtask_send_back``)")
        elif pending_intents:
            self.verdict.rejected = Rejected(0, f"landing intent {pending_intents[0]} is still pending: every "
                                                f"intent is finished or rolled back after the reconciler runs")
        return self.verdict.rejected


def trace(events: Iterable[Mapping[str, Any]], deps: Mapping[int, Sequence[int]],
          pending_intents: Sequence[int] = (), allowed: Mapping[Move, str] | None = None) -> Verdict:
    """Hold ``events`` (in id order) to the model; stop at the first one it does not allow."""
    tracer = Tracer(deps, allowed)
    for e in events:
        if tracer.feed(e) is not None:
            return tracer.verdict
    tracer.end(pending_intents)
    return tracer.verdict
