"""Waiting, through the HTTP API's long polls: ``mergebot wait ID...`` until subtasks are landed, failed or cancelled;
``mergebot wait [ID] --commit SHA`` (or no ID in a claim's worktree: its HEAD) until exactly that commit has its
verdict. Exit 4 when the wait ends first.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from mergebot import messages as say
from mergebot.cli.agent import client_from
from mergebot.cli.render import emit
from mergebot.errors import MergebotError


def cmd_wait(args: argparse.Namespace) -> None:
    """Wait (long-polling the server) until every id is landed, failed or cancelled; with ``--commit``, or with no
    id in a claim's worktree, until that commit (default: the worktree's HEAD) has its verdict."""
    if args.commit or not args.ids:
        cmd_wait_commit(args)
        return
    c = client_from(args)
    deadline = time.monotonic() + args.timeout
    last: dict[str, str] = {}
    while True:
        left = max(0.0, deadline - time.monotonic())
        out = c.post("/api/v1/subtasks/wait", {"ids": args.ids, "timeout": min(30.0, left)})
        if out["statuses"] != last and not args.json:
            done = sum(1 for s in out["statuses"].values() if s in ("landed", "failed", "cancelled"))
            print(say.wait_progress(done, len(args.ids), out["statuses"]), file=sys.stderr)
        last = out["statuses"]
        if out["done"] or left <= 0:
            break
    if args.json:
        emit(args, out)
    else:
        print(say.wait_verdict(out["done"], out["statuses"], args.timeout))
    if not out["done"]:
        raise SystemExit(4)


def cmd_wait_commit(args: argparse.Namespace) -> None:
    """``mergebot wait [ID] --commit SHA``: the verdict of exactly that commit of the subtask (the worktree's claim
    and HEAD when not given), never a newer or older push's; exit 4 when the wait ends first."""
    from mergebot.agent.submit import wait_commit
    from mergebot.agent.worktree import current_claim, head_sha

    if len(args.ids) > 1:
        raise SystemExit(say.WAIT_COMMIT_ONE_ID)
    if args.ids:  # with --commit: that subtask, that commit
        subtask_id, sha = args.ids[0], args.commit
    else:  # the worktree's claim, and its HEAD unless --commit names another commit
        try:
            claim = current_claim(Path(args.dir))
        except MergebotError:
            raise SystemExit(say.WAIT_NEEDS_WHAT) from None
        subtask_id, sha = claim.subtask_id, args.commit or head_sha(Path(args.dir))
    out = wait_commit(client_from(args), subtask_id, sha, wait=args.timeout, progress=not args.json)
    if args.json:
        emit(args, out)
    elif out["done"]:
        verdict = out["verdict"] or {}
        print(f"{verdict.get('kind') or out['status']}: {verdict.get('message') or ''}".rstrip())
        if verdict.get("next"):
            print(say.push_next(verdict["next"]))
    else:
        print(say.commit_not_decided(args.timeout, subtask_id, out["sha"], out["status"]), file=sys.stderr)
    if not out["done"]:
        raise SystemExit(4)
