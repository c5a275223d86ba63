"""The read views: ``status``, ``queue``, ``landed`` and ``tree``, each a table or JSON with ``--json``.

``status`` and ``queue`` also take ``--watch``: on a terminal the whole view is redrawn every few seconds;
anywhere else (a log, a pipe) one line is printed each time the view's one-line summary changes. A server
that cannot be reached is reported and retried; any other refusal ends the watch. The text itself is
``render``'s.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TextIO

import httpx

from mergebot.cli.agent import client_from
from mergebot.cli.render import (
    CLEAR,
    _json_line,
    _short,
    _when,
    emit,
    queue_line,
    render_queue,
    render_status,
    render_tree,
    render_worktree,
    status_line,
)
from mergebot.client import ApiError, Client


def cmd_status(args: argparse.Namespace) -> None:
    c = client_from(args)
    here = worktree_view(c, Path(args.dir))
    if here is not None and args.watch is None:
        if args.json:
            emit(args, {"worktree": here, **c.summary(holders=args.holders)})
            return
        print(render_worktree(here) + "\n")
    show(args, lambda: c.summary(holders=args.holders), render_status, status_line)


def worktree_view(c: Client, workdir: Path) -> dict[str, Any] | None:
    """The claim this worktree holds, its subtask as the server has it, and its keeper; None outside one."""
    from mergebot.agent import keeper, worktree
    from mergebot.errors import MergebotError

    try:
        claim = worktree.current_claim(workdir)
    except MergebotError:
        return None
    sub = c.get(f"/api/v1/subtasks/{claim.subtask_id}")["subtask"]
    holds = sub["claim_version"] == claim.claim_version and sub["status"] in ("running", "submitted")
    paths = worktree.changed_paths(workdir) if holds else []
    told = None
    if paths:  # who else touches what this worktree's commits touch (the commit itself, if it was pushed)
        told = c.post(f"/api/v1/subtasks/{claim.subtask_id}/forecast",
                      {"repo": claim.repo, "sha": worktree.head_sha(workdir), "paths": paths})
    return {"subtask": claim.subtask_id, "claim_version": claim.claim_version, "branch": claim.branch,
            "repo": claim.repo, "dir": str(workdir),
            "head": worktree.head_branch(workdir), "status": sub["status"], "current_version": sub["claim_version"],
            "owner": sub["owner"],
            "lease_expires_at": sub["lease_expires_at"], "keeper": keeper.state(workdir),
            "verdict": sub.get("verdict"), "footprint": sub.get("paths") or [],
            "forecast": told["forecast"] if told else None, "forecast_lines": told["lines"] if told else []}


def cmd_queue(args: argparse.Namespace) -> None:
    c = client_from(args)
    show(args, lambda: c.queue_view(repo=args.repo, limit=args.limit, refusals=args.refusals), render_queue,
         queue_line)


def cmd_landed(args: argparse.Namespace) -> None:
    rows = client_from(args).landed(repo=args.repo, owner=args.owner, subtask=args.subtask,
                                    since=args.since.isoformat() if args.since else None, before=args.before,
                                    limit=args.limit)
    table = [{**r, "merged_sha": _short(r.get("merged_sha")), "landed_at": _when(r.get("landed_at"))} for r in rows]
    emit(args, {"landed": rows}, table, ("id", "subtask_id", "owner", "repo", "merged_sha", "verifier_result",
                                         "duration_ms", "main_status", "landed_at"))


def cmd_cost(args: argparse.Namespace) -> None:
    """What landings and agents cost over a window: verifier seconds, pushes per landing, rejections by kind; with
    ``--stages``, where the landings' time went instead."""
    if args.stages:
        got = client_from(args).get("/api/v1/cost/stages", since=args.since.isoformat() if args.since else None,
                                    repo=args.repo)
        if args.json:
            emit(args, got)
            return
        print(f"landings from {_when(got['since'])} to {_when(got['until'])}, seconds per stage:")
        emit(args, got, [{**s, "p50": f"{s['p50']:.3f}", "p95": f"{s['p95']:.3f}"} for s in got["stages"]],
             ("stage", "n", "p50", "p95"))
        return
    out = client_from(args).get("/api/v1/cost", since=args.since.isoformat() if args.since else None,
                                repo=args.repo, limit=args.limit)
    if args.json:
        emit(args, out)
        return
    agents = [{**a, "seconds": f"{a['seconds']:.0f}", "thrown_away": f"{a['thrown_away']:.0f}",
               "per_landing": f"{a['seconds_per_landing']:.0f}" if a["seconds_per_landing"] is not None else "-",
               "pushes_per_landing": f"{a['pushes_per_landing']:.1f}" if a["pushes_per_landing"] else "-",
               "rejections": ", ".join(f"{k} {v}" for k, v in sorted(a["rejections"].items())) or "-"}
              for a in out["agents"]]
    print(f"verifier seconds from {_when(out['since'])} to {_when(out['until'])}: {out['total_seconds']:.0f} in "
          f"{out['runs']} runs; charged to landings {out['charged_to_landings_seconds']:.0f}, thrown away "
          f"{out['thrown_away_seconds']:.0f}, other {out['other_seconds']:.0f}")
    emit(args, out, agents, ("agent", "landings", "pushes", "pushes_per_landing", "rejections", "seconds",
                             "per_landing", "thrown_away"))
    if out.get("checks"):  # named checks: each one's runs and seconds
        print("\nnamed checks:")
        emit(args, out, [{**c, "seconds": f"{c['seconds']:.0f}"} for c in out["checks"]],
             ("repo", "check", "runs", "seconds"))
    landings = out["landings"]  # the costliest first
    if landings:
        print(f"\ncostliest landings ({len(landings)} of {out['landings_total']}):")
        emit(args, out, [{**c, **{k: f"{v:.0f}" for k, v in c["seconds"].items()},
                          "total": f"{c['total_seconds']:.0f}"} for c in landings],
             ("landed_id", "subtask_id", "agent", "total", "landing_run", "rework", "main_check", "runs", "pushes"))


def cmd_tree(args: argparse.Namespace) -> None:
    out = client_from(args).tree(root=args.root, depth=args.depth, limit=args.limit)
    if args.json:
        emit(args, out)
    else:
        print(render_tree(out))


def show(args: argparse.Namespace, fetch: Callable[[], dict[str, Any]], render: Callable[[dict[str, Any]], str],
         line: Callable[[dict[str, Any]], str]) -> None:
    """Print a view once, or with --watch keep it live until Ctrl-C."""
    if args.watch is None:
        data = fetch()
        if args.json:
            emit(args, data)
        else:
            print(render(data))
        return
    if args.json:  # JSON lines: the whole view, once per change
        render = line = _json_line
    with contextlib.suppress(KeyboardInterrupt):
        watch(fetch, render, line, interval=max(0.5, args.watch), out=sys.stdout, stamp=not args.json)


def watch(fetch: Callable[[], dict[str, Any]], render: Callable[[dict[str, Any]], str],
          line: Callable[[dict[str, Any]], str], *, interval: float, out: TextIO, err: TextIO | None = None,
          rounds: int | None = None, sleep: Callable[[float], None] = time.sleep, stamp: bool = True) -> None:
    """The live view: on a terminal, redraw the whole view every ``interval`` seconds; anywhere else (a log, a
    pipe), print one line (timestamped unless ``stamp`` is off, for JSON lines) each time the view's one-line
    summary changes. A server that cannot be reached (or answers 5xx) is reported (off a terminal: once, on
    ``err``) and retried; any other refusal ends the watch."""
    tty, err = out.isatty(), err or sys.stderr
    last: str | None = None
    problem: str | None = None
    n = 0
    while rounds is None or n < rounds:
        n += 1
        now = datetime.now().strftime("%H:%M:%S")
        try:
            data = fetch()
        except (httpx.HTTPError, ApiError) as e:
            if isinstance(e, ApiError) and e.status < 500:
                raise
            text = f"cannot read the view now ({e}); retrying every {interval:g}s"
            if tty:
                out.write(f"{CLEAR}{now}  {text}\n")
            elif text != problem:
                err.write(f"{now} {text}\n")
            problem, last = text, None  # once it answers again, say so even if nothing changed
        else:
            problem = None
            if tty:
                out.write(f"{CLEAR}{now}  every {interval:g}s, Ctrl-C to stop\n\n{render(data)}\n")
            elif (short := line(data)) != last:
                out.write(f"{now} {short}\n" if stamp else f"{short}\n")
                last = short
        out.flush()
        if rounds is None or n < rounds:
            sleep(interval)


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """``--since``: an age (90s, 30m, 2h, 3d, 1w) or an ISO date or time (local time unless it names a zone)."""
    now = now or datetime.now(UTC)
    m = re.fullmatch(r"\s*(\d+)\s*([smhdw])\s*", text)
    if m:
        unit = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}[m.group(2)]
        return now - timedelta(**{unit: int(m.group(1))})
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a time: give an age like 30m, 2h or 3d, or a date like 2024-05-01 or "
            "2024-05-01T14:00") from None
    return when if when.tzinfo is not None else when.astimezone()
