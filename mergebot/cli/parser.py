"""The argument parser: every command, its flags and help text, and the function it runs (``fn``).

Assembly only: what a command does lives in ``admin``, ``agent`` and ``views``. Every command takes the
common flags (``--json``, ``--data-dir``, ``--server``, ``--token``), whether it uses them or not, except those
that talk to no server: ``init`` and ``serve`` take only what they use.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable
from typing import Any

from mergebot import __version__
from mergebot.auth import Role
from mergebot.cli.admin import (
    cmd_agent_add,
    cmd_agent_link,
    cmd_agent_list,
    cmd_agent_revoke,
    cmd_agent_rotate,
    cmd_demo,
    cmd_drill,
    cmd_init,
    cmd_recover,
    cmd_serve,
    cmd_verifier_worker,
    cmd_verify,
)
from mergebot.cli.agent import (
    cmd_allow,
    cmd_announce,
    cmd_announcements,
    cmd_assign,
    cmd_claim,
    cmd_create,
    cmd_group,
    cmd_guide,
    cmd_handoff,
    cmd_heartbeat,
    cmd_list,
    cmd_mcp,
    cmd_note,
    cmd_notes,
    cmd_reconcile,
    cmd_release,
    cmd_show,
    cmd_start,
    cmd_stop,
    cmd_submit,
)
from mergebot.cli.attest import cmd_attest_rotate, cmd_attest_verify
from mergebot.cli.controls import (
    cmd_approve,
    cmd_cancel,
    cmd_pause,
    cmd_priority,
    cmd_resume,
    cmd_retry,
    cmd_reverify,
)
from mergebot.cli.repoparser import add_repo_commands
from mergebot.cli.views import cmd_cost, cmd_landed, cmd_queue, cmd_status, cmd_tree, parse_since
from mergebot.cli.waits import cmd_wait
from mergebot.client import DEFAULT_URL


def _watch_flag(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--watch", nargs="?", const=2.0, type=float, metavar="SECONDS",
                    help="keep the view live, refreshed every SECONDS (default 2) until Ctrl-C; when output is not "
                    "a terminal, print one line per change")


COMMON = ("json", "data-dir", "server", "token")


def _common_options(p: argparse.ArgumentParser, *, defaults: bool, only: tuple[str, ...] = COMMON) -> None:
    """The options every command takes (``only``: those of them a command uses). Without ``defaults`` an option
    left out leaves the value the top-level parser already set, so they may come before or after the command."""
    kw: dict[str, Any] = {} if defaults else {"default": argparse.SUPPRESS}
    if "json" in only:
        p.add_argument("--json", action="store_true", help="print JSON for machines", **kw)
    p.add_argument("--data-dir", help="data directory (default .mergebot, or MERGEBOT_DATA_DIR)", **kw)
    if "server" in only:
        p.add_argument("--server", help=f"API base URL (default MERGEBOT_URL or {DEFAULT_URL})", **kw)
        p.add_argument("--token", help="agent token (default MERGEBOT_TOKEN)", **kw)


def plain(text: str | None) -> str | None:
    """Help text as a terminal shows it: a docstring's reStructuredText literals (````mergebot````) as plain words."""
    return re.sub(r"``([^`]+)``", r"\1", text) if text else text


def build_parser(description: str | None = None) -> argparse.ArgumentParser:
    """The whole parser; ``description`` is the top-level help's one line (``main`` passes the first line of the
    package's docstring, so the CLI's prose lives in one place; ``plain`` drops its markup)."""
    p = argparse.ArgumentParser(prog="mergebot", description=plain(description))
    p.add_argument("--version", action="version", version=f"mergebot {__version__}")
    _common_options(p, defaults=True)  # before the command (mergebot --json landed) ...
    common = argparse.ArgumentParser(add_help=False)
    _common_options(common, defaults=False)  # ... or after it; given after, it wins
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    # init and serve talk to no server: no --server, no --token (nor --json, which serve never prints)
    init_flags, serve_flags = argparse.ArgumentParser(add_help=False), argparse.ArgumentParser(add_help=False)
    _common_options(init_flags, defaults=False, only=("json", "data-dir"))
    _common_options(serve_flags, defaults=False, only=("data-dir",))

    def add(name: str, fn: Callable[[argparse.Namespace], None], help: str,
            parent: argparse.ArgumentParser = common) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, parents=[parent], help=help, description=help)
        sp.set_defaults(fn=fn)
        return sp

    sp = add("init", cmd_init, "create the data directory and database, and an admin agent (token shown once)",
             init_flags)
    sp.add_argument("--admin", default="admin")
    sp = add("serve", cmd_serve, "run the server (API, waiter, recovery loop)", serve_flags)
    sp.add_argument("--host", help="the address to listen on (default 127.0.0.1, this machine only; or "
                    "MERGEBOT_HOST; 0.0.0.0 for every interface)")
    sp.add_argument("--port", type=int, help="the port to listen on (default 8470, or MERGEBOT_PORT); agents find "
                    "it through MERGEBOT_URL")
    add("demo", cmd_demo, "start a server on the embedded database and let four simulated agents work a tree "
                          "(a temporary data directory, removed after; --data-dir keeps one)")

    agent = sub.add_parser("agent", help="manage agents (local database)").add_subparsers(
        dest="agent_command", required=True, metavar="ACTION")
    sp = agent.add_parser("add", parents=[common], help="add an agent and print its token once")
    sp.add_argument("name")
    sp.add_argument("--role", default="agent", choices=[r.value for r in Role])
    sp.set_defaults(fn=cmd_agent_add)
    sp = agent.add_parser("list", parents=[common], help="list agents")
    sp.set_defaults(fn=cmd_agent_list)
    sp = agent.add_parser("revoke", parents=[common], help="revoke an agent's token")
    sp.add_argument("name")
    sp.set_defaults(fn=cmd_agent_revoke)
    sp = agent.add_parser("rotate", parents=[common], help="issue a new token (the old one stops working)")
    sp.add_argument("name")
    sp.set_defaults(fn=cmd_agent_rotate)
    sp = agent.add_parser("link", parents=[common], help="let a forge login act as this agent (webhook pushes)")
    sp.add_argument("name")
    who = sp.add_mutually_exclusive_group(required=True)
    who.add_argument("--github", metavar="LOGIN")
    who.add_argument("--gitea", metavar="LOGIN")
    who.add_argument("--forgejo", metavar="LOGIN")
    sp.add_argument("--unlink", action="store_true", help="remove the link instead")
    sp.set_defaults(fn=cmd_agent_link)
    add("recover", cmd_recover, "hand back subtasks whose lease expired (the server does this on its own)")

    add_repo_commands(sub, common)

    verifier = sub.add_parser("verifier", help="verifier workers").add_subparsers(
        dest="verifier_command", required=True, metavar="ACTION")
    sp = verifier.add_parser("worker", parents=[common], help="claim and run verify jobs from a bot over HTTP "
                             "(a verifier token)")
    sp.add_argument("--slots", type=int, default=1, help="jobs run at once, each with its own reused checkout")
    sp.add_argument("--work-dir", default=".mergebot-verifier", dest="work_dir")
    sp.add_argument("--sandbox", default=os.environ.get("MERGEBOT_SANDBOX") or "bwrap",
                    choices=["auto", "bwrap", "none"], help="bwrap (default: checks are refused without it) or none "
                    "(the whole machine in view; $MERGEBOT_SANDBOX)")
    sp.add_argument("--heartbeat", type=float, default=10.0, help="seconds between lease renewals")
    sp.add_argument("--once", action="store_true", help="run at most one job per slot, then exit")
    sp.set_defaults(fn=cmd_verifier_worker)
    sp = add("verify", cmd_verify, "run a repository's check on one commit by hand and print the record")
    sp.add_argument("sha", nargs="?", help="the commit (not needed with --explain-sandbox)")
    sp.add_argument("--repo", required=True)
    sp.add_argument("--command", help="default: the repository's configured check")
    sp.add_argument("--timeout", type=int)
    sp.add_argument("--sandbox", default=os.environ.get("MERGEBOT_SANDBOX") or "bwrap",
                    choices=["auto", "bwrap", "none"])
    sp.add_argument("--explain-sandbox", action="store_true", dest="explain_sandbox",
                    help="print what the repository's check sees of this machine and how each limit is enforced; "
                    "run nothing")
    sp.add_argument("--cache", action="store_true", help="with the repository's cache, read-only: for a landed commit "
                    "the generation its deciding run read, else the newest; without it the run is cold")
    add("reconcile", cmd_reconcile, "make main and the landed records agree, and report what does not (admin)")
    from mergebot.drill import add_arguments as drill_arguments

    drill_arguments(add("drill", cmd_drill, "failure drills against a running server (admin token; they land "
                        "commits: use a scratch repository), then the invariant check; --check-only: just the check"))
    sp = add("queue", cmd_queue, "the merge queue: what is verified now, what waits (in landing order), the "
             "speculation window, and recent refusals with their reasons")
    sp.add_argument("--repo")
    sp.add_argument("--limit", type=int, default=50, help="at most this many verifying and waiting rows")
    sp.add_argument("--refusals", type=int, default=10, help="how many recent refusals to show")
    _watch_flag(sp)

    sp = add("start", cmd_start, "claim a subtask and prepare a git worktree on the branch the claim names; a "
             "keeper then keeps the claim alive while you work")
    sp.add_argument("--repo", required=True)
    sp.add_argument("--dir", default=".", help="the worktree (created by cloning if missing)")
    sp.add_argument("--carry", action="store_true", help="the worktree's commits not on main go onto the new "
                    "claim's branch (without it, start refuses to switch branches under them)")
    sp.add_argument("--wait", type=float, default=0.0, metavar="SECONDS",
                    help="wait up to SECONDS (at most 60) for work when nothing is ready")
    sp.add_argument("--touch", action="append", metavar="PATH", help="a path or glob you expect to touch "
                    "(repeatable): it joins the subtask's footprint, and the answer names who else may touch it")
    sp.add_argument("--no-keeper", action="store_true", dest="no_keeper",
                    help="leave no keeper: renew the lease yourself (`mergebot heartbeat`)")
    add("guide", cmd_guide, "print the guide for agents: the loop, every verdict kind and what to do about it")
    add("mcp", cmd_mcp, "serve the agent commands as Model Context Protocol tools over stdio (the token's identity)")
    sp = add("stop", cmd_stop, "stop the worktree's keeper: the claim is no longer renewed")
    sp.add_argument("--dir", default=".")
    sp = add("handoff", cmd_handoff, "leave a structured note for the next owner of your subtask")
    sp.add_argument("--dir", default=".")
    sp.add_argument("--done")
    sp.add_argument("--remains")
    sp.add_argument("--tried", action="append", help="a failed attempt: the command and what happened")
    sp.add_argument("--check", action="append", help="a check you ran and its result")

    sp = add("create", cmd_create, "create a subtask, or a whole tree with --file tree.yaml")
    sp.add_argument("title", nargs="?")
    sp.add_argument("--file", help="JSON or YAML task tree (keys, children, depends_on)")
    sp.add_argument("--description")
    sp.add_argument("--priority", type=int, default=0)
    sp.add_argument("--depends-on", type=int, nargs="*", dest="depends_on")
    sp.add_argument("--group")
    sp.add_argument("--parent", type=int)
    sp.add_argument("--max-attempts", type=int, dest="max_attempts")
    sp.add_argument("--key", help="idempotency key (with --file: the prefix of each node's key)")
    sp.add_argument("--paths", nargs="*", metavar="GLOB", help="its footprint: the paths it is expected to touch")
    sp.add_argument("--allow-duplicate", action="store_true", dest="allow_duplicate",
                    help="create it even if it nearly matches an open subtask (it is distinct work)")
    sp.add_argument("--accept", action="append", metavar="LOCAL_FILE:REPO_PATH",
                    help="an acceptance test (lead or admin; repeatable; `accept:` in a tree file): written into "
                    "every merge of the subtask at REPO_PATH, it must pass, and it runs once on main now")
    sp.add_argument("--repo", help="the repository the acceptance tests are for (when there is more than one)")
    sp = add("claim", cmd_claim, "claim the best ready subtask (optionally completing the current one)")
    sp.add_argument("--complete", type=int, metavar="ID", help="submit this subtask first, fenced")
    sp.add_argument("--version", type=int, help="claim version of --complete")
    sp.add_argument("--sha", help="commit of --complete")
    sp.add_argument("--wait", type=float, default=0.0, metavar="SECONDS",
                    help="wait up to SECONDS (at most 60) for work when nothing is ready")
    sp.add_argument("--repo", help="the repository you will push the work to: admission control admits the claim "
                    "when its queue has room (without it, when any repository's has)")
    for name, fn, text in (("heartbeat", cmd_heartbeat, "renew your lease"),
                           ("release", cmd_release, "give a subtask back")):
        sp = add(name, fn, text)
        sp.add_argument("id", type=int)
        sp.add_argument("--version", type=int, required=True, help="your claim version")
        if name == "release":
            sp.add_argument("--reason")
    sp = add("submit", cmd_submit, "in a worktree from `mergebot start`: push HEAD and wait for the verdict; "
             "with ID --version: mark a subtask without code done through the API")
    sp.add_argument("id", type=int, nargs="?")
    sp.add_argument("--version", type=int, help="your claim version (with ID)")
    sp.add_argument("--sha", help="the commit (with ID)")
    sp.add_argument("--dir", default=".", help="the worktree (without ID)")
    sp.add_argument("--timeout", type=float, default=3600.0)
    sp.add_argument("--again", action="store_true", help="queue the branch's current tip once more, without a new "
                    "commit (after a flaky failure, or when main moved)")
    sp = add("note", cmd_note, "leave a note (on a subtask you own with --id/--version, or on the board)")
    sp.add_argument("body")
    sp.add_argument("--id", type=int)
    sp.add_argument("--version", type=int)
    sp.add_argument("--group")
    sp = add("notes", cmd_notes, "read notes")
    sp.add_argument("--id", type=int)
    sp.add_argument("--group")
    sp = add("announce", cmd_announce, "broadcast to every agent (lead)")
    sp.add_argument("body")
    add("announcements", cmd_announcements, "read announcements")
    sp = add("assign", cmd_assign, "put an agent in a group (lead)")
    sp.add_argument("agent")
    sp.add_argument("group")
    sp.add_argument("--group-role", default="helper", choices=["helper", "leader"], dest="group_role")
    sp = add("group", cmd_group, "describe a group, or open it so its members roam (lead)")
    sp.add_argument("name")
    sp.add_argument("open", nargs="?", choices=["open", "close"])
    sp.add_argument("--description")
    sp = add("list", cmd_list, "list subtasks")
    sp.add_argument("--status")
    sp.add_argument("--group")
    sp.add_argument("--after", type=int, default=0)
    sp.add_argument("--limit", type=int, default=100)
    sp = add("show", cmd_show, "one subtask and its event log")
    sp.add_argument("id", type=int)
    sp = add("status", cmd_status, "in a worktree: its claim and keeper; then subtasks by status, queue depth per "
             "repository, agents holding claims")
    sp.add_argument("--holders", type=int, default=20, help="list at most this many agents holding claims")
    sp.add_argument("--dir", default=".", help="the worktree to report on, if it is one")
    _watch_flag(sp)
    sp = add("landed", cmd_landed, "what landed, newest first")
    sp.add_argument("--repo")
    sp.add_argument("--agent", "--owner", dest="owner", help="landed by this agent")
    sp.add_argument("--subtask", type=int)
    sp.add_argument("--since", type=parse_since, help="landed at or after: an age (30m, 2h, 3d, 1w) or a date or "
                    "time (2024-05-01, 2024-05-01T14:00; local time unless a zone is given)")
    sp.add_argument("--before", type=int, metavar="ID", help="only rows older than this landed id (paging)")
    sp.add_argument("--limit", type=int, default=50)
    sp = add("cost", cmd_cost, "what landings and agents cost: verifier seconds (a landing's runs, its share of "
             "a batch's, the rework on the way, main's checks), pushes per landing, rejections by kind")
    sp.add_argument("--repo")
    sp.add_argument("--since", type=parse_since, help="from: an age (30m, 2h, 3d, 1w) or a date or time "
                    "(default: the last day)")
    sp.add_argument("--limit", type=int, default=10, help="list at most this many of the costliest landings")
    sp.add_argument("--stages", action="store_true", help="where the landings' time went instead: each stage from "
                    "the push to the landed row (medians and 95th percentiles)")
    sp = add("tree", cmd_tree, "the task tree: indentation, status, owner, unlanded dependencies, progress below")
    sp.add_argument("--root", type=int, metavar="ID", help="start at this subtask (default: every root)")
    sp.add_argument("--depth", type=int, default=3, help="levels below the root to show (default 3)")
    sp.add_argument("--limit", type=int, default=500, help="at most this many nodes (default 500, up to 5000)")
    sp = add("allow", cmd_allow, "allow a subtask what its owner may not decide (lead or admin): --test-removal lets "
             "its change delete tests that pass on main, --check-changes lets it change the check's configuration")
    sp.add_argument("id", type=int)
    sp.add_argument("--test-removal", action=argparse.BooleanOptionalAction, dest="test_removal")
    sp.add_argument("--check-changes", action=argparse.BooleanOptionalAction, dest="check_changes",
                    help="let its change touch what configures the check (conftest.py, pytest.ini, ...)")
    sp.add_argument("--behaviour-change", action=argparse.BooleanOptionalAction, dest="behaviour_change",
                    help="mark it as changing behaviour: its edits of existing tests are expected (--old-tests refuse "
                    "lets them land)")
    attest = sub.add_parser("attest", help="signed landing statements").add_subparsers(
        dest="attest_command", required=True, metavar="ACTION")
    sp = attest.add_parser("verify", parents=[common], help="check that every commit of main's first-parent history "
                           "has one landing statement signed by a trusted key, and that main never went backwards "
                           "(exit 1 naming each commit that fails)")
    sp.add_argument("--repo", help="the repository (on the server: its bare repository and rules)")
    sp.add_argument("--since", metavar="SHA", help="check the commits after this one (default: where the bot "
                    "took the repository)")
    sp.add_argument("--git-dir", dest="git_dir", metavar="DIR", help="a plain clone instead of the server's "
                    "repository (fetch the notes first: git fetch origin refs/notes/mergebot:refs/notes/mergebot)")
    sp.add_argument("--trust", metavar="FILE", help="the trust file the operators publish (on the server: "
                    "DATA_DIR/attest/trust.json)")
    sp.add_argument("--ref", help="the branch to check (default: the repository's target branch; in a clone "
                    "refs/heads/main, else refs/remotes/origin/main)")
    sp.set_defaults(fn=cmd_attest_verify)
    sp = attest.add_parser("rotate", parents=[common], help="a new signing key for this data directory: the trust "
                           "file gains a version, signed by the key it replaces, that starts the new key and ends "
                           "the old one now")
    sp.set_defaults(fn=cmd_attest_rotate)
    _control_commands(add)
    sp = add("wait", cmd_wait, "wait until subtasks are landed, failed or cancelled; with --commit (or no ID, in "
             "the worktree of your claim: its HEAD), until that exact commit has its verdict")
    sp.add_argument("ids", type=int, nargs="*")
    sp.add_argument("--timeout", type=float, default=3600.0)
    sp.add_argument("--commit", metavar="SHA", help="wait for this commit's verdict (its full sha, or 7 or more of "
                    "its first hex digits); with no ID, of the worktree's claim")
    sp.add_argument("--dir", default=".", help="the worktree of your claim (with no ID, or --commit without ID)")
    return p


def _control_commands(add: Callable[[str, Callable[[argparse.Namespace], None], str], argparse.ArgumentParser]
                      ) -> None:
    """The queue's controls (``controls``): what a lead or admin does to a subtask, and an admin to a repository."""
    for name, fn, text in (("retry", cmd_retry, "give a failed subtask another round: ready again, its attempts "
                            "counted from zero (lead or admin; the owner re-queues its push with `submit --again`)"),
                           ("cancel", cmd_cancel, "cancel a subtask that has not landed: its claim ends and it is "
                            "never claimed again (lead or admin)")):
        sp = add(name, fn, text)
        sp.add_argument("id", type=int, metavar="SUBTASK", help="the subtask's id")
        sp.add_argument("--reason", help="why, recorded on the subtask (default: the command's name)")
    sp = add("priority", cmd_priority, "set a subtask's priority and its waiting candidates': the queue takes "
             "higher first (lead or admin)")
    sp.add_argument("id", type=int, metavar="SUBTASK", help="the subtask's id")
    sp.add_argument("level", type=int, metavar="LEVEL", help="a whole number from -1000 to 1000 (a new subtask has 0)")
    sp = add("approve", cmd_approve, "approve a candidate's exact commit where the repository requires an approval: "
             "one waiting (awaiting_approval) goes back to the queue and lands (lead, reviewer or admin)")
    sp.add_argument("candidate", type=int, metavar="CANDIDATE", help="the candidate's id (its verdict names it)")
    sp = add("reverify", cmd_reverify, "run a landed record's check again on the same commit, command, configuration "
             "and sandbox (and the held-out checks), and compare each test's outcome with the record: reproduced, "
             "flaky_only or diverged, signed (lead, reviewer or admin)")
    sp.add_argument("landed", type=int, metavar="LANDED", help="the landed record's id (`mergebot landed` lists them)")
    sp.add_argument("--wait", action="store_true",
                    help="wait for the result (exit 6 when it diverged, 1 when it could not run, 4 out of time)")
    sp.add_argument("--timeout", type=float, default=1800.0, help="how long --wait waits, in seconds")
    sp = add("pause", cmd_pause, "hold landing on a repository: pushes still queue, nothing is verified or lands "
             "until `mergebot resume` (admin)")
    sp.add_argument("--repo", required=True, help="the repository")
    sp.add_argument("--reason", help="why, shown on the queue's view and pages with who paused it")
    sp = add("resume", cmd_resume, "resume landing on a repository: parked candidates go back to the queue (admin)")
    sp.add_argument("--repo", required=True, help="the repository")
