"""The seeds' coordination load (``python -m bench.fleet --scenario seeds``): the tree, the read mix and how the seeds'
writes and reads are spread over the subtasks.
"""

from __future__ import annotations

import bisect
import itertools
import random
from collections import Counter
from dataclasses import dataclass, field

SEEDS_SUBTASKS = 2418
SEEDS_DEPTH = 10
SEEDS_AGENTS = 1000  # 1 lead + 999 helpers
SEEDS_GROUPS = 10
SEEDS_WRITES = 36_612
SEEDS_READS = 311_734
SEEDS_HOURS = 30.0
SEEDS_TARGET = 1000.0  # speed-up over the seeds' 30 hours


# -- scenario 2: the seeds' coordination load -----------------------------------------------------------------


@dataclass
class TNode:
    index: int
    depth: int
    parent: int | None
    group: str | None
    children: list[int] = field(default_factory=list)


def seeds_tree(n: int, depth: int, groups: int, rng: random.Random) -> list[TNode]:
    """A tree of ``n`` nodes exactly ``depth`` levels deep: a root, ``groups`` directions, a chain to full depth,
    the rest attached at random (a node integrates its children: it waits for them)."""
    nodes = [TNode(0, 1, None, None)]

    def add(parent: TNode, group: str | None) -> TNode:
        node = TNode(len(nodes), parent.depth + 1, parent.index, group)
        parent.children.append(node.index)
        nodes.append(node)
        return node

    directions = [add(nodes[0], f"direction-{g}") for g in range(groups)]
    cur = directions[0]
    while cur.depth < depth and len(nodes) < n:
        cur = add(cur, cur.group)
    open_ = [x for x in nodes[1:] if x.depth < depth]
    while len(nodes) < n:
        parent = rng.choice(open_)
        child = add(parent, parent.group)
        if child.depth < depth:
            open_.append(child)
    return nodes


READ_MIX = (  # what the seeds' agents read, per 100 reads
    ("subtask", 26), ("subtask_notes", 15), ("announcements", 14), ("group_notes", 14), ("ready", 8),
    ("landed", 7), ("status", 5), ("groups", 5), ("me", 5), ("assignments", 1),
)


def read_sequence() -> list[str]:
    """READ_MIX as a 100-long sequence with each kind spread out (smooth weighted round robin)."""
    total = sum(w for _, w in READ_MIX)
    current = dict.fromkeys((k for k, _ in READ_MIX), 0)
    out = []
    for _ in range(total):
        for k, w in READ_MIX:
            current[k] += w
        best = max(current, key=lambda k: current[k])
        current[best] -= total
        out.append(best)
    return out


def spread(total: int, n: int, i: int) -> int:
    return total // n + (1 if i < total % n else 0)


@dataclass
class SeedsPlan:
    nodes: list[TNode]
    helpers: int
    helper_group: list[str]
    leaders: dict[str, int]  # group -> helper index of its leader
    heartbeats: list[int]
    notes: list[int]
    reads: list[int]
    read_offset: list[int]
    fixed_writes: dict[str, int]
    writes_target: int
    reads_target: int
    announcements: int


def seeds_plan(scale: float, seed: int) -> SeedsPlan:
    n = max(SEEDS_GROUPS + SEEDS_DEPTH, round(SEEDS_SUBTASKS * scale))
    nodes = seeds_tree(n, SEEDS_DEPTH, SEEDS_GROUPS, random.Random(seed))
    helpers = max(SEEDS_GROUPS, round(SEEDS_AGENTS * scale) - 1)
    sizes = Counter(x.group for x in nodes if x.group)
    names = sorted(sizes)
    cum = list(itertools.accumulate(sizes[g] for g in names))
    helper_group = [names[bisect.bisect_left(cum, (h + 0.5) / helpers * cum[-1])] for h in range(helpers)]
    for g in names:  # every group has at least one helper (its leader)
        if g not in helper_group:
            helper_group[max(range(helpers), key=lambda h: Counter(helper_group)[helper_group[h]])] = g
    leaders = {g: helper_group.index(g) for g in names}
    writes_target = round(SEEDS_WRITES * scale)
    reads_target = round(SEEDS_READS * scale)
    announcements = 20
    fixed = {"groups (create)": len(names), "assignments": helpers, "announcements": announcements,
             "groups (open)": len(names), "subtasks (create)": n, "claims": n, "submits": n, "landings (store)": n}
    rest = max(0, writes_target - sum(fixed.values()))
    hb_total = round(rest * 0.6)
    notes_total = rest - hb_total
    reads = [spread(reads_target, n, i) for i in range(n)]
    return SeedsPlan(nodes, helpers, helper_group, leaders,
                     [spread(hb_total, n, i) for i in range(n)], [spread(notes_total, n, i) for i in range(n)],
                     reads, list(itertools.accumulate([0, *reads[:-1]])), fixed, writes_target, reads_target,
                     announcements)
