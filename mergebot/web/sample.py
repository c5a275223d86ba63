"""A task tree shaped like the seeds' 1,000-agent run, for screenshots, browser tests and ``python -m bench.pages``.

Pure and deterministic (from ``seed``). ``n`` nodes exactly ``depth`` levels deep: one root, ``groups``
directions under it, one chain down to full depth (so the deepest level exists), the rest attached under
random earlier nodes that are not yet at full depth. As in ``mergebot.tree``, a node with children is their
integration step and waits for all of them; a few nodes also wait for an earlier sibling (a dependency that
is not a child), which can never close a cycle: edges only point from later siblings to earlier ones, and from
parents down.
"""

from __future__ import annotations

import random

from mergebot.tree import Node, plan

SEEDS_NODES = 2418
SEEDS_DEPTH = 10


def seeds_tree(n: int = SEEDS_NODES, depth: int = SEEDS_DEPTH, *, groups: int = 10, seed: int = 7,
               sibling_deps: float = 0.15, prefix: str = "t") -> list[Node]:
    """The nodes in creation order (parents and dependencies first), ready for ``db.subtasks.create_tree``."""
    if n < 1 + groups + depth - 2 or depth < 2:
        raise ValueError("too few nodes for that many groups and levels")
    rng = random.Random(seed)  # noqa: S311 (sample data, not secrets)
    level: dict[str, int] = {}
    nodes: dict[str, Node] = {}

    def add(parent: Node | None, group: str | None) -> Node:
        key = f"{prefix}{len(nodes)}"
        lvl = 1 if parent is None else level[parent.key] + 1
        node = Node(key=key, title=_title(rng, lvl, len(nodes)), group=group, priority=0,
                    parent=parent.key if parent else None)
        nodes[key], level[key] = node, lvl
        if parent is not None:
            if parent.children and rng.random() < sibling_deps:
                node.depends_on.append(rng.choice(parent.children))
            parent.children.append(key)
        return node

    root = add(None, None)
    directions = [add(root, f"direction-{g}") for g in range(groups)]
    cur = directions[0]
    while level[cur.key] < depth:
        cur = add(cur, cur.group)
    open_ = [x for x in list(nodes.values())[1:] if level[x.key] < depth]
    while len(nodes) < n:
        parent = rng.choice(open_)
        child = add(parent, parent.group)
        if level[child.key] < depth:
            open_.append(child)
    return plan(list(nodes.values()))


_VERBS = ("prove", "derive", "check", "formalize", "simplify", "bound", "extend", "verify", "state", "refute")
_THINGS = ("lemma", "case split", "induction step", "base case", "invariant", "estimate", "reduction",
           "counterexample search", "normal form", "identity")


def _title(rng: random.Random, level: int, index: int) -> str:
    return f"L{level} {rng.choice(_VERBS)} {rng.choice(_THINGS)} {index}"
