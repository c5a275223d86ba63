"""The layering of ``mergebot``, checked from the code: imports point down only.

Every module belongs to a *unit*: the first component of its name under ``mergebot``
(``mergebot.landing.window.queue`` is in unit ``landing``, ``mergebot.models`` in ``models``, the package's own
``__init__`` in unit ``mergebot``). ``UNITS`` below places each unit on a layer, lowest first:

  0. records and plain helpers: the package ``__init__``, models, messages (every sentence anyone is told),
     rules (a repository's rules, one model), errors, settings, auth, tree, similar, cost, logs, client, table,
     secrets, naps, attest;
  1. storage and git: db, git;
  2. the work: landing, forge, verify, agent, recovery, drill, protocol;
  3. the doors: cli, web, api, mcp, demo, ``__main__``.

Rules, each checked by its own test below:
  1. Every module file under ``mergebot/`` belongs to a unit in the table, and a unit the table names as a
     package is a directory, not a single file. Whoever adds a top-level module or package places it here.
  2. An import may point to its own layer or a lower one, never to a higher one.
  3. Two different units never import each other, even within one layer: one of them must be the lower.
  4. ``verifier/`` imports nothing from ``mergebot``: it is shipped and run on its own.
  5. The scan found something to judge (at least ``MIN_MODULES`` modules and ``MIN_EDGES`` import edges
     inside ``mergebot``), so the checks above cannot pass by looking at nothing.
  6. Inside unit ``landing`` every module belongs to a *room* of ``ROOMS`` (a module directly under
     ``mergebot/landing/`` or a package of it), and the rooms stand on levels: context 0, target 1, judge 2,
     main 3, intake and window 4. An import inside ``landing`` points to its own room or to a lower level, never
     up and never sideways between two rooms of one level; the scan finds at least ``MIN_ROOM_MODULES`` modules
     in rooms and ``MIN_ROOM_EDGES`` imports between rooms, and every room holds a module.

What counts as an import: every ``import`` and ``from ... import`` statement anywhere in a file — at the
top, inside functions (lazy imports), under ``if TYPE_CHECKING:`` — read with ``ast``, never by importing.
Relative imports are resolved against the module's package. In ``from x.y import z`` the target is
``x.y.z`` when that is a module or package and ``x.y`` otherwise, so ``from mergebot import agent`` points
at unit ``agent`` while ``from mergebot import __version__`` points at unit ``mergebot``. Imports inside
one unit are always fine. An edge from or to a unit missing from the table is left to rule 1 by rule 2,
but still counts for rule 3.

The table is the target layout of DESIGN.md ("Layout"); change it only with that section.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import pytest

# unit -> (layer, shape). Shape "package": must be a directory ``mergebot/<unit>/``; "module": must be
# ``mergebot/<unit>.py``; "any": either.
UNITS: dict[str, tuple[int, str]] = {
    # layer 0: records and plain helpers
    "mergebot": (0, "any"),  # the package __init__
    "models": (0, "any"),
    "messages": (0, "package"),
    "rules": (0, "any"),
    "errors": (0, "any"),
    "settings": (0, "any"),
    "auth": (0, "any"),
    "tree": (0, "any"),
    "similar": (0, "any"),
    "cost": (0, "any"),
    "logs": (0, "any"),
    "client": (0, "any"),
    "table": (0, "any"),
    "secrets": (0, "any"),
    "naps": (0, "any"),
    "attest": (0, "package"),  # signed landing statements: build, seal, open, check a chain (issue 44)
    # layer 1: storage and git
    "db": (1, "package"),
    "git": (1, "package"),
    # layer 2: the work
    "landing": (2, "package"),
    "forge": (2, "package"),
    "verify": (2, "package"),
    "agent": (2, "any"),
    "recovery": (2, "any"),
    "drill": (2, "any"),
    "protocol": (2, "package"),  # the landing protocol, model-checked over landing's pure decisions (issue 46)
    # layer 3: the doors
    "cli": (3, "package"),
    "web": (3, "package"),
    "api": (3, "package"),
    "mcp": (3, "any"),
    "demo": (3, "any"),
    "__main__": (3, "module"),
}
PACKAGE = "mergebot"
INDEPENDENT = "verifier"  # imports nothing from PACKAGE
MIN_MODULES = 50
MIN_EDGES = 100

REPO = Path(__file__).resolve().parents[1]


# --- the pure part: reading imports from source text ------------------------------------------------------

@dataclass(frozen=True)
class Import:
    """One imported name as written: ``target`` is a module; ``name`` is what ``from target import`` took."""

    module: str  # the importing module, dotted
    path: str  # its file, relative to the repository root
    line: int
    target: str
    name: str | None = None  # None for ``import target`` and ``from target import *``


@dataclass(frozen=True)
class Edge:
    """An import resolved to the module or package it reaches."""

    module: str
    path: str
    line: int
    target: str

    def __str__(self) -> str:
        return f"{self.module} ({self.path}:{self.line}) imports {self.target}"


def module_name(path: PurePosixPath) -> str:
    """``mergebot/landing/window/queue.py`` -> ``mergebot.landing.window.queue``; ``mergebot/db/__init__.py`` ->
    ``mergebot.db``."""
    parts = list(path.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def collect_imports(source: str, module: str, path: str, is_package: bool) -> list[Import]:
    """Every import statement in ``source`` (a file of ``module``; ``is_package`` for an ``__init__``)."""
    here = module.split(".") if is_package else module.split(".")[:-1]
    found: list[Import] = []
    for node in ast.walk(ast.parse(source, filename=path)):
        if isinstance(node, ast.Import):
            found += [Import(module, path, node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                base = node.module or ""
            else:
                keep = len(here) - (node.level - 1)
                if keep < 1:
                    raise ValueError(f"{path}:{node.lineno}: relative import beyond the top-level package")
                base = ".".join(here[:keep] + ([node.module] if node.module else []))
            found += [Import(module, path, node.lineno, base, None if alias.name == "*" else alias.name)
                      for alias in node.names]
    return found


def resolve(imports: Iterable[Import], known: frozenset[str]) -> list[Edge]:
    """Each import as the module it reaches: ``from x import z`` reaches ``x.z`` when that is a known module."""
    edges = []
    for i in imports:
        deeper = f"{i.target}.{i.name}" if i.name else None
        edges.append(Edge(i.module, i.path, i.line, deeper if deeper in known else i.target))
    return sorted(set(edges), key=lambda e: (e.path, e.line, e.target))


def unit_of(name: str) -> str | None:
    """The unit of a dotted name under PACKAGE, or None for anything outside it."""
    parts = name.split(".")
    if parts[0] != PACKAGE:
        return None
    return parts[1] if len(parts) > 1 else PACKAGE


# --- the pure part: judging against the table ----------------------------------------------------------------

def misplaced(files: Mapping[str, str], table: Mapping[str, tuple[int, str]], place_of: Callable[[str], str | None],
              folder: str, what: str, table_name: str) -> list[str]:
    """Rules 1 and 6, for ``files`` (module -> path): modules whose place (``place_of``: a unit, a room) is missing
    from ``table``, or whose place is a single module in ``folder`` where the table says a package, or the reverse."""
    problems = []
    for module, path in sorted(files.items(), key=lambda kv: kv[1]):
        place = place_of(module)
        if place is None:
            continue
        if place not in table:
            problems.append(f"{path} ({module}): {what} {place!r} is not in the table; place it in {table_name}")
            continue
        shape = table[place][1]
        is_module_file = PurePosixPath(path).parent == PurePosixPath(folder)
        if place != PACKAGE and shape == "package" and is_module_file:
            problems.append(f"{path} ({module}): the table has {what} {place!r} as a package ({folder}/{place}/), "
                            "not a single module")
        elif shape == "module" and not is_module_file:
            problems.append(f"{path} ({module}): the table has {what} {place!r} as a single module "
                            f"({folder}/{place}.py), not a package")
    return problems


def unplaced(files: Mapping[str, str], units: Mapping[str, tuple[int, str]]) -> list[str]:
    """Rule 1, for ``files`` (module -> path): modules of units missing from the table or of the wrong shape."""
    return misplaced(files, units, unit_of, PACKAGE, "unit", "UNITS")


def upward(edges: Iterable[Edge], units: Mapping[str, tuple[int, str]]) -> list[Edge]:
    """Rule 2: edges from a unit to another on a higher layer (units missing from the table are rule 1's)."""
    bad = []
    for e in edges:
        src, dst = unit_of(e.module), unit_of(e.target)
        if src is None or dst is None or src == dst or src not in units or dst not in units:
            continue
        if units[dst][0] > units[src][0]:
            bad.append(e)
    return bad


def mutual(edges: Iterable[Edge]) -> dict[tuple[str, str], list[Edge]]:
    """Rule 3: pairs of different units that import each other, with every edge between them, both ways."""
    between: dict[tuple[str, str], list[Edge]] = defaultdict(list)
    for e in edges:
        src, dst = unit_of(e.module), unit_of(e.target)
        if src is not None and dst is not None and src != dst:
            between[(src, dst)].append(e)
    return {(a, b): between[(a, b)] + between[(b, a)]
            for (a, b) in sorted(between) if a < b and (b, a) in between}


def into_package(edges: Iterable[Edge]) -> list[Edge]:
    """Rule 4: edges that reach PACKAGE (run on the independent package's edges)."""
    return [e for e in edges if unit_of(e.target) is not None]


def internal(edges: Iterable[Edge]) -> set[tuple[str, str]]:
    """Rule 5: the distinct (module, target) pairs with both ends inside PACKAGE."""
    return {(e.module, e.target) for e in edges if unit_of(e.module) and unit_of(e.target)}


# --- the real tree -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Tree:
    files: dict[str, str]  # module -> path, for PACKAGE and INDEPENDENT
    edges: list[Edge]

    def of(self, top: str) -> list[Edge]:
        return [e for e in self.edges if e.module.split(".")[0] == top]


def scan(root: Path, tops: Iterable[str]) -> Tree:
    files: dict[str, str] = {}
    imports: list[Import] = []
    for top in tops:
        for file in sorted((root / top).rglob("*.py")):
            rel = PurePosixPath(file.relative_to(root).as_posix())
            module = module_name(rel)
            files[module] = str(rel)
            imports += collect_imports(file.read_text("utf-8"), module, str(rel), rel.name == "__init__.py")
    # every module and every package above it (a directory without __init__.py is a namespace package)
    known = frozenset(".".join(m.split(".")[:n]) for m in files for n in range(1, m.count(".") + 2))
    return Tree(files, resolve(imports, known))


@pytest.fixture(scope="module")
def tree() -> Tree:
    return scan(REPO, (PACKAGE, INDEPENDENT))


def _listing(lines: Iterable[object]) -> str:
    return "\n".join(f"  {line}" for line in lines)


def _levels(bad: list[Edge], place_of: Callable[[str], str | None], table: Mapping[str, tuple[int, str]],
            what: str) -> list[str]:
    """Each edge of ``bad`` with the levels of its two ends (``what``: layer, level)."""
    return [f"{e}  [{place_of(e.module)} is {what} {table[place_of(e.module) or ''][0]}, "
            f"{place_of(e.target)} is {what} {table[place_of(e.target) or ''][0]}]" for e in bad]


def test_every_module_is_placed(tree: Tree) -> None:
    problems = unplaced(tree.files, UNITS)
    assert not problems, f"{len(problems)} module(s) outside the layer table (tests/test_layers.py UNITS):\n" \
                         + _listing(problems)


def test_no_import_points_up(tree: Tree) -> None:
    bad = upward(tree.of(PACKAGE), UNITS)
    assert not bad, f"{len(bad)} import(s) point to a higher layer:\n" + _listing(_levels(bad, unit_of, UNITS, "layer"))


def test_no_two_units_import_each_other(tree: Tree) -> None:
    pairs = mutual(tree.of(PACKAGE))
    text = "\n".join(f"  {a} <-> {b}:\n" + _listing(f"  {e}" for e in edges) for (a, b), edges in pairs.items())
    assert not pairs, f"{len(pairs)} pair(s) of units import each other; make one of each pair the lower:\n{text}"


def test_verifier_imports_nothing_from_mergebot(tree: Tree) -> None:
    bad = into_package(tree.of(INDEPENDENT))
    assert not bad, f"{INDEPENDENT}/ must not import {PACKAGE}:\n" + _listing(bad)


def test_the_scan_found_the_code(tree: Tree) -> None:
    modules = [m for m in tree.files if unit_of(m)]
    edges = internal(tree.of(PACKAGE))
    assert len(modules) >= MIN_MODULES, f"only {len(modules)} modules found under {REPO / PACKAGE}"
    assert len(edges) >= MIN_EDGES, f"only {len(edges)} import edges found inside {PACKAGE}"
    assert any(m.split(".")[0] == INDEPENDENT for m in tree.files), f"no modules found under {REPO / INDEPENDENT}"


# --- the checks themselves, on tiny synthetic trees: they can fail --------------------------------------------

def _edges(module: str, source: str, is_package: bool = False, known: Iterable[str] = ()) -> list[Edge]:
    path = module.replace(".", "/") + ("/__init__.py" if is_package else ".py")
    return resolve(collect_imports(source, module, path, is_package), frozenset(known))


def edge(module: str, target: str, line: int = 1) -> Edge:
    return Edge(module, module.replace(".", "/") + ".py", line, target)


def test_module_names() -> None:
    assert module_name(PurePosixPath("mergebot/landing/window/queue.py")) == "mergebot.landing.window.queue"
    assert module_name(PurePosixPath("mergebot/db/__init__.py")) == "mergebot.db"
    assert module_name(PurePosixPath("mergebot/__init__.py")) == "mergebot"
    assert module_name(PurePosixPath("mergebot/__main__.py")) == "mergebot.__main__"
    assert [unit_of(n) for n in ("mergebot", "mergebot.landing.window.queue", "mergebot.models", "verifier.runner",
                                 "mergebotx")] == ["mergebot", "landing", "models", None, None]


def test_every_kind_of_import_is_read() -> None:
    source = (
        "import os\n"
        "import mergebot.db.connect, mergebot.git as g\n"
        "from mergebot.models import Subtask, Claim\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from mergebot.landing.store import LandingStore\n"
        "def later():\n"
        "    from mergebot.forge import webhooks\n"
        "    try:\n"
        "        from mergebot.errors import *\n"
        "    except ImportError:\n"
        "        pass\n"
    )
    got = {(e.line, e.target) for e in _edges("mergebot.verify.jobs", source, known={"mergebot.forge.webhooks"})}
    assert got == {(1, "os"), (2, "mergebot.db.connect"), (2, "mergebot.git"), (3, "mergebot.models"),
                   (4, "typing"), (6, "mergebot.landing.store"), (8, "mergebot.forge.webhooks"),
                   (10, "mergebot.errors")}


def test_from_import_reaches_a_submodule_only_when_there_is_one() -> None:
    source = "from mergebot import agent, __version__\nfrom mergebot.git import mirror, Repo\n"
    got = {e.target for e in _edges("mergebot.cli", source, known={"mergebot.agent", "mergebot.git.mirror"})}
    assert got == {"mergebot.agent", "mergebot", "mergebot.git.mirror", "mergebot.git"}
    assert {unit_of(t) for t in got} == {"agent", "mergebot", "git"}


def test_relative_imports_resolve_against_the_package() -> None:
    known = {"mergebot.landing.intake.checks", "mergebot.db.base"}
    source = "from ..intake import checks\nfrom .planner import plan\nfrom ...db import base\nfrom ... import errors\n"
    got = [e.target for e in _edges("mergebot.landing.window.queue", source, known=known)]
    assert got == ["mergebot.landing.intake.checks", "mergebot.landing.window.planner", "mergebot.db.base", "mergebot"]
    # in an __init__ the package is the module itself
    got = [e.target for e in _edges("mergebot.db", "from . import base\nfrom .base import x\n", True, known)]
    assert got == ["mergebot.db.base", "mergebot.db.base"]
    with pytest.raises(ValueError, match="beyond the top-level"):
        _edges("mergebot.models", "from .. import x\n")


def test_an_unknown_unit_and_a_wrong_shape_are_reported() -> None:
    files = {"mergebot": "mergebot/__init__.py", "mergebot.models": "mergebot/models.py",
             "mergebot.landing.window.queue": "mergebot/landing/window/queue.py", "mergebot.store": "mergebot/store.py",
             "mergebot.cli": "mergebot/cli.py", "mergebot.__main__": "mergebot/__main__.py",
             "mergebot.metrics.counters": "mergebot/metrics/counters.py", "verifier.runner": "verifier/runner.py"}
    problems = unplaced(files, UNITS)
    assert len(problems) == 3
    assert any(p.startswith("mergebot/store.py (mergebot.store): unit 'store' is not in the table") for p in problems)
    assert any(p.startswith("mergebot/metrics/counters.py") and "'metrics'" in p for p in problems)
    assert any(p.startswith("mergebot/cli.py") and "as a package" in p for p in problems)
    assert unplaced({"mergebot.__main__.x": "mergebot/__main__/x.py"}, UNITS) != []


def test_an_upward_import_is_reported() -> None:
    edges = [edge("mergebot.db.connect", "mergebot.landing.store", 7),  # 1 -> 2: up
             edge("mergebot.landing.window.queue", "mergebot.db.connect"),  # 2 -> 1: down
             edge("mergebot.landing.window.queue", "mergebot.forge.client"),  # 2 -> 2: same layer
             edge("mergebot.models", "mergebot.cli"),  # 0 -> 3: up
             edge("mergebot.landing.window.queue", "mergebot.landing.window.planner"),  # inside one unit
             edge("mergebot.store", "mergebot.api"),  # unknown unit: rule 1's
             edge("mergebot.web.render", "mergebot")]  # to the package __init__: layer 0
    bad = upward(edges, UNITS)
    assert bad == [edges[0], edges[3]]
    assert str(bad[0]) == "mergebot.db.connect (mergebot/db/connect.py:7) imports mergebot.landing.store"


def test_a_mutual_import_is_reported_even_within_one_layer() -> None:
    edges = [edge("mergebot.landing.window.queue", "mergebot.forge.client", 3),
             edge("mergebot.forge.webhooks", "mergebot.landing.store", 9),
             edge("mergebot.landing.window.queue", "mergebot.landing.store"),  # inside one unit
             edge("mergebot.verify.jobs", "mergebot.db.connect")]  # one way only
    assert mutual(edges) == {("forge", "landing"): [edges[1], edges[0]]}
    assert mutual(edges[:1] + edges[2:]) == {}


def test_a_verifier_import_of_mergebot_is_reported() -> None:
    edges = _edges("verifier.runner", "import json\nfrom . import sandbox\nfrom mergebot.models import X\n",
                   known={"verifier.sandbox"})
    assert [str(e) for e in into_package(edges)] == ["verifier.runner (verifier/runner.py:3) imports mergebot.models"]


def test_the_sanity_count_keeps_only_edges_inside_the_package() -> None:
    edges = [edge("mergebot.cli", "os"), edge("mergebot.cli", "mergebot.agent"),
             edge("mergebot.cli", "mergebot.agent", 2), edge("mergebot.agent", "mergebot.agent"),
             edge("verifier.runner", "mergebot.models")]
    assert internal(edges) == {("mergebot.cli", "mergebot.agent"), ("mergebot.agent", "mergebot.agent")}


# --- rule 6: the rooms of unit landing -------------------------------------------------------------------------

LANDING = f"{PACKAGE}.landing"
# room -> (level, shape), lowest first. Shape "module": ``mergebot/landing/<room>.py``; "package":
# ``mergebot/landing/<room>/``. A new module of ``landing`` goes into the room whose job it does.
ROOMS: dict[str, tuple[int, str]] = {
    "context": (0, "module"),  # what the landing path runs with: database, git, crash points
    "target": (1, "module"),  # where main lives: a hosted repository or a forge's
    "judge": (2, "package"),  # a finished run to a typed verdict
    "main": (3, "package"),  # where main moves, is reconciled and mended
    "intake": (4, "package"),  # what a push is checked against before it queues
    "window": (4, "package"),  # which candidates run, speculation, the executor
}
MIN_ROOM_MODULES = 35
MIN_ROOM_EDGES = 50


def room_of(name: str) -> str | None:
    """The room of a dotted name inside LANDING (its component below LANDING), or None outside it or for LANDING."""
    parts, top = name.split("."), LANDING.split(".")
    if parts[: len(top)] != top or len(parts) == len(top):
        return None
    return parts[len(top)]


def unroomed(files: Mapping[str, str], rooms: Mapping[str, tuple[int, str]]) -> list[str]:
    """Rule 6, for ``files`` (module -> path): modules under LANDING in no room of the table, or of the wrong shape."""
    return misplaced(files, rooms, room_of, LANDING.replace(".", "/"), "room", "ROOMS")


def crossing(edges: Iterable[Edge], rooms: Mapping[str, tuple[int, str]]) -> list[Edge]:
    """Rule 6: edges between two rooms of LANDING that point up or sideways (rooms missing from the table are
    left to the placement check)."""
    bad = []
    for e in edges:
        src, dst = room_of(e.module), room_of(e.target)
        if src is None or dst is None or src == dst or src not in rooms or dst not in rooms:
            continue
        if rooms[dst][0] >= rooms[src][0]:
            bad.append(e)
    return bad


def test_every_landing_module_is_in_a_room(tree: Tree) -> None:
    problems = unroomed(tree.files, ROOMS)
    assert not problems, f"{len(problems)} module(s) of {LANDING} outside the rooms (tests/test_layers.py ROOMS):\n" \
                         + _listing(problems)


def test_landing_imports_point_to_a_lower_room(tree: Tree) -> None:
    bad = crossing(tree.of(PACKAGE), ROOMS)
    assert not bad, f"{len(bad)} import(s) inside {LANDING} point up or sideways between rooms (move the helper " \
                    "down to the room both can import):\n" + _listing(_levels(bad, room_of, ROOMS, "level"))


def test_the_rooms_scan_found_the_code(tree: Tree) -> None:
    modules = [m for m in tree.files if room_of(m)]
    between = {(e.module, e.target) for e in tree.of(PACKAGE)
               if room_of(e.module) and room_of(e.target) and room_of(e.module) != room_of(e.target)}
    assert len(modules) >= MIN_ROOM_MODULES, f"only {len(modules)} modules found in the rooms of {LANDING}"
    assert len(between) >= MIN_ROOM_EDGES, f"only {len(between)} imports found between the rooms of {LANDING}"
    empty = set(ROOMS) - {room_of(m) for m in modules}
    assert not empty, f"rooms of the table without a module: {sorted(empty)}"


def test_room_names() -> None:
    assert [room_of(n) for n in ("mergebot.landing.main.land", "mergebot.landing.context", "mergebot.landing.window",
                                 "mergebot.landing", "mergebot.landingx.y", "mergebot.db.landing", "verifier.runner")] \
        == ["main", "context", "window", None, None, None, None]


def test_an_import_up_or_sideways_between_rooms_is_reported() -> None:
    edges = [edge("mergebot.landing.main.land", "mergebot.landing.window.planner", 5),  # 3 -> 4: up
             edge("mergebot.landing.intake.assess", "mergebot.landing.window.queue", 6),  # 4 -> 4: sideways
             edge("mergebot.landing.window.alone", "mergebot.landing.main.land"),  # 4 -> 3: down
             edge("mergebot.landing.window.queue", "mergebot.landing.window.planner"),  # its own room
             edge("mergebot.landing.context", "mergebot.landing.target", 9),  # 0 -> 1: up
             edge("mergebot.landing.window.queue", "mergebot.db.landing"),  # out of the unit: rules 2 and 3
             edge("mergebot.cli.admin", "mergebot.landing.window.queue"),  # into the unit from outside
             edge("mergebot.landing.store.x", "mergebot.landing.context"),  # no such room: the placement check's
             edge("mergebot.landing.window", "mergebot.landing")]  # to the unit's own package
    bad = crossing(edges, ROOMS)
    assert bad == [edges[0], edges[1], edges[4]]
    assert str(bad[1]) == ("mergebot.landing.intake.assess (mergebot/landing/intake/assess.py:6) imports "
                           "mergebot.landing.window.queue")


def test_a_module_outside_every_room_is_reported() -> None:
    files = {"mergebot.landing.context": "mergebot/landing/context.py",
             "mergebot.landing.main.land": "mergebot/landing/main/land.py",
             "mergebot.landing.window": "mergebot/landing/window/__init__.py",
             "mergebot.landing": "mergebot/landing/__init__.py",
             "mergebot.models": "mergebot/models.py",
             "mergebot.landing.stray": "mergebot/landing/stray.py",  # in no room
             "mergebot.landing.judge": "mergebot/landing/judge.py",  # a room that is a package
             "mergebot.landing.target.x": "mergebot/landing/target/x.py"}  # a room that is a module
    problems = unroomed(files, ROOMS)
    assert len(problems) == 3
    assert any(p.startswith("mergebot/landing/stray.py (mergebot.landing.stray): room 'stray' is not in the table")
               for p in problems)
    assert any(p.startswith("mergebot/landing/judge.py") and "as a package" in p for p in problems)
    assert any(p.startswith("mergebot/landing/target/x.py") and "as a single module" in p for p in problems)
