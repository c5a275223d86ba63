"""The landing protocol's state, as the model holds it (``mergebot.protocol.model`` steps it): the bounds of a check
(``Config``), subtasks, agents, candidates, the window's slots, intents and main, each immutable so a state hashes
and compares. Commits are named by their first-parent history (``History``), so comparing two commits compares
their histories.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

from verifier.result import Result

T = TypeVar("T")
TARGET = "main"
NEW_SHA = "1" * 40
# what a subtask's status is in the model: blocked (waits on another), ready, running, submitted, landed; and, by an
# operator or the recovery loop (``Config.cancels``, ``retries``, ``attempts``), cancelled and failed
HELD = ("running", "submitted")
PENDING = ("queued", "window", "landing", "parked")  # a candidate not yet landed, rejected or cut


@dataclass(frozen=True)
class Config:
    """The bounds of one check: how many of each thing, and how many of each fault, a run may hold."""

    agents: int = 2
    subtasks: int = 3
    depends: tuple[tuple[int, int], ...] = ((1, 0),)  # (dependent, what it depends on), subtasks by index
    window: int = 2
    versions: int = 2  # a subtask is claimed at most this many times (each reclaim after a lease expired is one)
    pushes: int = 2  # pushes in all (refused ones count)
    bad: int = 1  # of which at most this many fail their check
    crashes: int = 2
    lost: int = 1  # NOTIFYs lost (as through a transaction pooler)
    forge: int = 1  # commits pushed to main outside the bot (a forge repository's main is the truth)
    takeovers: int = 0  # times a second replica takes the lead while the leader's landing is in flight
    lockouts: int = 0  # times the leader's lock goes between passes (no landing in flight): the other replica leads
    batch: int = 1  # the largest batch one run may cover (the fill forms batches as the planner's ``joins`` says)
    risky: int = 0  # pushes that may carry a high failure estimate (the others a low one)
    risk_aware: bool = True  # the planner sees the estimates (leave-outs, judging apart); False: it sees none
    # each subtask's lane (candidates of one lane touch the same paths); a subtask past the end has a lane of its own
    lanes: tuple[int, ...] = (0, 1, 0)
    repushes: int = 0  # pushes an agent may make while its last candidate is pending (they replace it)
    # pushes whose change breaks main's own check though the candidate's check passes (main's check is another
    # command): post-land checks, a red main and its mending are modelled only when this is above 0
    breaks: int = 0
    # the operators' steps, none in the default bound: cancels of a subtask (``subtask_cancel``), retries of a failed
    # one (``subtask_retry``), and a subtask's attempts (``max_attempts``: its lease running out at that many claims
    # makes it failed, ``subtask_recover_expired``; 0: never)
    cancels: int = 0
    retries: int = 0
    attempts: int = 0


DEFAULT = Config()  # checked exhaustively in the test suite
LONG = Config(pushes=3, batch=2, risky=1)  # behind MERGEBOT_LONG_DRILLS: 3 pushes, batches of two with estimates
LONG_SUPERSEDING = Config(pushes=3, repushes=1)  # behind MERGEBOT_LONG_DRILLS too: 3 pushes, one of them again
# batches of two with estimates: leave-outs and judging apart (tests/test_protocol.py)
BATCHED = Config(batch=2, risky=1, crashes=0, forge=0, lost=0)
# an agent may push again while its candidate is pending: the newer push replaces it (tests/test_protocol.py)
SUPERSEDING = Config(repushes=1, crashes=1, forge=0, lost=0)
# a landed change breaks main's own check: the post-land check finds main red, the bot reverts the culprit through
# the queue while the window judges alone, the culprit's subtask goes back to its owner and its dependent is held
RED = Config(subtasks=2, depends=((1, 0),), lanes=(0, 1), pushes=3, bad=1, crashes=1, lost=0, forge=0, breaks=1)
# an operator cancels a subtask and retries a failed one, and a subtask fails when its lease runs out at its second
# attempt (tests/test_protocol.py): the cancel finding of docs/protocol.md
OPERATORS = Config(subtasks=2, depends=((1, 0),), lanes=(0, 1), pushes=2, crashes=1, lost=0, forge=0, cancels=1,
                   retries=1, attempts=2)
# the leader's lock goes between passes, twice (the lead changes hands and back), with a crash and a lost NOTIFY: a
# lock lost outside a landing (tests/test_protocol.py checks it with a take-over mid-landing instead of the crash too)
LOCKOUTS = Config(subtasks=2, depends=((1, 0),), lanes=(0, 1), pushes=2, crashes=1, lost=1, forge=0, lockouts=2)


@dataclass(frozen=True, order=True)
class Sub:
    status: str  # blocked, ready, running, submitted, landed; cancelled, failed (``Config.cancels``, ``attempts``)
    owner: int = -1  # the agent holding the claim; -1 for nobody
    version: int = 0  # the claim version: one more with each claim
    landing: bool = False  # a candidate of it is being landed (an intent names it)
    tries: int = 0  # its attempts: one more with each claim, 0 again at a retry (counted only when attempts > 0)


@dataclass(frozen=True, order=True)
class Agent:
    task: int = -1  # the subtask it believes it holds (-1: none); it may be wrong after its lease expired
    version: int = 0  # the claim version it believes it holds
    silent: bool = False  # no heartbeat: its lease runs out
    waiting: bool = False  # it pushed and waits for the verdict


@dataclass(frozen=True, order=True)
class Cand:
    sub: int
    version: int
    agent: int
    good: bool  # its check passes (on main and on any good candidates before it)
    status: str = "queued"  # queued, window, landing, landed, rejected, cut, superseded (a newer push replaced it)
    heard: str = "seen"  # its NOTIFY: seen by the leader, or lost (the sweep or a restart finds it)
    told: str = ""  # the verdict its agent was told: "", "landed", "rejected"
    risky: bool = False  # its failure estimate is high (``window.HIGH``), else low (``window.LOW``)
    proven: bool = False  # it passed on main alone after its batch failed (its estimate is ``planner.PROVEN``)
    breaks: bool = False  # once landed, main's own check fails (its own candidate check passes: it could not see it)
    # the bot's revert of the landing of this candidate (-1: an agent's push); it is a candidate of the bot's own
    # subtask, kept here with the culprit's subtask, claim version and agent (so a renaming renames it with them)
    reverts: int = -1


@dataclass(frozen=True, order=True)
class Slot:
    cand: int
    outcome: str = ""  # its checkpoint's run: "" while pending (or no run), "pass", "fail"
    checkpoint: bool = True  # a run covers it and the unchecked slots ahead of it (False: a later run will)


@dataclass(frozen=True, order=True)
class Suspect:
    """A failed run's likeliest culprit, left out of the chain (planner rule 4a) while ``rest``'s run covers the
    candidates that were with it; judged on its failed run when the rest lands and it then sits on that very tree."""

    cand: int
    rest: int  # the candidate whose run covers the rest
    tree: tuple[int, ...]  # what the failed run checked: main's commits and the run's candidates (sorted)
    ahead: tuple[int, ...]  # the candidates ahead of it in the chain (a ghost: only they may land in its lane)


# A commit: (candidate id, the intent that merged it), so two merges of one candidate are two commits; a forge's own
# commit is (-n, 0). A commit's history (a tuple of them, oldest first) names it: main is one.
Commit = tuple[int, int]
History = tuple[Commit, ...]


@dataclass(frozen=True, order=True)
class Intent:
    serial: int  # its row's id: two intents of the same candidates are two rows
    cands: tuple[int, ...]
    old: History  # main before: what the compare-and-swap compares
    new: History  # main after
    proven: bool = True  # a run passed on exactly ``new`` (a ghost, for the invariants)


@dataclass(frozen=True, order=True)
class State:
    subs: tuple[Sub, ...]
    agents: tuple[Agent, ...]
    cands: tuple[Cand, ...] = ()
    main: History = ()  # main's first-parent history
    landed: tuple[int, ...] = ()  # the landed rows, in order (candidate ids)
    intents: tuple[Intent, ...] = ()  # pending landing intents (in the database)
    window: tuple[Slot, ...] = ()  # the leader's window (in memory)
    suspects: tuple[Suspect, ...] = ()  # left out of a failed run, waiting for their rest (in memory)
    base: History = ()  # main when the window's first slot was merged
    stage: str = ""  # the leader's landing of the last intent: "" none, "intent" written, "moved" main moved
    unproven: bool = False  # main was once moved to a commit no passing run was on (a ghost, for the invariants)
    crossed: bool = False  # a candidate landed past a left-out suspect of its lane (a ghost, for the invariants)
    up: bool = True  # the server runs (down after a crash until its restart)
    reconciled: bool = False  # the last step was a restart's reconciliation
    pushes: int = 0
    bad: int = 0
    crashes: int = 0
    lost: int = 0
    forged: int = 0
    risky: int = 0
    repushes: int = 0
    takeovers: int = 0
    old: tuple[Intent, ...] = ()  # the landing a replica that lost its lock still carries on (at most one)
    old_stage: str = ""  # "intent": its compare-and-swap is next; "moved": its landed rows are next
    lockouts: int = 0
    # main's status, each a count of landed rows (a landing's row, main's head then): the landing whose post-land
    # check is pending (0: none), the newest whose check passed, and the one main turned red at (0: green)
    check: int = 0
    green: int = 0
    red: int = 0
    breaks: int = 0
    unheld: bool = False  # a candidate landed while a dependency of its subtask was reverted (a ghost)
    cancels: int = 0
    retries: int = 0


Step = tuple[str, State]


def put(record: T, **changes: object) -> T:
    """``dataclasses.replace`` for the model's frozen records, without its per-field checks and its ``__init__`` (they
    were half the checker's time): a copy of ``record``'s fields with ``changes``; a name that is no field is
    refused."""
    new = object.__new__(type(record))
    fields = new.__dict__
    fields.update(record.__dict__)
    n = len(fields)
    fields.update(changes)
    if len(fields) != n:
        raise TypeError(f"no such field: {sorted(changes.keys() - record.__dict__.keys())}")
    return new


def on_main(commit: History, main: History) -> bool:
    """Whether ``commit`` is main or one of its ancestors (its history is a prefix of main's)."""
    return main[:len(commit)] == commit


def fresh_serial(s: State) -> int:
    """An intent id no commit or intent of ``s`` uses (ids nothing holds any more are free again: the checker
    renumbers them, ``check.Symmetry``)."""
    used = [k for _, k in (*s.main, *s.base)] + [x.serial for x in (*s.intents, *s.old)]
    used += [k for x in (*s.intents, *s.old) for _, k in (*x.old, *x.new)]
    return max(used, default=0) + 1


def result(outcome: str) -> Result:
    """A check's result as the verdict policy reads it (only its outcome matters to the model)."""
    return Result(commit_sha=NEW_SHA, tree_sha="", command="check", outcome=outcome, exit_code=0 if outcome == "pass"
                  else 1, duration_ms=1, log_head="", log_tail="", log_size=0, log_digest="")


def cand_name(s: State, i: int) -> str:
    """Candidate ``i`` as a trace names it."""
    c = s.cands[i]
    if c.reverts >= 0:
        return f"candidate {i + 1} (the bot's revert of candidate {c.reverts + 1})"
    what = f"{'good' if c.good else 'bad'}{', risky' * c.risky}{', breaks main' * c.breaks}"
    return f"candidate {i + 1} (subtask {c.sub + 1} v{c.version}, {what})"
