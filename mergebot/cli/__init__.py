"""The ``mergebot`` command line, for people and agents.

Two kinds of commands:
  * local administration, which talks to the database directly (``init``, ``agent``, ``recover``): run it
    on the machine that holds the data directory, or with MERGEBOT_DATABASE_URL;
  * everything an agent or a lead does, which goes through the HTTP API with a token
    (``--server``/MERGEBOT_URL and ``--token``/MERGEBOT_TOKEN), so identity is always the token's.

Every command prints a readable table, or JSON with ``--json``. A refusal prints the server's reason and
exits non-zero (2 for bad input, 3 for "claim superseded", 7 and 8 for a claim held back, 1 otherwise); README's
"Exit codes" lists them all.

The package: ``parser`` assembles the commands; ``admin`` holds the local ones (database, processes),
``agent`` those that go through the API, ``controls`` the queue's controls (retry, cancel, priority, pause,
resume), ``views`` the read views (``--watch``), ``waits`` the waits for subtasks and for one commit's verdict,
``render`` the text. Imports point down that list (``admin``,
``controls``, ``views`` and ``waits`` also take ``client_from`` from ``agent``), never back up, and nothing else in
``mergebot`` imports this package.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from mergebot import messages as say

__all__ = ["main"]

# Claims the server held back (HTTP 429, typed): the lane is over its capacity (exit 7), the agent holds its cap (8).
HELD_BACK = ("capacity", "wip_limit")


def main(argv: Sequence[str] | None = None) -> None:
    """The command line. A Ctrl-C anywhere in it (even among the imports of its first half second, which is why
    they are made here and not at the top) exits 130 with one line, never a traceback."""
    try:
        _main(argv)
    except KeyboardInterrupt as e:  # the one line: what was interrupted, when the command knows it
        with contextlib.suppress(OSError):
            print(f"mergebot: {e.args[0]}" if e.args else say.INTERRUPTED, file=sys.stderr)
        raise SystemExit(130) from None


def _main(argv: Sequence[str] | None) -> None:
    import httpx

    from mergebot.cli.parser import build_parser
    from mergebot.client import ApiError
    from mergebot.errors import MergebotError
    from mergebot.logs import configure_logging

    configure_logging()  # JSON lines unless stderr is a terminal; MERGEBOT_LOG_FORMAT, MERGEBOT_LOG_LEVEL
    args = build_parser(__doc__.split("\n")[0] if __doc__ else None).parse_args(argv)
    try:
        _mark_active(args)
        args.fn(args)
    except ApiError as e:
        if e.code in HELD_BACK:  # a typed "not now": its sentence says what to do; JSON callers get the record
            print(f"mergebot: {e.message}", file=sys.stderr)
            if getattr(args, "json", False):
                import json

                print(json.dumps(e.body.get("error", {}), indent=2, default=str))
            raise SystemExit(7 if e.code == "capacity" else 8) from None
        print(_refused(args, e.status, e.code, e.message), file=sys.stderr)
        raise SystemExit(3 if e.code == "claim_superseded" else 2 if e.status in (400, 413, 422) else 1) from None
    except MergebotError as e:
        print(f"mergebot: {e.message}", file=sys.stderr)
        raise SystemExit(3 if e.code == "claim_superseded" else 2 if e.status in (400, 413, 422) else 1) from None
    except httpx.HTTPError as e:
        from mergebot.cli.agent import server_from

        print(say.cannot_reach_server(server_from(args), e), file=sys.stderr)
        raise SystemExit(1) from None
    except BrokenPipeError:  # the reader went away (`| head`): say nothing more, like any well-behaved filter
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(141) from None
    except OSError as e:
        print(f"mergebot: {e}", file=sys.stderr)
        raise SystemExit(1) from None
    except Exception as e:  # a bug of ours: still a sentence, never a traceback (MERGEBOT_DEBUG=1 shows it)
        if os.environ.get("MERGEBOT_DEBUG"):
            raise
        import psycopg

        if isinstance(e, psycopg.OperationalError):
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            print(f"mergebot: cannot reach the database ({first}); check MERGEBOT_DATABASE_URL, or --data-dir for "
                  "the embedded one", file=sys.stderr)
            raise SystemExit(1) from None
        print(f"mergebot: unexpected error ({type(e).__name__}: {e}); run again with MERGEBOT_DEBUG=1 for the "
              "details, and report it", file=sys.stderr)
        raise SystemExit(1) from None


def _refused(args: argparse.Namespace, status: int, code: str, message: str) -> str:
    """The server's refusal, as a person at the command line reads it: a 401 names the token's variable and
    where a token comes from, not the HTTP header."""
    if status == 401:
        given = getattr(args, "token", None) or os.environ.get("MERGEBOT_TOKEN")
        return say.CLI_BAD_TOKEN if given else say.CLI_NO_TOKEN
    return f"mergebot: refused ({status} {code}): {message}"


def _mark_active(args: argparse.Namespace) -> None:
    """A ``mergebot`` command run in a worktree is a sign of life for its keeper."""
    from mergebot.agent import worktree
    from mergebot.errors import MergebotError

    workdir = Path(getattr(args, "dir", None) or ".")
    try:
        worktree.current_claim(workdir)
    except MergebotError:
        return
    worktree.touch(workdir)
