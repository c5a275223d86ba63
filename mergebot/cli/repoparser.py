"""The ``repo`` commands' arguments: adding a repository, changing its landing rules, listing, pausing.

Assembly only, like ``mergebot.cli.parser`` (which calls ``add_repo_commands``): what each does is in ``admin``
and ``agent``.
"""

from __future__ import annotations

import argparse
import re
from typing import Any

from mergebot import messages as say
from mergebot.cli.agent import cmd_repo_hold, cmd_repo_list
from mergebot.cli.repos import cmd_repo_add, cmd_repo_set

RISK_HELP = ("order and batch the queue by each candidate's estimated failure probability: the safer of two equal "
             "candidates first, likely passes batched together, a likely failure run alone, a failed batch's likeliest "
             "culprit left out (on by default)")
UNION_HELP = ("a file whose conflicts the bot's merge resolves by union, keeping both sides' lines (a changelog), "
              "besides the files the target branch's own .gitattributes mark merge=union; never by a candidate's "
              ".gitattributes; a glob without '/' matches in any folder")


def disk_size(text: str) -> int:
    """A size in MiB: ``2048``, ``512M``, ``4G`` (or ``4GiB``)."""
    m = re.fullmatch(r"\s*(\d+)\s*([MG])?(?:i?B)?\s*", text, re.IGNORECASE)
    if m is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size: give MiB (2048), or 512M, 4G")
    n = int(m.group(1))
    return n * 1024 if (m.group(2) or "M").upper() == "G" else n


def queue_number(text: str) -> int | str:
    """A queue rule's number (``--window``, ``--batch``), or ``default``: the server's again (``repo set``)."""
    if text.strip() == "default":
        return "default"
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number (or default: the server's)") from None


def queue_flags(sp: argparse.ArgumentParser) -> None:
    """The queue rules' flags, the same for ``repo add`` and ``repo set`` (not given: the server's default)."""
    sp.add_argument("--window", type=queue_number, metavar="N", help="speculation: candidates verified at once, "
                    "each on top of the ones ahead (0: as wide as the verifier slots; 1 with --batch 1: one at a "
                    "time; default: the server's MERGEBOT_SPECULATION_WINDOW)")
    sp.add_argument("--batch", type=queue_number, metavar="N", help="the most candidates one run may cover "
                    "(default: the server's MERGEBOT_BATCH_SIZE)")
    sp.add_argument("--retry-failures", action=argparse.BooleanOptionalAction, dest="retry_failures",
                    help="whether a failed check runs once more on the same commit before it counts (default: the "
                    "server's MERGEBOT_RETRY_FAILED_CHECKS)")
    sp.add_argument("--merge-method", dest="merge_method", metavar="merge|squash",
                    help="how a landing reaches the target branch: merge (a merge commit that keeps the branch's "
                    "commits, the default) or squash (one commit per landing: the subtask's title and description "
                    "with trailers naming subtask, claim version, candidate and branch tip); either way it is the "
                    "commit the check passed on")
    sp.add_argument("--require-approval", nargs="*", metavar="GLOB", dest="require_approval",
                    help="a candidate that passed its checks waits (awaiting_approval) until a lead, a reviewer or an "
                    "admin approves its exact commit (`mergebot approve CANDIDATE`, `@mergebot approve`, an approving "
                    "review): every change, or with globs only changes touching those paths (replaces them)")
    sp.add_argument("--on-unattested", choices=["flag", "pause"], dest="on_unattested",
                    help="a move of the target branch that no landing statement explains (a push around the bot): "
                    "a finding on /healthz, the queue page and /metrics (flag, the default), or that and the queue "
                    "paused until an admin resumes it (pause)")


def named_check(required: bool) -> Any:
    """``--check NAME=COMMAND`` (``--optional-check``): one named check's record (``mergebot.rules.check_checks``
    checks the name and the command)."""

    def parse(text: str) -> dict[str, Any]:
        name, eq, command = text.partition("=")
        if not eq or not name.strip() or not command.strip():
            raise argparse.ArgumentTypeError(say.check_option_malformed(text))
        return {"name": name.strip(), "command": command, "required": required}

    return parse


def check_rule(option: str, number: bool = False) -> Any:
    """``--check-timeout NAME=SECONDS`` and its kin: (the check's name, the value), for a check given by ``--check``
    in the same command or already on the repository (``cli.repos.with_check_rules``)."""

    def parse(text: str) -> tuple[str, Any]:
        name, eq, value = text.partition("=")
        if not eq or not name.strip() or not value.strip() or (number and not value.strip().isdigit()):
            raise argparse.ArgumentTypeError(say.check_rule_malformed(option, text))
        return name.strip(), int(value) if number else value

    return parse


def check_flags(sp: argparse.ArgumentParser) -> None:
    """Named checks (issue 43), the same for ``repo add`` and ``repo set``: in the order given, run in parallel."""
    sp.add_argument("--check", action="append", type=named_check(True), dest="checks", metavar="NAME=COMMAND",
                    help="a named check, required to pass (repeatable, replaces the named checks): each runs on its "
                    "own verifier slot, at the same time as the others, with the repository's setup, caches, "
                    "report and --timeout unless --check-setup, --check-cache, --check-report or --check-timeout "
                    "give it its own; the first one also runs the change's own tests")
    sp.add_argument("--optional-check", action="append", type=named_check(False), dest="checks",
                    metavar="NAME=COMMAND", help="a named check whose failure is shown but does not block (repeatable)")
    sp.add_argument("--check-timeout", action="append", type=check_rule("--check-timeout", True),
                    metavar="NAME=SECONDS", help="that named check's own time limit (default: --timeout)")
    sp.add_argument("--check-setup", action="append", type=check_rule("--check-setup"), metavar="NAME=COMMAND",
                    help="that named check's own setup, run before it instead of --setup")
    sp.add_argument("--check-cache", action="append", type=check_rule("--check-cache"), metavar="NAME=PATH",
                    help="a cache path of that named check's own (repeatable; replaces --cache for it)")
    sp.add_argument("--check-report", action="append", type=check_rule("--check-report"),
                    metavar="NAME=pytest|junit:PATH", help="where that named check's tests report (default: --report)")


def judge_flags(sp: argparse.ArgumentParser) -> None:
    """How a candidate is judged beyond its check: the same flags for ``repo add`` and ``repo set``."""
    sp.add_argument("--held-out", metavar="DIR", dest="held_out",
                    help="held-out checks: the tests in DIR, stored by the bot, never shown to an agent, run on every "
                    "candidate that passed its check (replaces them)")
    sp.add_argument("--old-tests", choices=["flag", "refuse", "run"], dest="old_tests",
                    help="a candidate that edits existing tests: named on its verdict and landed record (flag, the "
                    "default; main's version of every test file judges its code either way, so run is the same), "
                    "or refused (tests_changed) unless a lead marked its subtask as changing behaviour")
    sp.add_argument("--tests", action="append", metavar="GLOB", dest="test_paths",
                    help="the test paths a judging run takes from main (replaces them; repeatable; default test_*.py "
                    "*_test.py tests/ test/ conftest.py: a glob ending in / names a folder anywhere)")
    sp.add_argument("--suspicious", choices=["flag", "refuse"],
                    help="non-test code that reaches into the test machinery (the tamper signal): named on the "
                    "verdict and the candidate's page (flag, the default), or refused at push")
    sp.add_argument("--held-out-command", dest="held_out_command", metavar="COMMAND",
                    help="how the held-out checks run (default: python -m pytest -q -p no:cacheprovider "
                    "\"$VERIFIER_HELD_OUT\"; $VERIFIER_HELD_OUT is their read-only directory)")
    queue_flags(sp)
    check_flags(sp)


def add_repo_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    """``mergebot repo add|set|list|pause|resume`` on the top-level subparsers ``sub``."""
    repo = sub.add_parser("repo", help="managed repositories").add_subparsers(
        dest="repo_command", required=True, metavar="ACTION")
    sp = repo.add_parser("add", parents=[common], help="create or import a bare repository with its landing rules")
    sp.add_argument("name")
    sp.add_argument("--from", dest="source", help="import from a path or URL (default: a new, empty repository)")
    sp.add_argument("--verifier", help="the check run on every merged commit, e.g. 'python -m pytest' (or named "
                    "checks: --check NAME=COMMAND)")
    sp.add_argument("--timeout", type=int, help="the check's time limit in seconds (default 600)")
    sp.add_argument("--target", help="the branch Mergebot lands into (default main)")
    sp.add_argument("--protect", action="append", help="a path pattern agents may not change (repeatable; "
                    "'dir/' protects a folder)")
    sp.add_argument("--cache", action="append", metavar="PATH", help="a cache path inside the checkout the check "
                    "keeps warm (repeatable: .venv, .mypy_cache); written only by runs on main, read-only to others")
    sp.add_argument("--cache-key", action="append", metavar="FILE", dest="cache_key",
                    help="a file whose content keys the caches (repeatable: a lockfile); a change starts afresh")
    sp.add_argument("--setup", metavar="COMMAND", help="run before the check in the same checkout (installing "
                    "dependencies into a --cache path, building); offline unless --setup-network")
    sp.add_argument("--setup-network", action="store_true", dest="setup_network",
                    help="let the setup use the network, on commits already on main only (never a candidate's)")
    sp.add_argument("--footprint-refuse", action="store_true", dest="footprint_refuse",
                    help="refuse a push that changes paths outside its subtask's footprint (else: a warning)")
    sp.add_argument("--post-land-check", dest="post_land", metavar="COMMAND", help="the check run on main after "
                    "each landing, and to find the culprit when main turns red (default: --verifier; e.g. the full "
                    "suite while --verifier runs the quick one)")
    sp.add_argument("--sandbox-path", action="append", metavar="PATH", dest="sandbox_path",
                    help="a directory or file the check may read, read-only (repeatable): a toolchain outside the "
                    "usual places, e.g. a pyenv version or a node install (`mergebot verify --explain-sandbox`)")
    sp.add_argument("--disk-limit", type=disk_size, dest="disk_limit", metavar="SIZE",
                    help="what one run may write in all: its checkout's changes, /tmp, /dev/shm (MiB, or 512M, "
                    "4G; default 2G)")
    sp.add_argument("--memory-limit", type=disk_size, dest="memory_limit", metavar="SIZE",
                    help="the memory one run may use: resident in all, and address space per process (MiB, or 4G; "
                    "default 4G)")
    sp.add_argument("--report", metavar="pytest|junit:PATH",
                    help="where the check's tests report each outcome: our pytest plugin (default; any pytest the "
                    "check runs loads it), or a JUnit XML file the check leaves at PATH (other runners)")
    sp.add_argument("--check-config", action="append", metavar="GLOB", dest="check_config",
                    help="a file that configures the check, which a push may change only when a lead allowed it "
                    "(repeatable; replaces the default conftest.py, pytest.ini, tox.ini, noxfile.py; a glob without "
                    "'/' matches in any folder; setup.cfg's and pyproject.toml's pytest sections and the files the "
                    "command names always count)")
    sp.add_argument("--union", action="append", metavar="GLOB", dest="union",
                    help=UNION_HELP + " (repeatable)")
    sp.add_argument("--risk", choices=["on", "off"], help=RISK_HELP)
    judge_flags(sp)
    sp.add_argument("--max-push-bytes", type=int, dest="max_push_bytes")
    sp.add_argument("--max-file-bytes", type=int, dest="max_file_bytes")
    sp.add_argument("--github", nargs=1, metavar="OWNER/REPO", help="a GitHub repository: webhooks in, statuses "
                    "and merges out (token from $GITHUB_TOKEN, webhook secret from $MERGEBOT_WEBHOOK_SECRET)")
    sp.add_argument("--gitea", nargs=2, metavar=("URL", "OWNER/REPO"), help="a Gitea repository ($GITEA_TOKEN)")
    sp.add_argument("--forgejo", nargs=2, metavar=("URL", "OWNER/REPO"), help="a Forgejo repository ($GITEA_TOKEN)")
    sp.add_argument("--forge-url", dest="forge_url", help="GitHub Enterprise's URL (default https://github.com)")
    sp.add_argument("--api-url", dest="api_url", help="the forge's API URL, if not the default for the forge")
    sp.add_argument("--git-url", dest="git_url", help="where to fetch and push, if not URL/OWNER/REPO.git")
    sp.add_argument("--secret-env", dest="secret_env", default="MERGEBOT_WEBHOOK_SECRET",
                    help="the environment variable holding the webhook secret")
    sp.add_argument("--token-env", dest="token_env", help="the environment variable holding the forge API token")
    sp.add_argument("--github-app-id", dest="github_app_id", type=int, metavar="ID",
                    help="authenticate as this GitHub App's installation instead of with a personal token")
    sp.add_argument("--github-app-key-env", dest="github_app_key_env", metavar="VAR",
                    help="the environment variable holding the App's private key (the .pem file's text)")
    sp.add_argument("--installation-id", dest="installation_id", type=int, metavar="ID",
                    help="the App's installation (default: the one GitHub names for the repository)")
    sp.set_defaults(fn=cmd_repo_add)
    sp = repo.add_parser("set", parents=[common], help="change a repository's landing rules (only those given)")
    sp.add_argument("name")
    sp.add_argument("--verifier", help="the check run on every merged commit")
    sp.add_argument("--timeout", type=int, help="the check's time limit in seconds")
    sp.add_argument("--protect", action="append", help="the protected path patterns (replaces them; repeatable)")
    sp.add_argument("--cache", action="append", metavar="PATH", help="the cache paths (replaces them; repeatable)")
    sp.add_argument("--cache-key", action="append", metavar="FILE", dest="cache_key",
                    help="the files keying the caches (replaces them; repeatable)")
    sp.add_argument("--no-cache", action="store_true", dest="no_cache", help="no caches any more")
    sp.add_argument("--no-checks", action="store_true", dest="no_checks",
                    help="no named checks any more: --verifier is the check again")
    sp.add_argument("--setup", metavar="COMMAND", help="the setup step run before the check")
    sp.add_argument("--no-setup", action="store_true", dest="no_setup", help="no setup step any more")
    sp.add_argument("--setup-network", action=argparse.BooleanOptionalAction, dest="setup_network",
                    help="whether the setup may use the network (commits on main only)")
    sp.add_argument("--footprint-refuse", action=argparse.BooleanOptionalAction, dest="footprint_refuse",
                    help="whether a push outside its footprint is refused")
    sp.add_argument("--post-land-check", dest="post_land", metavar="COMMAND",
                    help="the check run on main after each landing ('' : the --verifier again)")
    sp.add_argument("--sandbox-path", action="append", metavar="PATH", dest="sandbox_path",
                    help="the paths the check may read besides the toolchain (replaces them; repeatable)")
    sp.add_argument("--no-sandbox-path", action="store_true", dest="no_sandbox_path",
                    help="no sandbox paths any more")
    sp.add_argument("--disk-limit", type=disk_size, dest="disk_limit", metavar="SIZE",
                    help="what one run may write in all (MiB, or 512M, 4G)")
    sp.add_argument("--memory-limit", type=disk_size, dest="memory_limit", metavar="SIZE",
                    help="the memory one run may use (MiB, or 4G)")
    sp.add_argument("--report", metavar="pytest|junit:PATH", help="where the check's tests report their outcomes")
    sp.add_argument("--check-config", action="append", metavar="GLOB", dest="check_config",
                    help="the files that configure the check (replaces them; repeatable)")
    sp.add_argument("--union", action="append", metavar="GLOB", dest="union",
                    help=UNION_HELP + " (replaces them; repeatable)")
    sp.add_argument("--no-union", action="store_true", dest="no_union",
                    help="no --union globs any more (main's .gitattributes still count)")
    sp.add_argument("--no-held-out", action="store_true", dest="no_held_out", help="no held-out checks any more")
    sp.add_argument("--no-require-approval", action="store_true", dest="no_require_approval",
                    help="no approval needed any more (what waits for one goes back to the queue when approved)")
    judge_flags(sp)
    sp.add_argument("--risk", choices=["on", "off"], help=RISK_HELP)
    sp.set_defaults(fn=cmd_repo_set)
    sp = repo.add_parser("list", parents=[common], help="list repositories")
    sp.set_defaults(fn=cmd_repo_list)
    for action, text in (("pause", "hold landing on a repository (admin)"),
                         ("resume", "resume landing; parked candidates go back to the queue, and the audit's "
                          "finding of moves of main around the bot is cleared: an admin has looked (admin)")):
        sp = repo.add_parser(action, parents=[common], help=text)
        sp.add_argument("name")
        sp.set_defaults(fn=cmd_repo_hold)
