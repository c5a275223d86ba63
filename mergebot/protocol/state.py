"""The landing protocol's state, as the model holds it (``mergebot.protocol.model`` steps it): the bounds of a check
(``Config``), subtasks, agents, candidates, the window's slots, intents and main, each immutable so a state hashes
and compares. Commits are named by their first-parent history (``History``), so comparing two commits compares
their histories.
"""

from __future__ import annotations

from dataclasses import dataclass

from verifier.result import Result

TARGET = "main"
NEW_SHA = "1" * 40
# what a subtask's status is in the model: blocked (waits on another), ready, running, submitted, landed
HELD = ("running", "submitted")
PENDING = ("queued", "window", "landing")  # a candidate not yet landed, rejected or cut


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
    crashes: int = 1
    lost: int = 1  # NOTIFYs lost (as through a transaction pooler)
    forge: int = 1  # commits pushed to main outside the bot (a forge repository's main is the truth)
    takeovers: int = 0  # times a second replica takes the lead while the leader's landing is in flight


DEFAULT = Config()  # checked exhaustively in the test suite
LONG = Config(pushes=3, crashes=2)  # behind MERGEBOT_LONG_DRILLS


@dataclass(frozen=True, order=True)
class Sub:
    status: str  # blocked, ready, running, submitted, landed
    owner: int = -1  # the agent holding the claim; -1 for nobody
    version: int = 0  # the claim version: one more with each claim
    landing: bool = False  # a candidate of it is being landed (an intent names it)


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
    status: str = "queued"  # queued, window, landing, landed, rejected, cut, superseded (by a newer push)
    heard: str = "seen"  # its NOTIFY: seen by the leader, or lost (the sweep or a restart finds it)
    told: str = ""  # the verdict its agent was told: "", "landed", "rejected"


@dataclass(frozen=True, order=True)
class Slot:
    cand: int
    outcome: str = ""  # its checkpoint's run: "" while pending, "pass", "fail"


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
    base: History = ()  # main when the window's first slot was merged
    stage: str = ""  # the leader's landing of the last intent: "" none, "intent" written, "moved" main moved
    unproven: bool = False  # main was once moved to a commit no passing run was on (a ghost, for the invariants)
    up: bool = True  # the server runs (down after a crash until its restart)
    reconciled: bool = False  # the last step was a restart's reconciliation
    pushes: int = 0
    bad: int = 0
    crashes: int = 0
    lost: int = 0
    forged: int = 0
    takeovers: int = 0
    old: tuple[Intent, ...] = ()  # the landing a replica that lost its lock still carries on (at most one)
    old_stage: str = ""  # "intent": its compare-and-swap is next; "moved": its landed rows are next


Step = tuple[str, State]


def on_main(commit: History, main: History) -> bool:
    """Whether ``commit`` is main or one of its ancestors (its history is a prefix of main's)."""
    return main[:len(commit)] == commit


def newest(s: State, i: int) -> bool:
    """Whether candidate ``i`` is its subtask's newest push (the commit its row names)."""
    sub = s.cands[i].sub
    return all(c.sub != sub for c in s.cands[i + 1:])


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
    return f"candidate {i + 1} (subtask {c.sub + 1} v{c.version}, {'good' if c.good else 'bad'})"
