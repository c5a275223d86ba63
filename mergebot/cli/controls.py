"""The queue's controls, for leads and admins, each one request to the API as the token's agent (the server
decides who may): ``retry``, ``cancel`` and ``priority`` of a subtask (a lead or admin; what ``@mergebot retry``,
``cancel`` and ``priority N`` do in a pull request's comment), ``pause`` and ``resume`` of a repository's landing (an
admin), ``approve`` of a candidate (a lead, reviewer or admin; ``@mergebot approve``), and ``reverify`` of a landed
record (a lead, reviewer or admin). A refusal is an
``ApiError`` for ``main`` to print, with its exit code (see README's table of them).
"""

from __future__ import annotations

import argparse
import time

from mergebot import messages as say
from mergebot.cli.agent import client_from
from mergebot.cli.render import emit

REVERIFY_POLL = 1.0  # seconds between looks at a re-verification's result (``reverify --wait``)
SHOWN = 50  # differing tests printed by name


def cmd_retry(args: argparse.Namespace) -> None:
    out = client_from(args).post(f"/api/v1/subtasks/{args.id}/retry",
                                 {"reason": args.reason or say.by_command_line("retry")})
    _said(args, out, out["message"] if out.get("already") else say.another_round(args.id))


def cmd_cancel(args: argparse.Namespace) -> None:
    out = client_from(args).post(f"/api/v1/subtasks/{args.id}/cancel",
                                 {"reason": args.reason or say.by_command_line("cancel")})
    _said(args, out, say.cancelled(args.id))


def cmd_priority(args: argparse.Namespace) -> None:
    out = client_from(args).post(f"/api/v1/subtasks/{args.id}/priority", {"priority": args.level})
    _said(args, out, say.priority_set(args.id, args.level, out["candidates_moved"]))


def cmd_pause(args: argparse.Namespace) -> None:
    out = client_from(args).post(f"/api/v1/repos/{args.repo}/pause", {"reason": args.reason} if args.reason else None)
    _said(args, out, say.landing_paused(args.repo, out["repo"].get("paused_reason")))


def cmd_resume(args: argparse.Namespace) -> None:
    out = client_from(args).post(f"/api/v1/repos/{args.repo}/resume")
    _said(args, out, say.landing_resumed(args.repo))


def cmd_approve(args: argparse.Namespace) -> None:
    out = client_from(args).post(f"/api/v1/candidates/{args.candidate}/approve")
    _said(args, out, say.approved(out["candidate"]["id"], out["candidate"]["sha"]))


def cmd_reverify(args: argparse.Namespace) -> None:
    """Start a re-verification (or join the one running); with ``--wait``, poll for its signed result."""
    client = client_from(args)
    out = client.post(f"/api/v1/landed/{args.landed}/reverify")
    job = out["job"]
    if not args.wait:
        _said(args, out, say.reverify_started(args.landed, job["id"], job["commit_sha"]))
        return
    deadline = time.monotonic() + args.timeout
    while True:
        out = client.get(f"/api/v1/landed/{args.landed}/reverify")
        result = out.get("result")
        if result is not None and result.get("job_id") == job["id"]:
            break
        if time.monotonic() > deadline:
            print(say.reverify_still_running(args.landed, job["id"]))
            raise SystemExit(4)
        time.sleep(REVERIFY_POLL)
    p = result["predicate"]
    _said(args, out, say.reverify_result(args.landed, p["outcome"], [d["id"] for d in p["differing"][:SHOWN]],
                                         int(p["differingCount"])))
    if p["outcome"] in ("diverged", "error"):
        raise SystemExit(6 if p["outcome"] == "diverged" else 1)


def _said(args: argparse.Namespace, out: object, sentence: str) -> None:
    """The API's answer with ``--json``, else the sentence."""
    if args.json:
        emit(args, out)
    else:
        print(sentence)
