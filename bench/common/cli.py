"""A benchmark's command line: its description, ``--quick`` and ``--json``, the counts it takes with their full and
quick defaults, and writing its figures where ``--json`` says."""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any


def parser(prog: str, doc: str | None, quick: str | None = None) -> argparse.ArgumentParser:
    """A benchmark's command line, described by the first paragraph of its module's ``doc``; with ``quick`` (what
    a smoke run does), also ``--quick`` and ``--json PATH`` (``run_and_write``)."""
    p = argparse.ArgumentParser(prog=prog, description=doc.split("\n\n")[0] if doc else None)
    if quick is not None:
        p.add_argument("--quick", action="store_true", help=f"smoke run: {quick}")
        p.add_argument("--json", metavar="PATH", help="also write the figures as JSON to PATH")
    return p


def parse_counts(p: argparse.ArgumentParser, argv: list[str] | None,
                 **counts: tuple[int, int] | tuple[int, int, str]) -> argparse.Namespace:
    """The command line, with each ``name=(full, quick)`` count left unset filled in (``quick_defaults``); a count
    under 1 is refused. ``name=(full, quick, help)`` also declares ``--name`` (its help says both defaults)."""
    for name, given in counts.items():
        if len(given) == 3:
            full, quick, text = given  # type: ignore[misc]
            p.add_argument(f"--{name}", type=int, default=None, help=f"{text} [{full}; {quick} quick]")
    args = p.parse_args(argv)
    quick_defaults(args, **{name: (given[0], given[1]) for name, given in counts.items()})
    if any(getattr(args, name) < 1 for name in counts):
        flags = [f"--{name}" for name in counts]
        p.error(f"{', '.join(flags[:-1])} and {flags[-1]} must be positive")
    return args


def quick_defaults(args: argparse.Namespace, **values: tuple[Any, Any]) -> None:
    """Each ``name=(full, quick)`` the command line left unset (None): ``quick`` with ``--quick``, else ``full``."""
    for name, (full, quick) in values.items():
        if getattr(args, name) is None:
            setattr(args, name, quick if args.quick else full)


def run_and_write(bench: Any, args: argparse.Namespace) -> None:
    """Run a benchmark's ``bench(args)`` (a coroutine function or a plain one) and write its figures where
    ``--json`` says."""
    got = bench(args)
    write_figures(args.json, asyncio.run(got) if asyncio.iscoroutine(got) else got)


def write_figures(path: str | None, figures: dict[str, Any]) -> None:
    """A benchmark's ``--json PATH``: its figures written there as JSON (nothing without a path)."""
    if path:
        Path(path).write_text(json.dumps(figures, indent=2, default=str) + "\n", encoding="utf-8")
        print(f"\nfigures written to {path}")
