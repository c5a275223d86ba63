"""Planted bugs: each a model with one step replaced, which the checker must catch with a short counterexample.

Each is what a plausible edit of the real code would do; ``tests/test_protocol.py`` checks every one of them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

from mergebot.protocol.model import Model
from mergebot.protocol.state import (
    BATCHED,
    LOCKOUTS,
    OPERATORS,
    RED,
    SUPERSEDING,
    Config,
    History,
    Intent,
    State,
    Step,
    put,
)


class NoFence(Model):
    """The fence check removed from a push: a push (and a candidate) is never refused for its claim."""

    def fence(self, s: State, agent: int, sub: int, version: int) -> str | None:
        return None


class NoCompare(Model):
    """Main moved without comparing its old value: a plain write instead of a compare-and-swap."""

    def compare(self, main: History, old: History) -> bool:
        return True


class EarlyRelease(Model):
    """Dependents released when the intent is written, before the landed row (and before main moved)."""

    def begin_landing(self, s: State, upto: int) -> Step:
        name, nxt = super().begin_landing(s, upto)
        done = {nxt.cands[i].sub for i in (*nxt.landed, *nxt.intents[-1].cands)}
        for d, _ in self.config.depends:
            if nxt.subs[d].status == "blocked" and all(on in done for dd, on in self.config.depends if dd == d):
                nxt = self._sub(nxt, d, put(nxt.subs[d], status="ready"))
        return name, nxt


class Unreconciled(Model):
    """The reconciler leaves pending intents as they are after a crash."""

    def reconcile_intents(self, s: State) -> State:
        return s


class NoSweep(Model):
    """A lost NOTIFY with no sweep behind it: the leader hears of a candidate only by its NOTIFY (or a restart)."""

    def sweep(self, s: State) -> Iterator[Step]:
        return iter(())


class UnfencedFinish(Model):
    """The landing's last steps fenced by the claim alone (as the code was until the model's take-over finding): no
    lock on the intent's row, so a leader that lost its lock mid-landing moves main and writes its candidates' rows
    whatever the leader that took over did with its intent meanwhile."""

    def settled(self, s: State, intent: Intent) -> bool:
        return False

    def held(self, s: State, intent: Intent) -> bool:
        return False

    def finish_fenced(self, s: State, intent: Intent) -> State:
        members = tuple(i for i in intent.cands if (sub := s.subs[s.cands[i].sub]).status == "submitted"
                        and sub.owner == s.cands[i].agent and sub.version == s.cands[i].version)
        s = put(s, intents=tuple(x for x in s.intents if x != intent))
        for i in intent.cands:
            if i not in members:
                s = self._cand(s, i, put(s.cands[i], status="cut"))
        if not members:
            return s
        part = put(intent, cands=members)
        return self.finish(put(s, intents=(*s.intents, part)), part)


class LaneCrossed(Model):
    """A leave-out that lets a candidate behind the suspect land first (the window's code before the property test
    of issue 34 found it): the slots behind a left-out suspect are all merged again without it, those in its lane
    too, so the rest's run lands one of them before the suspect's verdict."""

    def waits(self, s: State, i: int, sus: int) -> bool:
        return False


class ReplacedLands(Model):
    """The fence without its "replaced" clause (``candidate_unfenced`` comparing the subtask's ``candidate_sha``): a
    candidate already in the window when its agent pushed again still holds its claim, and lands."""

    def holds(self, s: State, i: int) -> bool:
        c = s.cands[i]
        return self.fence(s, c.agent, c.sub, c.version) is None


class Unheld(Model):
    """The queue without its hold (``candidate_next`` without its "a dependency that is no longer landed" clause):
    a dependent's candidate is taken, and lands, while what it depends on is reverted."""

    def held_back(self, s: State, i: int) -> bool:
        return False


class NewestReverted(Model):
    """The mend without its bisection: the newest landing since main was last green is taken for the culprit, so when
    an older one broke main (its post-land check superseded by a newer landing's), the wrong one is reverted."""

    def bisect(self, s: State, n: int) -> tuple[int, int]:
        return n - 1, s.green


class CancelUnderLanding(Model):
    """A lead's cancel taken whatever the subtask's candidates are doing (``subtask_cancel`` as it was until the
    operators' bound found it): a cancel after the intent is written makes ``subtask_land`` refuse the member once
    main moved, and main keeps a commit no landed row names (the code recorded a ``landed_without_claim``
    finding)."""

    def landing(self, s: State, t: int) -> bool:
        return False


class LeadUnreconciled(Model):
    """A new leadership that does not reconcile when the lock changed hands between passes: the candidates the old
    leader was verifying stay ``verifying`` (no ``candidates_requeue_stuck``), so no queue takes them again."""

    def lose_lock(self, s: State) -> Iterator[Step]:
        if s.lockouts < self.config.lockouts and not s.stage and not s.old:
            yield ("the leader's lock goes between passes; the other replica leads without reconciling",
                   put(s, lockouts=s.lockouts + 1, window=(), base=(), suspects=()))


MUTANTS: dict[str, type[Model]] = {
    "no_fence": NoFence,
    "no_compare": NoCompare,
    "early_release": EarlyRelease,
    "unreconciled": Unreconciled,
    "no_sweep": NoSweep,
    "unfenced_finish": UnfencedFinish,
    "lane_crossed": LaneCrossed,
    "replaced_lands": ReplacedLands,
    "unheld": Unheld,
    "newest_reverted": NewestReverted,
    "cancel_under_landing": CancelUnderLanding,
    "lead_unreconciled": LeadUnreconciled,
}

# The bound each planted bug is caught on, when not the default: the lost NOTIFY is a liveness failure, so the search
# must finish (no crashes or forge pushes: a restart reads the whole queue and would mask it); the take-over finding
# needs a take-over; a suspect has a candidate behind it only in a batch whose run is not on the suspect; a push
# replaces a candidate only when agents may push again while one is pending; a revert needs a change that breaks main;
# a cancel needs an operator; a lock lost between passes needs lockouts (and no crash: a restart would requeue).
BOUNDS: dict[str, Config] = {
    "no_sweep": Config(crashes=0, forge=0),
    "unfenced_finish": Config(takeovers=1, crashes=0, forge=0, lost=0),
    "lane_crossed": BATCHED,
    "replaced_lands": SUPERSEDING,
    "unheld": RED,
    "newest_reverted": RED,
    "cancel_under_landing": OPERATORS,
    "lead_unreconciled": replace(LOCKOUTS, crashes=0),
}
