"""The properties the checker (``mergebot.protocol.check``) holds the model to: ``INVARIANTS``, checked in every
reachable state, and ``LIVENESS``, goals every fair run reaches and keeps (checked on the bottom strongly connected
components). Each is a predicate over the model and one state; ``docs/protocol.md`` lists them in prose.
"""

from __future__ import annotations

from collections.abc import Callable

from mergebot.protocol.model import Model
from mergebot.protocol.state import HELD, PENDING, State, on_main

Predicate = Callable[[Model, State], bool]


# -- the properties ------------------------------------------------------------------------------------------------

def main_passed(m: Model, s: State) -> bool:
    """Main only ever moves to a commit whose run passed (the landing's intent names the run its commit passed)."""
    return not s.unproven


def history_is_landed(m: Model, s: State) -> bool:
    """Main's first-parent history is the landed rows in order (and the pending intents main already reached)."""
    ours = [c for c, _ in s.main if c >= 0]
    carried = [x for x in s.old if x not in s.intents and not set(x.cands) & set(s.landed)]  # its rows are next
    reached = list(dict.fromkeys(i for intent in (*s.intents, *carried) if on_main(intent.new, s.main)
                                 for i in intent.cands))
    n = len(s.landed)
    return ours[:n] == list(s.landed) and ours[n:] == reached


def standing(s: State) -> list[int]:
    """The landed rows of agents' pushes whose landing no revert undid."""
    undone = {s.cands[i].reverts for i in s.landed}
    return [i for i in s.landed if s.cands[i].reverts < 0 and i not in undone]


def lands_once(m: Model, s: State) -> bool:
    """A subtask lands at most once (again only after a revert undid its landing)."""
    subs = [s.cands[i].sub for i in standing(s)]
    return len(subs) == len(set(subs))


def no_superseded(m: Model, s: State) -> bool:
    """No push of a superseded claim version lands: each standing landed row is of its subtask's last claim."""
    return all(s.cands[i].version == s.subs[s.cands[i].sub].version for i in standing(s))


def released_after(m: Model, s: State) -> bool:
    """A dependent is released only after what it depends on landed (a cancelled one may never have been)."""
    done = {s.cands[i].sub for i in s.landed}
    return all(s.subs[d].status in ("blocked", "cancelled") or on in done for d, on in m.config.depends)


def reconciled(m: Model, s: State) -> bool:
    """Every intent is finished or rolled back once the reconciler ran."""
    return not (s.reconciled and s.intents)


def told_holds(m: Model, s: State) -> bool:
    """A verdict an agent was told is never contradicted: a landed candidate is on main, a rejected one nowhere."""
    on = {c for c, _ in s.main}
    for i, c in enumerate(s.cands):
        if c.told == "landed" and (i not in s.landed or i not in on or c.status != "landed"):
            return False
        if c.told == "rejected" and (c.status != "rejected" or i in s.landed or i in on):
            return False
    return True


def lanes_hold(m: Model, s: State) -> bool:
    """No candidate lands past a suspect left out of its lane's failed run before the suspect's verdict (only the
    candidates ahead of it in the chain may)."""
    return not s.crossed


def no_replaced(m: Model, s: State) -> bool:
    """A push replaced by a newer push of its subtask's claim never lands (read from the candidates, not the model's
    fence)."""
    return not any(c.sub == (x := s.cands[i]).sub and c.version == x.version and c.reverts < 0 and x.reverts < 0
                   for i in s.landed for c in s.cands[i + 1:])


def reverted_held(m: Model, s: State) -> bool:
    """No candidate lands while a dependency of its subtask is reverted (not landed again)."""
    return not s.unheld


def reverts_once(m: Model, s: State) -> bool:
    """A revert lands at most once per culprit."""
    undone = [s.cands[i].reverts for i in s.landed if s.cands[i].reverts >= 0]
    return len(undone) == len(set(undone))


def main_keeps(m: Model, s: State) -> bool:
    """A commit once on main stays there (the forge's own commits too)."""
    return all((-n, 0) in s.main for n in range(1, s.forged + 1))


def cancelled_unlanded(m: Model, s: State) -> bool:
    """A cancelled subtask never lands: no landed row is of its claim (an operator's cancel, ``Config.cancels``)."""
    return not any((sub := s.subs[s.cands[i].sub]).status == "cancelled" and sub.version == s.cands[i].version
                   for i in standing(s))


INVARIANTS: tuple[tuple[str, Predicate], ...] = (
    ("main only moves to a commit whose run passed", main_passed),
    ("main's first-parent history equals the landed rows in order", history_is_landed),
    ("a subtask lands at most once", lands_once),
    ("no push of a superseded claim version lands", no_superseded),
    ("a dependent is released only after what it depends on landed", released_after),
    ("every intent is finished or rolled back after the reconciler runs", reconciled),
    ("a verdict an agent was told is never contradicted", told_holds),
    ("a commit once on main stays on main", main_keeps),
    ("no candidate lands past a left-out suspect of its lane", lanes_hold),
    ("a push replaced by a newer push never lands", no_replaced),
    ("no candidate lands while a dependency of its subtask is reverted", reverted_held),
    ("a revert lands at most once per culprit", reverts_once),
    ("a cancelled subtask never lands", cancelled_unlanded),
)


# A candidate the queue holds for a reverted dependency, and its subtask, wait for that one to land again: an agent's
# new work, which a bound's pushes or claim versions may not allow, so the goals leave them out.

def good_landed(m: Model, s: State) -> bool:
    return not any(c.good and c.status in PENDING and m.holds(s, i) and not m.held_back(s, i)
                   for i, c in enumerate(s.cands))


def claims_let_go(m: Model, s: State) -> bool:
    return not any(sub.status in HELD and not m.waits_on_revert(s, t) for t, sub in enumerate(s.subs))


def main_mended(m: Model, s: State) -> bool:
    return not s.red


LIVENESS: tuple[tuple[str, Predicate], ...] = (  # of two failing as near, the first is reported
    ("every red main is mended: main is green again", main_mended),
    ("every good candidate lands", good_landed),
    ("every claim is eventually released or lands", claims_let_go),
)
