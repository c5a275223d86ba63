"""The checker: every state the model can reach, breadth first, judged by the invariants; then liveness.

States are hashed as they are (frozen dataclasses), after symmetry reduction: agents are interchangeable, and so
are subtasks that the dependencies do not tell apart, so a state is stored as the least of its renamings
(``Symmetry``). Breadth first, the first state found breaking an invariant is one of the nearest, and its trace
(the named steps from the start, replayed on the model so every name is consistent) is as short as any.

Liveness under fair scheduling, on the bounded graph: a run in which every step enabled infinitely often is taken
infinitely often (strong fairness) ends, in a finite graph, in a *bottom* strongly connected component (one no
step leaves). So a property "eventually, and from then on, ``goal``" holds for every fair run exactly when every
state of every bottom component meets ``goal``; the components are found with Tarjan's algorithm.
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from mergebot.protocol.model import Model
from mergebot.protocol.properties import INVARIANTS, LIVENESS, Predicate
from mergebot.protocol.state import Agent, Config, History, Intent, State, Sub, put

__all__ = ["INVARIANTS", "LIVENESS", "Predicate", "Report", "Symmetry", "Violation", "check"]


# -- symmetry ----------------------------------------------------------------------------------------------------

class Symmetry:
    """The renamings that map a configuration onto itself: any permutation of the agents, with any permutation of
    the subtasks that maps the dependencies onto themselves."""

    def __init__(self, config: Config) -> None:
        deps = set(config.depends)
        lane = Model(config).lane  # and that keeps which subtasks share a lane
        subs = [p for p in itertools.permutations(range(config.subtasks))
                if {(p[d], p[on]) for d, on in deps} == deps
                and all((lane(i) == lane(j)) == (lane(p[i]) == lane(p[j])) for i in p for j in p)]
        renamings = [(a, t, t != tuple(range(config.subtasks)))
                     for a in itertools.permutations(range(config.agents)) for t in subs]
        self.renamings = renamings[1:]  # the first is the identity: the state itself

    @staticmethod
    def rename(s: State, a: Sequence[int], t: Sequence[int], subtasks: bool = True) -> State:
        """``s`` with agent ``i`` called ``a[i]`` and subtask ``j`` called ``t[j]`` (``subtasks`` False: ``t`` is the
        identity). The checker's innermost loop: records nothing renames are kept as they are."""
        if not subtasks:
            subs = tuple(sub if sub.owner < 0 or a[sub.owner] == sub.owner else put(sub, owner=a[sub.owner])
                         for sub in s.subs)
            cands = tuple(c if a[c.agent] == c.agent else put(c, agent=a[c.agent]) for c in s.cands)
        else:
            moved: list[Sub] = list(s.subs)
            for j, sub in enumerate(s.subs):
                moved[t[j]] = sub if sub.owner < 0 else put(sub, owner=a[sub.owner])
            subs = tuple(moved)
            cands = tuple(put(c, sub=t[c.sub], agent=a[c.agent]) for c in s.cands)
        agents: list[Agent] = list(s.agents)
        for i, g in enumerate(s.agents):
            agents[a[i]] = put(g, task=t[g.task]) if subtasks and g.task >= 0 else g
        return put(s, subs=subs, agents=tuple(agents), cands=cands)

    @staticmethod
    def renumber(s: State) -> State:
        """``s`` with its intents' ids numbered 1, 2, ... in the order they first appear (only equality matters)."""
        order: dict[int, int] = {0: 0}
        for _, k in s.main:
            order.setdefault(k, len(order))
        for _, k in s.base:
            order.setdefault(k, len(order))
        for x in (*s.intents, *s.old):
            order.setdefault(x.serial, len(order))
            for _, k in (*x.old, *x.new):
                order.setdefault(k, len(order))
        if all(k == v for k, v in order.items()):
            return s

        def h(commits: History) -> History:
            return tuple((c, order[k]) for c, k in commits)

        def i(x: Intent) -> Intent:
            return Intent(order[x.serial], x.cands, h(x.old), h(x.new), x.proven)

        return put(s, main=h(s.main), base=h(s.base), intents=tuple(map(i, s.intents)), old=tuple(map(i, s.old)))

    def canonical(self, s: State) -> State:
        s = self.renumber(s)
        least = s
        for a, t, subtasks in self.renamings:
            other = self.rename(s, a, t, subtasks)
            if other < least:
                least = other
        return least


# -- the search --------------------------------------------------------------------------------------------------

@dataclass
class Violation:
    kind: str  # "invariant" or "liveness"
    prop: str
    trace: list[str]  # the named steps from the start to the state that breaks it
    cycle: list[str] = field(default_factory=list)  # liveness: steps that go round for ever from there
    state: State | None = None

    def __str__(self) -> str:
        lines = [f"{self.kind} violated: {self.prop}", f"counterexample in {len(self.trace)} steps:"]
        lines += [f"  {n:2}. {step}" for n, step in enumerate(self.trace, 1)]
        if self.kind == "liveness":
            lines.append("  then, for ever:" if self.cycle else "  then no step is possible (the run stops there)")
            lines += [f"      {step}" for step in self.cycle]
        return "\n".join(lines)


@dataclass
class Report:
    states: int
    edges: int
    seconds: float
    violation: Violation | None
    complete: bool = True  # False when the search stopped at ``max_states``

    @property
    def ok(self) -> bool:
        return self.violation is None and self.complete

    def __str__(self) -> str:
        head = f"{self.states} states, {self.edges} steps, {self.seconds:.1f} s"
        if self.violation is not None:
            return f"{head}\n{self.violation}"
        return f"{head}: {'every property holds' if self.complete else 'stopped early: the bound was reached'}"


def check(model: Model, *, liveness: bool = True, max_states: int | None = None,
          invariants: Sequence[tuple[str, Predicate]] = INVARIANTS,
          goals: Sequence[tuple[str, Predicate]] = LIVENESS) -> Report:
    """Every reachable state, breadth first; the first invariant broken stops the search with its trace."""
    began = time.monotonic()
    sym = Symmetry(model.config)
    start = sym.canonical(model.initial())
    index: dict[State, int] = {start: 0}  # every state met, canonical or as a step made it: its canonical one
    states: list[State] = [start]
    parent: list[int] = [-1]
    edges: list[list[int]] = []  # each state's successors, kept for liveness
    count = 0
    complete = True
    for name, pred in invariants:
        if not pred(model, start):
            return Report(1, 0, time.monotonic() - began, Violation("invariant", name, [], state=start))
    k = 0
    while k < len(states):
        if max_states is not None and len(states) >= max_states:
            complete = False
            break
        s = states[k]
        out: list[int] = []
        for _, nxt in model.steps(s):
            count += 1
            j = index.get(nxt, -1)  # a state met before as it is (canonical, or not): no renaming needed
            if j >= 0:
                out.append(j)
                continue
            c = sym.canonical(nxt)
            j = index.setdefault(c, len(states))
            if c is not nxt:
                index[nxt] = j
            if j == len(states):
                states.append(c)
                parent.append(k)
                for name, pred in invariants:
                    if not pred(model, c):
                        trace, end = _replay(model, sym, states, _path(parent, j))
                        return Report(len(states), count, time.monotonic() - began,
                                      Violation("invariant", name, trace, state=end))
            out.append(j)
        if liveness:
            edges.append(out)
        k += 1
    violation = None
    if liveness and complete:
        violation = _liveness(model, sym, states, parent, edges, goals)
    return Report(len(states), count, time.monotonic() - began, violation, complete)


def _path(parent: list[int], j: int) -> list[int]:
    path = []
    while j >= 0:
        path.append(j)
        j = parent[j]
    return path[::-1]


def _replay(model: Model, sym: Symmetry, states: list[State], path: list[int],
            start: State | None = None) -> tuple[list[str], State]:
    """The names of the steps along ``path`` (canonical states), replayed from ``start`` (the model's initial
    state) so that every name speaks of the same agents and subtasks; and the concrete state it ends in."""
    cur = start if start is not None else model.initial()
    names: list[str] = []
    for j in path[1:]:
        want = states[j]
        for name, nxt in model.steps(cur):
            if sym.canonical(nxt) == want:
                names.append(name)
                cur = nxt
                break
        else:  # pragma: no cover - the graph came from these very steps
            raise AssertionError("trace replay lost its way")
    return names, cur


def _components(edges: list[list[int]]) -> list[list[int]]:
    """Tarjan's strongly connected components, without recursion."""
    n = len(edges)
    order = [-1] * n
    low = [0] * n
    on_stack = [False] * n
    stack: list[int] = []
    found: list[list[int]] = []
    counter = 0
    for root in range(n):
        if order[root] >= 0:
            continue
        work = [(root, 0)]
        order[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack[root] = True
        while work:
            v, i = work[-1]
            if i < len(edges[v]):
                work[-1] = (v, i + 1)
                w = edges[v][i]
                if order[w] < 0:
                    order[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack[w] = True
                    work.append((w, 0))
                elif on_stack[w]:
                    low[v] = min(low[v], order[w])
                continue
            work.pop()
            if work:
                u = work[-1][0]
                low[u] = min(low[u], low[v])
            if low[v] == order[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack[w] = False
                    comp.append(w)
                    if w == v:
                        break
                found.append(comp)
    return found


def _liveness(model: Model, sym: Symmetry, states: list[State], parent: list[int], edges: list[list[int]],
              goals: Sequence[tuple[str, Predicate]]) -> Violation | None:
    depth = [0] * len(states)
    for j in range(1, len(states)):  # parents come before their children
        depth[j] = depth[parent[j]] + 1
    worst: tuple[int, str, int, list[int]] | None = None
    for comp in _components(edges):
        members = set(comp)
        if any(w not in members for v in comp for w in edges[v]):
            continue  # not a bottom component: a fair run leaves it
        for name, goal in goals:
            bad = [v for v in comp if not goal(model, states[v])]
            if bad:
                v = min(bad, key=lambda x: depth[x])
                if worst is None or depth[v] < worst[0]:
                    worst = (depth[v], name, v, comp)
    if worst is None:
        return None
    _, name, v, comp = worst
    trace, end = _replay(model, sym, states, _path(parent, v))
    cycle: list[str] = []
    if len(comp) > 1 or v in edges[v]:
        cycle, _ = _replay(model, sym, states, [v, *_loop(edges, set(comp), v)], start=end)
    return Violation("liveness", name, trace, cycle, end)


def _loop(edges: list[list[int]], inside: set[int], v: int) -> list[int]:
    """A shortest path inside a component from ``v`` back to ``v`` (without ``v`` at its start)."""
    back: dict[int, int] = {}
    queue = deque([v])
    while queue:
        u = queue.popleft()
        for w in edges[u]:
            if w not in inside or w in back:
                continue
            back[w] = u
            if w == v:
                path = [v]
                while path[-1] in back and back[path[-1]] != v:
                    path.append(back[path[-1]])
                return path[::-1]
            queue.append(w)
    return []
