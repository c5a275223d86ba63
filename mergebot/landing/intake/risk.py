"""How likely a candidate is to fail its check, from what the bot already knows, decided without I/O.

Failures are not uniform: a few agents, a push right after a failing check, a large change or paths whose checks
failed lately carry most of them. The queue uses the estimate (``mergebot.landing.window.executor``) to batch the likely
passes together, run a likely failure alone, take the safer of two equal candidates first and, when a batch fails,
leave its likeliest culprit out. Uber's SubmitQueue builds its speculation the same way, from a predicted success
probability per change.

The estimate, in log-odds (``estimate``):
  1. the agent's own rate: its failures over its last finished candidates in the repository, smoothed towards
     the repository's recent rate (the prior) with the weight of ``PRIOR_WEIGHT`` candidates, so an agent
     without history starts at the repository's rate and a long record outweighs it;
  2. when the subtask's previous candidate failed its check, how much likelier (or less likely) a fix fails in this
     repository than a push at large: the log-odds of the failure rate of its recent fixes (pushes right after a
     failure of their subtask), smoothed towards ``AFTER_FAILURE`` times the prior with the weight of
     ``FIX_WEIGHT`` fixes, less the prior's; so a repository where fixes are guesses raises the estimate, one where
     a fix nearly always passes lowers it. Plus ``PER_ATTEMPT`` for each earlier push of the subtask, at most
     ``ATTEMPTS`` of them (a push superseded or rejected for a conflict does not count: it says nothing of the
     check);
  3. plus ``PER_SIZE`` per doubling of the change beyond ``SIZE_FREE`` changed lines (files count as lines when
     the lines are unknown);
  4. plus half the difference between the log-odds of the failure rate of the paths it touches (its recent
     candidates on any of them, smoothed towards the prior) and the prior's, once ``PATH_MIN`` of them exist.
The result is kept within [``LOW``, ``HIGH``]: no change is certain to pass or to fail. The weights are fixed
here and checked against what happened: ``python -m bench.fleet`` prints predicted against observed failure rates by
decile (calibration).

Only failures of the change's own check count (a failing check, a timeout, a limit, weakened or edited tests, a
failed acceptance or held-out check, no report); a conflict, a pre-existing failure on main or a superseded push
says nothing about whether a check passes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

OWN_FAILURES = ("check_failed", "check_timeout", "flaky_then_failed", "disk_limit", "memory_limit", "tests_weakened",
                "tests_changed", "acceptance_failed", "held_out_failed", "no_report")
DEFAULT_PRIOR = 0.1  # a repository without history
PRIOR_WEIGHT = 10.0  # candidates' worth of belief in the repository's rate before an agent's own record
AFTER_FAILURE = 2.0  # before a repository has its own record: a fix fails twice as often as a push at large
FIX_WEIGHT = 5.0  # fixes' worth of belief in that before the repository's own fixes
PER_ATTEMPT = 0.15  # log-odds per earlier push of the subtask
ATTEMPTS = 4  # at most this many earlier pushes count
SIZE_FREE = 200  # changed lines that cost nothing
PER_SIZE = 0.2  # log-odds per doubling beyond SIZE_FREE
PATH_MIN = 3  # recent candidates on a change's paths before their rate counts
PATH_SHARE = 0.5  # how much of the paths' log-odds difference counts
LOW, HIGH = 0.005, 0.95


@dataclass(frozen=True)
class Facts:
    """What is known of a candidate when it is queued (``mergebot.db`` query ``candidate_risk_facts``)."""

    agent_finished: int = 0  # the agent's recent finished candidates in the repository (those that ran a check)
    agent_failed: int = 0  # of which failed their own check
    repo_finished: int = 0  # the repository's recent finished candidates
    repo_failed: int = 0
    attempt: int = 1  # this push among the subtask's pushes (1: its first)
    after_failure: bool = False  # the subtask's previous candidate failed its check
    lines: int | None = None  # lines the change adds and removes; None when unknown
    files: int = 0  # files it changes
    path_finished: int = 0  # recent finished candidates touching any of its paths
    path_failed: int = 0
    fix_finished: int = 0  # the repository's recent fixes: pushes right after a failure of their own subtask
    fix_failed: int = 0


@dataclass(frozen=True)
class Estimate:
    p: float  # the probability that the candidate's check fails
    terms: dict[str, float]  # what each part added, in log-odds (the candidate page shows them)
    prior: float

    def as_json(self) -> dict[str, Any]:
        return {"p": round(self.p, 4), "prior": round(self.prior, 4),
                "terms": {k: round(v, 3) for k, v in self.terms.items()}}


def logit(p: float) -> float:
    p = min(max(p, 1e-6), 1 - 1e-6)
    return math.log(p / (1 - p))


def expit(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def prior(facts: Facts) -> float:
    """The repository's recent failure rate, smoothed towards ``DEFAULT_PRIOR`` (ten candidates' worth)."""
    return (facts.repo_failed + 10 * DEFAULT_PRIOR) / (facts.repo_finished + 10)


def estimate(facts: Facts) -> Estimate:
    """The failure probability of a candidate with these facts (the module's rules, in order)."""
    base = prior(facts)
    agent = (facts.agent_failed + PRIOR_WEIGHT * base) / (facts.agent_finished + PRIOR_WEIGHT)
    terms = {"agent": logit(agent)}
    if facts.after_failure:
        fixes = (facts.fix_failed + FIX_WEIGHT * min(0.5, AFTER_FAILURE * base)) / (facts.fix_finished + FIX_WEIGHT)
        terms["after_failure"] = logit(fixes) - logit(base)
    if facts.attempt > 1:
        terms["attempt"] = PER_ATTEMPT * min(facts.attempt - 1, ATTEMPTS)
    size = facts.lines if facts.lines is not None else facts.files
    if size > SIZE_FREE:
        terms["size"] = PER_SIZE * math.log2(size / SIZE_FREE)
    if facts.path_finished >= PATH_MIN:
        paths = (facts.path_failed + 2 * base) / (facts.path_finished + 2)
        terms["paths"] = PATH_SHARE * (logit(paths) - logit(base))
    p = min(HIGH, max(LOW, expit(sum(terms.values()))))
    return Estimate(p, terms, base)


def calibration(pairs: list[tuple[float, bool]], bins: int = 10) -> list[tuple[float, float, float, int]]:
    """Predicted against observed: the ``(p, failed)`` pairs sorted by p and cut into ``bins`` groups of equal
    size (deciles); each as (lowest p, mean p, observed failure rate, count). Empty groups are left out."""
    ordered = sorted(pairs)
    out = []
    for i in range(bins):
        group = ordered[len(ordered) * i // bins: len(ordered) * (i + 1) // bins]
        if group:
            out.append((group[0][0], sum(p for p, _ in group) / len(group),
                        sum(1 for _, f in group if f) / len(group), len(group)))
    return out
