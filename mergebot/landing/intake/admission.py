"""Admission control at claim time, and each agent's cap on work in progress: the decisions, without I/O.

A claim hands an agent work that will come back as a candidate for the verifiers. When a lane already holds more
work than its verifiers clear in a while, a claim there only makes a deeper queue (and claims that lapse while
their agents wait on it), so the claim is answered "not now, here is when, and here is where else" instead.
``mergebot.landing.intake.admit`` gathers the measurements and carries out what this module decides.

The lane. A lane is a repository: subtasks carry no repository, so a claim falls in the lane its claimer names
(``mergebot start REPO``, the claim's ``repo``); a claim that names none could become work for any lane, and is
refused only when every lane refuses it. (The speculation window's footprint lanes live in the leader's memory, not
where a claim on another replica could read them cheaply.)

The measurements, per lane (``Lane``; ``admission_measure`` in ``mergebot/db/queries/admission.sql``):
  * ``run_seconds`` (d): the predicted verifier-seconds of one candidate run, the one prediction the fair order
    charges too (the database's ``predicted_run``, ``mergebot.landing.window.fair.predicted_seconds`` in Python):
    the median over the repository's newest ``fair.RECENT_RUNS`` candidate runs that finished done, a run of named
    checks counting its checks' seconds together; None while none has finished (the lane is stale, rule 1);
  * ``per_run`` (k): the candidates one such run clears, measured: the candidates that left the queue (landed or
    rejected) since the first of those runs started, over the number of runs, at least 1 (a batch's run clears
    several; a failed one none);
  * the backlog B = d / k x the sum over the lane's queued and in-flight candidates (queued, verifying, landing)
    of (1 + its failure risk): the risk model's estimate (``mergebot.landing.intake.risk``), since a failed check
    runs once more by default, so a candidate costs 1 + p runs;
  * ``slots`` (C): the verifiers' measured capacity, in runs at once: the most verify runs that were going at the
    same instant over the last ``WINDOW`` seconds, of every repository (the workers are shared). Measured, never
    configured; when the verifiers are busy, which is when it matters, it is what they carry;
  * ``last_run_age``: seconds since the newest of those runs finished (0 while a run of the lane runs);
  * ``in_flight`` (Q): the claims whose work has not come back yet: subtasks claimed (running) for this lane, or
    for no lane named (they could become work for any), without a live candidate;
  * ``push_seconds`` (t): how long a claim takes to come back as a candidate: the mean, over the lane's newest
    candidates queued in the last ``WINDOW`` seconds, of the time from their claim to their push (the mean, as
    Little's law asks; the median of skewed think times made the cap about the claims already out, so a lane
    whose claims were the bottleneck never let more out); None while none;
  * ``cleared_rate``: the candidates that left the queue (``per_run``'s count) over the seconds since the first
    of those runs started: what the lane clears, as measured.

The decision (``decide``), with the factor f (``MERGEBOT_ADMISSION_FACTOR``, default 2):
  1. Stale measurements admit: no candidate run of the lane finished within ``stale_after(d)`` seconds and no run
     of it runs now, or no candidate run ever finished, or no capacity was seen. A warning is logged by the caller;
     the fleet is never stuck behind a number nobody measures any more. Only rule 8's floor still holds: claims
     out, not yet pushed, at most rule 8's floor (each push makes room for the next claim).
  2. One window of work is what the speculation window verifies in one round: its width w (the repository's
     window, or C when it is automatic) times d verifier-seconds. The threshold is T = max(f x w, m) x d: with the
     default, the lane refuses once it holds more than two full windows of work, and never while it holds less than
     m runs of it (``MERGEBOT_ADMISSION_MIN_RUNS``, default 8: a small team's few queued candidates are no backlog
     worth turning a claim away for; the drills' and the first hour's queues stay below it).
  3. Hysteresis: a lane that admits refuses once B > T; a lane that refuses admits again only once B < L, the low
     mark L = ``LOW`` x T. Within [L, T] it keeps its last state, so it does not flap.
  4. A refusal says when to try again: the time the verifiers, at C verifier-seconds a second, take to bring B down
     to L, within [``RETRY_MIN``, ``RETRY_MAX``] seconds, whole.
  5. A refusing lane still admits at the rate its queue clears while its backlog is within the threshold
     (L <= B <= T): each candidate that left its queue (landed, rejected, superseded, cancelled) since it began to
     refuse frees a slot for one claim (``Decision.free``, the freed less the claims so admitted). Over the
     threshold no slot is free, and the departures meanwhile are written off (``Decision.spent``), so a long drain
     does not bank a flood. Without it a full lane refused every claim until its backlog drained to the low mark,
     then admitted every agent asking at once (a claim adds to the backlog only when its work is pushed, a think
     time later), so its backlog swung between empty and a flood, and who got in was luck.
  6. Who gets a free slot: the agents refused for want of one wait in line, the least served first (the least of
     the verifiers' time, then the longest waiting: ``admission_standing``, migration 0044, in verifier-seconds:
     its share of every run started for its candidates, each run's seconds split over the candidates it covers,
     added as the run ends, plus one predicted run d of the lane asked about for each claim let in that no run has
     charged yet, so a claim counts at once and is settled to what its runs cost; one released before any run
     costs nothing. Ordered by claims, the claims and landings per
     agent were even at 100 agents offering 10x, 0.988 and 0.989, but the verifier-seconds 0.870: a candidate run
     alone cost its agent a run, one in a batch of four a quarter); a claim is let in when fewer waiting agents stand
     ahead of it than there are free slots (``turn``). Its agent is told to claim again when the slots freed at the
     lane's rate (``Decision.rate``: C x k / d candidates a second), once the backlog is back within the threshold
     (``Decision.opens_in``), reach its place, within [``RETRY_MIN``, ``RETRY_MAX``] and no later than rule 4's
     time (the lane admits everyone then). An agent that does not come back within ``LINE_GRACE``
     seconds of that leaves the line. Claims are counted per agent across lanes: the verifiers are shared.
  7. An admitting lane with a line lets in only agents served within a run of the least served one waiting (``turn``
     with a ``Standing``): the agents it refused were told to come back when it would admit, and are not overtaken
     then by agents that have had more (before, the lane's flip back to admitting let in whoever asked first, and
     those were the agents that had just pushed). Refused so, an agent joins the line and is told to come back
     when the lane's rate reaches its place (not sooner: at a thousand agents, agents told to come back within
     seconds asked tens of times a second and starved the server that lands their work).
  8. Claims in flight count too: a claim adds to the backlog only when its work is pushed, a think time later, so
     a lane that just began to admit (a cold start's first measurement, a flip back under the low mark) saw an
     empty queue and let in every agent asking at once: a flood that landed in the queue a think time later and
     starved the server meanwhile. By Little's law the verifiers need about rate x t claims in flight to stay fed
     (rate: the candidates the lane clears a second, each t seconds away): the lesser of ``Decision.rate`` (what
     its verifiers could clear) and ``cleared_rate`` (what left its queue a second over its recent runs' time: at
     a thousand agents on two cores the lane cleared a fifth of what its verifiers could, and a cap from their
     rate let 750 claims in within 30 s), the latter in full while the lane holds at least one window of work
     (B >= w x d), the verifiers' rate in full when it holds none, in proportion between: a lane short of work
     waits for it, and what left its queue measures what the claims out brought, not what the verifiers clear (at
     1,000 agents offering 1x, think time 250 s, a cap from it doubled once a think time from its floor: 246 claims
     out after 451 s, 101 landed); a lane lets in a claim only while
     fewer than ``max(f x rate x t, f x w, m, c)`` claims are in flight (at least the f windows of rule 2 in
     candidates, and c = ``MERGEBOT_ADMISSION_MIN_CLAIMS``, default 32: a team starting at once is never held back;
     ``Decision.room``: how many more). While t is not measured, or the lane is stale (a cold start, a morning
     after an idle night), the cap is that floor, ``max(f x w, m, c)``: a thousand agents starting at once were
     let in together (434-582 claims in the first 30 s) before any run told the lane what its verifiers clear;
     now they come in as the first claims come back, and the measured cap takes over once a run finished. A claim it
     holds back waits in line (rules 6 and 7) and is told to come back when the claims ahead of it have been
     pushed, at Q / t a second (``reason: in_flight``); before t is measured, ``UNMEASURED_RETRY`` seconds for
     each floor's worth of agents ahead of it.
The last state lives in the database (``admission_lanes``, migration 0037, its slots and the agents' line 0040),
written only when it changes, so every replica answers from the same state.

The cap (``caps``, ``cap_for``): an agent holds the subtasks it owns, running (claimed) or submitted (a candidate
queued or in flight). ``MERGEBOT_AGENT_WIP`` is ``KEY=N`` pairs, comma-separated: a key that names a role sets
that role's cap, any other key names an agent, whose own cap wins over its role's; N = 0 is no cap. A claim that
would hold more is refused. A push never adds to what its agent holds (the claim it finishes is counted already),
so pushes are never refused for the cap: they are how an agent gets under it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

ROLES = frozenset({"admin", "lead", "agent", "verifier", "reviewer"})
WINDOW = 300.0  # seconds over which the verifiers' capacity (runs at once) is measured
LOW = 0.75  # the low mark, as a share of the threshold: a refusing lane admits again below it
STALE_MIN = 300.0  # a lane whose last run finished longer ago than this (or STALE_RUNS runs' time) is stale
STALE_RUNS = 3.0
RETRY_MIN = 1
RETRY_MAX = 300
UNMEASURED_RETRY = 5  # seconds: a claim held back by rule 8 before any claim of its lane came back
LINE_GRACE = 10.0  # seconds past its retry time an agent stays in a full lane's line without asking again


@dataclass(frozen=True)
class Lane:
    """What was measured of one lane (see the module's rules)."""

    repo: str
    candidates: int  # queued and in-flight candidates
    weight: float  # the sum of (1 + failure risk) over them
    run_seconds: float | None  # d; None: no candidate run of this repository finished yet
    slots: int  # C, runs at once (shared by every lane)
    last_run_age: float | None  # seconds since its newest candidate run finished; 0 while one runs; None: never
    window: int = 0  # the repository's speculation window (0: as wide as the slots)
    admitting: bool = True  # its last state
    per_run: float = 1.0  # k, candidates cleared per run
    freed: int = 0  # while it refuses: the candidates that left its queue since it began to
    admitted: int = 0  # and the claims let in for them
    in_flight: int = 0  # Q, claims not yet back as candidates (rule 8)
    push_seconds: float | None = None  # t, a claim's mean time to its push; None: not measured
    cleared_rate: float | None = None  # the candidates that left its queue a second, over those runs' time


@dataclass(frozen=True)
class Decision:
    repo: str
    admit: bool
    stale: bool
    backlog_seconds: float
    threshold_seconds: float
    low_seconds: float
    capacity: int  # slots
    candidates: int
    retry_after: int  # seconds; 0 when admitted
    free: int = 0  # while refusing: slots freed for claims (rule 5)
    rate: float = 0.0  # candidates the lane clears a second (rule 6)
    spent: bool = False  # while refusing over the threshold: the slots freed are written off (rule 5)
    opens_in: float = 0.0  # while refusing: seconds until the backlog is back within the threshold
    in_flight: int = 0  # Q (rule 8)
    flight_cap: float | None = None  # how many claims may be in flight; None: rule 8 does not apply
    push_seconds: float | None = None  # t (rule 8)
    run_seconds: float = 0.0  # d: one predicted run (a claim not yet run counts as that much, rules 6 and 7)

    @property
    def room(self) -> float | None:
        """Claims rule 8 lets in before the next measurement; None: as many as ask."""
        return None if self.flight_cap is None else self.flight_cap - self.in_flight

    def as_json(self) -> dict[str, object]:
        return {"lane": self.repo, "admitting": self.admit, "stale": self.stale,
                "backlog_seconds": round(self.backlog_seconds, 1), "candidates": self.candidates,
                "threshold_seconds": round(self.threshold_seconds, 1), "low_seconds": round(self.low_seconds, 1),
                "capacity": self.capacity, "retry_after": self.retry_after, "free_slots": self.free,
                "in_flight": self.in_flight,
                "in_flight_cap": None if self.flight_cap is None else round(self.flight_cap, 1)}


def stale_after(run_seconds: float | None) -> float:
    """How long after its last run a lane's measurements are stale: ``STALE_RUNS`` runs' time, at least
    ``STALE_MIN`` seconds."""
    return max(STALE_MIN, STALE_RUNS * (run_seconds or 0.0))


def is_stale(lane: Lane) -> bool:
    return (lane.run_seconds is None or lane.run_seconds <= 0 or lane.slots < 1 or lane.last_run_age is None
            or lane.last_run_age > stale_after(lane.run_seconds))


def decide(lane: Lane, *, factor: float, min_runs: float = 0.0, min_claims: float = 0.0) -> Decision:
    """Admit or refuse a claim in ``lane`` (rules 1-4 of the module)."""
    d = lane.run_seconds or 0.0
    backlog = lane.weight * d / max(1.0, lane.per_run)
    width = lane.window if lane.window > 0 else max(1, lane.slots)
    threshold = max(factor * width, min_runs) * d
    low = LOW * threshold
    floor = max(factor * width, min_runs, min_claims)  # rule 8's cap before anything is measured
    if is_stale(lane):
        return Decision(lane.repo, True, True, backlog, threshold, low, lane.slots, lane.candidates, 0,
                        in_flight=lane.in_flight, flight_cap=floor, push_seconds=lane.push_seconds, run_seconds=d)
    admit = backlog <= threshold if lane.admitting else backlog < low
    retry = 0
    free = 0
    spent = False
    if not admit:
        drain = (backlog - low) / max(1, lane.slots)
        retry = min(RETRY_MAX, max(RETRY_MIN, math.ceil(drain)))
        if backlog <= threshold:
            free = max(0, lane.freed - lane.admitted)
        else:
            spent = lane.freed > lane.admitted
    rate = max(1, lane.slots) * max(1.0, lane.per_run) / d
    opens_in = max(0.0, backlog - threshold) / max(1, lane.slots) if not admit else 0.0
    # what it clears, as measured, while it holds a window of work; below that, what left it says how much came, so
    # the verifiers' rate takes over as the window empties (a blend, not a switch: no jump of the cap at the line)
    cleared = rate if lane.cleared_rate is None else min(rate, lane.cleared_rate)
    idle = max(0.0, 1.0 - backlog / (width * d)) if d > 0 else 0.0
    flow = cleared + (rate - cleared) * idle
    cap = floor if lane.push_seconds is None else max(factor * flow * lane.push_seconds, floor)
    return Decision(lane.repo, admit, False, backlog, threshold, low, lane.slots, lane.candidates, retry, free, rate,
                    spent, opens_in, lane.in_flight, cap, lane.push_seconds, d)


def flight_wait(decision: Decision, *, let_in: int, ahead: int) -> int | None:
    """Rule 8 at one claim: None when it may be let in (``let_in``: the claims let in since the lane was measured),
    else the seconds until the claims in flight ahead of it (and the agents ahead of it in line) have been pushed."""
    room = decision.room
    if room is None or room - let_in >= 1:
        return None
    if decision.push_seconds is None:  # none has come back yet: the lane's floor of claims each guessed interval
        return max(RETRY_MIN, min(UNMEASURED_RETRY * (1 + ahead // max(1, int(decision.flight_cap or 1))),
                                  RETRY_MAX))
    pushed = max(decision.in_flight, 1) / max(decision.push_seconds, 1e-3)  # claims back a second
    wait = math.ceil((let_in - room + 1 + ahead) / pushed)
    return max(RETRY_MIN, min(wait, RETRY_MAX))


@dataclass(frozen=True)
class Standing:
    """An agent asking for a claim, against the line of agents waiting (rules 6 and 7)."""

    claims: int = 0  # the claims admission let it make
    ahead: int = 0  # the waiting agents before it in line
    least: float | None = None  # the least any other agent waiting was served; None: nobody else waits
    served: float = 0.0  # verifier-seconds: its candidates' runs, and a run of the lane per claim not yet run


def turn(decision: Decision, standing: Standing) -> tuple[bool, int]:
    """A claim at one lane: (whether it is let in now, else the seconds until its turn comes). An admitting lane
    lets in agents as served as the least served waiting (rule 7); a refusing one, the agents a free slot reaches
    in line (rule 6), others when the slots the lane frees reach their place."""
    ahead = standing.ahead
    if decision.admit:
        if standing.least is None or standing.served < standing.least + max(decision.run_seconds, 1e-9):
            return True, 0
        wait = math.ceil((ahead + 1) / decision.rate) if decision.rate > 0 else int(LINE_GRACE)
        return False, max(RETRY_MIN, min(wait, RETRY_MAX))
    if decision.free > ahead:
        return True, 0
    if decision.rate <= 0:
        return False, decision.retry_after
    wait = math.ceil(decision.opens_in + (ahead - decision.free + 1) / decision.rate)
    return False, max(RETRY_MIN, min(wait, decision.retry_after or RETRY_MAX))


# -- the cap on work in progress ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Caps:
    roles: dict[str, int]
    agents: dict[str, int]


def caps(spec: str) -> Caps:
    """``MERGEBOT_AGENT_WIP`` read: "agent=4,lead=8,ann=2" (the settings' pattern has checked its shape)."""
    roles: dict[str, int] = {}
    agents: dict[str, int] = {}
    for part in spec.split(","):
        if not part.strip():
            continue
        key, _, value = part.partition("=")
        key = key.strip()
        (roles if key in ROLES else agents)[key] = int(value.strip())
    return Caps(roles, agents)


def cap_for(c: Caps, *, name: str, role: str) -> int | None:
    """The agent's cap: its own, else its role's; None when it has none (not set, or 0)."""
    n = c.agents.get(name, c.roles.get(role, 0))
    return n if n > 0 else None
