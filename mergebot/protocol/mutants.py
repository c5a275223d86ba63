"""Planted bugs: each a model with one step replaced, which the checker must catch with a short counterexample.

Each is what a plausible edit of the real code would do; ``tests/test_protocol.py`` checks every one of them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

from mergebot.protocol.model import Model
from mergebot.protocol.state import History, State, Step


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
                nxt = self._sub(nxt, d, replace(nxt.subs[d], status="ready"))
        return name, nxt


class Unreconciled(Model):
    """The reconciler leaves pending intents as they are after a crash."""

    def reconcile_intents(self, s: State) -> State:
        return s


class NoSweep(Model):
    """A lost NOTIFY with no sweep behind it: the leader hears of a candidate only by its NOTIFY (or a restart)."""

    def sweep(self, s: State) -> Iterator[Step]:
        return iter(())


MUTANTS: dict[str, type[Model]] = {
    "no_fence": NoFence,
    "no_compare": NoCompare,
    "early_release": EarlyRelease,
    "unreconciled": Unreconciled,
    "no_sweep": NoSweep,
}
