"""Task-tree files: JSON or YAML descriptions of subtasks with dependencies, checked before anything is written.

Pure. A file is a list of nodes (or ``{"subtasks": [...]}``); each node has a ``key`` unique in the file, a
``title``, and optionally ``description``, ``priority``, ``group``, ``max_attempts``, ``parent`` (a key),
``depends_on`` (keys in the file or ids of existing subtasks), ``paths`` (its footprint: the paths or globs it
is expected to touch) and nested ``children`` (whose parent is the node). A node with children is their
integration step: it depends on each of them, so it becomes ready only once they have all landed (the seeds'
"one subgroup proved if A then B, another proved A").

``plan`` returns the nodes in an order where every dependency and parent comes first, or raises ``Invalid``
naming the offending field, including every dependency cycle.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from mergebot import messages as say
from mergebot.errors import Invalid


@dataclass
class Node:
    key: str
    title: str
    description: str = ""
    priority: int = 0
    group: str | None = None
    max_attempts: int = 3
    parent: str | int | None = None
    depends_on: list[str | int] = field(default_factory=list)
    children: list[str] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)


def parse_tree_text(text: str, filename: str = "tree") -> list[Node]:
    return parse_tree(load_tree_text(text, filename))


def load_tree_text(text: str, filename: str = "tree") -> Any:
    """A tree file's text as data (JSON for a ``.json`` name, else YAML); an error names the file, not
    ``<unicode string>``."""
    try:
        if filename.endswith(".json"):
            return json.loads(text)
        stream = io.StringIO(text)
        stream.name = filename  # PyYAML names the stream in its marks ("in 'tree.yaml', line 3")
        return yaml.safe_load(stream)
    except (yaml.YAMLError, json.JSONDecodeError) as e:
        raise Invalid(say.tree_not_parsed(filename, e), field="file") from e


def read_tree_file(path: Path) -> Any:
    """A tree file's data, or ``Invalid`` saying why it cannot be read (a missing file, not ``[Errno 2]``)."""
    try:
        text = path.read_text("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise Invalid(say.tree_unreadable(str(path), why, path.parent.is_dir()), field="file") from e
    return load_tree_text(text, str(path))


def subtasks_of(data: Any) -> Any:
    """The list of nodes: the file itself, or its ``subtasks:``."""
    return data["subtasks"] if isinstance(data, dict) and "subtasks" in data else data


def parse_tree(data: Any) -> list[Node]:
    data = subtasks_of(data)
    if not isinstance(data, list):
        keys = [str(k) for k in data][:10] if isinstance(data, dict) else []
        raise Invalid(say.tree_not_a_list(keys), field="subtasks")
    nodes: list[Node] = []
    _flatten(data, None, "subtasks", nodes)
    return plan(nodes)


NODE_KEYS = ("key", "title", "description", "priority", "group", "max_attempts", "parent", "depends_on", "children",
             "paths")
FILE_KEYS = (*NODE_KEYS, "accept")  # a file for ``mergebot create --file`` may name acceptance tests too
MAX_PATHS = 100


def _flatten(items: list[Any], parent: str | None, path: str, out: list[Node]) -> None:
    for i, item in enumerate(items):
        where = f"{path}[{i}]"
        if not isinstance(item, dict):
            raise Invalid(say.node_not_object(where), field=where)
        unknown = [k for k in item if k not in NODE_KEYS]
        if unknown == ["accept"]:  # the CLI takes it out of a file; the API attaches acceptance tests on its own
            raise Invalid(say.NODE_ACCEPT_VIA_API, field=f"{where}.accept")
        if unknown:  # a misspelt key (``prio: 3``) would otherwise be dropped without a word
            bad = next(k for k in unknown if k != "accept")
            raise Invalid(say.node_unknown_key(where, bad, FILE_KEYS), field=f"{where}.{bad}")
        key = item.get("key")
        title = item.get("title")
        if not isinstance(key, str | int) or isinstance(key, bool) or str(key) == "":
            raise Invalid(say.node_needs_text(where, "key"), field=f"{where}.key")
        if not isinstance(title, str) or not title.strip():
            raise Invalid(say.node_needs_text(where, "title"), field=f"{where}.title")
        deps = item.get("depends_on", [])
        if not isinstance(deps, list) or not all(isinstance(d, str | int) for d in deps):
            raise Invalid(say.node_bad_depends_on(where), field=f"{where}.depends_on")
        paths = item.get("paths", [])
        if (not isinstance(paths, list) or len(paths) > MAX_PATHS
                or not all(isinstance(p, str) and 0 < len(p) <= 500 and not p.startswith("/") for p in paths)):
            raise Invalid(say.node_bad_paths(where, MAX_PATHS), field=f"{where}.paths")
        priority = item.get("priority", 0)
        max_attempts = item.get("max_attempts", 3)
        if not isinstance(priority, int) or isinstance(priority, bool):
            raise Invalid(say.node_needs_integer(where, "priority"), field=f"{where}.priority")
        if not isinstance(max_attempts, int) or isinstance(max_attempts, bool):
            raise Invalid(say.node_needs_integer(where, "max_attempts"), field=f"{where}.max_attempts")
        out.append(
            Node(
                key=str(key),
                title=title,
                description=str(item.get("description", "")),
                priority=priority,
                group=item.get("group"),
                max_attempts=max_attempts,
                parent=item.get("parent", parent),
                depends_on=[d if isinstance(d, int) else str(d) for d in deps],
                paths=list(paths),
            )
        )
        children = item.get("children", [])
        if not isinstance(children, list):
            raise Invalid(say.node_bad_children(where), field=f"{where}.children")
        node = out[-1]
        first_child = len(out)
        _flatten(children, str(key), f"{where}.children", out)
        node.children = [c.key for c in out[first_child:] if c.parent == node.key]


def plan(nodes: list[Node]) -> list[Node]:
    """Order nodes so that parents and in-file dependencies come first; refuse duplicates and cycles.

    A parent's implicit dependency on its children counts for cycles (a child that depends on its own
    parent can never run) but not for the order: the parent row must exist before its children name it,
    so the store adds those edges after creating the children. Integers in ``depends_on`` / ``parent`` are
    ids of existing subtasks and impose no order here.
    """
    by_key: dict[str, Node] = {}
    for n in nodes:
        if n.key in by_key:
            raise Invalid(say.key_twice(n.key), field="key")
        by_key[n.key] = n

    def refs(n: Node, extra: list[str | int]) -> list[str]:
        out = []
        for ref in [*n.depends_on, *extra]:
            if isinstance(ref, int):
                continue
            if ref not in by_key:
                raise Invalid(say.unknown_key_ref(n.key, ref), field="depends_on")
            out.append(ref)
        return out

    _toposort(by_key, lambda n: refs(n, list(n.children)))
    return _toposort(by_key, lambda n: refs(n, [n.parent] if n.parent is not None else []))


def _toposort(by_key: dict[str, Node], edges: Callable[[Node], list[str]]) -> list[Node]:
    """Depth-first topological order (dependencies first); raises Invalid naming a cycle."""
    order: list[Node] = []
    state: dict[str, int] = {}  # 1 = on the current path, 2 = placed
    for start in by_key:
        if start in state:
            continue
        stack: list[tuple[str, list[str]]] = [(start, edges(by_key[start]))]
        path = [start]
        state[start] = 1
        while stack:
            key, todo = stack[-1]
            if todo:
                nxt = todo.pop()
                if state.get(nxt) == 1:
                    cycle = [*path[path.index(nxt) :], nxt]
                    raise Invalid(say.dependency_cycle(cycle), field="depends_on", cycle=cycle)
                if nxt not in state:
                    state[nxt] = 1
                    path.append(nxt)
                    stack.append((nxt, edges(by_key[nxt])))
            else:
                stack.pop()
                path.pop()
                state[key] = 2
                order.append(by_key[key])
    return order
