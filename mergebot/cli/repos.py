"""``mergebot repo add`` and ``repo set``: a repository's rules from the command line's flags, through the one rules
model (``mergebot.rules``), written to the database directly (no token: run them where the data directory is, or
with MERGEBOT_DATABASE_URL). The flags themselves are ``mergebot.cli.repoparser``.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict
from pathlib import Path
from typing import Any

from mergebot import messages as say
from mergebot.cli.admin import settings_from, with_db
from mergebot.cli.render import print_repo
from mergebot.db.database import Database
from mergebot.errors import Invalid
from mergebot.rules import Rules, RulesChange


def cmd_repo_add(args: argparse.Namespace) -> None:
    from mergebot.landing.main.repos import add_repo, repos_root

    settings = settings_from(args)

    forge = None
    if (args.github_app_id or args.github_app_key_env or args.installation_id) and not args.github:
        raise SystemExit(say.GITHUB_APP_NEEDS_GITHUB)
    if args.github or args.gitea or args.forgejo:
        from mergebot.landing.main.repos import forge_settings

        if sum(bool(x) for x in (args.github, args.gitea, args.forgejo, args.source)) > 1:
            raise SystemExit(say.REPO_ADD_ONE_SOURCE)
        if args.github:
            kind, url, owner_repo = "github", args.forge_url, args.github[0]
        else:
            kind = "gitea" if args.gitea else "forgejo"
            url, owner_repo = args.gitea or args.forgejo
        forge = forge_settings(kind, owner_repo, url=url, api_url=args.api_url, git_url=args.git_url,
                               secret_env=args.secret_env, token_env=args.token_env, app_id=args.github_app_id,
                               app_key_env=args.github_app_key_env, installation_id=args.installation_id)

    given = rules_given(args)
    given["checks"] = with_check_rules(args, given["checks"])
    if not given["verifier_command"]:  # named checks alone: the verifier command is their required ones, glued
        if not given["checks"]:
            raise SystemExit(say.CHECKS_NEED_COMMAND)
        given["verifier_command"] = " && ".join(f"({c['command']})" for c in given["checks"] if c["required"])
    rules = Rules.of(**{k: None if v == "default" else v for k, v in given.items()},
                     target_branch=args.target, max_push_bytes=args.max_push_bytes,
                     max_file_bytes=args.max_file_bytes)
    held = held_out_of(args)

    async def go(db: Database) -> Any:
        repo = await add_repo(db, repos_root(settings.data_dir), name=args.name, source=args.source, rules=rules,
                              forge=forge)
        if held:
            await db.repos.set_held_out(repo.name, held)
        return repo

    print_repo(args, asdict(with_db(settings, go)), "added", len(held) if held else None)


def rules_given(args: argparse.Namespace) -> dict[str, Any]:
    """The rules ``repo add`` or ``repo set`` was given, by the model's names (None: not given; ``default``: the
    server's queue rule again)."""
    return {"verifier_command": args.verifier, "verifier_timeout_s": args.timeout, "protected_paths": args.protect,
            "cache_paths": args.cache, "cache_key": args.cache_key, "setup_command": args.setup or None,
            "setup_network": args.setup_network, "footprint_refuse": args.footprint_refuse,
            "post_land_command": args.post_land or None, "sandbox_paths": args.sandbox_path,
            "disk_limit_mb": args.disk_limit, "memory_limit_mb": args.memory_limit, "report": args.report,
            "check_config": args.check_config, "held_out_command": args.held_out_command,
            "old_tests": args.old_tests, "risk_aware": None if args.risk is None else args.risk == "on",
            "test_paths": args.test_paths, "suspicious": args.suspicious, "speculation_window": args.window,
            "batch_size": args.batch, "retry_failed_checks": args.retry_failures, "merge_method": args.merge_method,
            "require_approval": args.require_approval, "checks": args.checks,
            "on_unattested": args.on_unattested, "union_merge": args.union}


CHECK_RULES = (("check_timeout", "timeout_s"), ("check_setup", "setup"), ("check_cache", "cache_paths"),
               ("check_report", "report"))


def check_rules_given(args: argparse.Namespace) -> bool:
    return any(getattr(args, flag, None) for flag, _ in CHECK_RULES)


def with_check_rules(args: argparse.Namespace, checks: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    """``checks`` (the ones ``--check`` gave, else the repository's) with each check's own rules the command gives
    (``--check-timeout`` and its kin); a name that is no check of these is refused (``Invalid``: exit 2). None:
    neither checks nor rules given."""
    if not check_rules_given(args):
        return checks
    out = [dict(c) for c in checks or []]
    by_name = {c["name"]: c for c in out}
    caches: dict[str, list[str]] = {}
    for flag, key in CHECK_RULES:
        for name, value in getattr(args, flag, None) or []:
            if name not in by_name:
                raise Invalid(say.check_rule_unknown("--" + flag.replace("_", "-"), name, sorted(by_name)),
                              field="checks")
            caches.setdefault(name, []).append(value) if key == "cache_paths" else by_name[name].update({key: value})
    for name, paths in caches.items():  # --check-cache, repeatable: the check's cache paths, all of them
        by_name[name]["cache_paths"] = paths
    return out


def held_out_of(args: argparse.Namespace) -> list[tuple[str, bytes]] | None:
    """The held-out checks ``--held-out DIR`` gives (``[]`` for ``--no-held-out``; None: unchanged)."""
    if args.held_out:
        from mergebot.landing.main.repos import read_held_out

        return read_held_out(Path(args.held_out))
    return [] if getattr(args, "no_held_out", False) else None


def cmd_repo_set(args: argparse.Namespace) -> None:
    from mergebot.landing.main.repos import set_rules

    given = rules_given(args)
    reset = {k for k, v in given.items() if v == "default"}
    if args.no_cache:
        given["cache_paths"] = given["cache_key"] = []
    if args.no_setup:
        reset.add("setup_command")
    if args.post_land == "":  # the --verifier again
        reset.add("post_land_command")
    if args.no_sandbox_path:
        given["sandbox_paths"] = []
    if args.no_require_approval:
        reset.add("require_approval")
    if args.no_checks:
        given["checks"] = []
    if args.no_union:
        given["union_merge"] = []
    if check_rules_given(args):  # each named check's own rules: on the checks given, else on the repository's
        checks = given["checks"]
        if checks is None:
            checks = with_db(settings_from(args), lambda db: db.repos.get_repo(args.name)).checks
        given["checks"] = with_check_rules(args, checks)
    change = RulesChange.of(**{k: v for k, v in given.items() if v != "default"}, reset=reset)
    held = held_out_of(args)
    if not change.given() and held is None:
        raise SystemExit(say.REPO_SET_NEEDS_A_RULE)
    repo = with_db(settings_from(args), lambda db: set_rules(db, args.name, change, held_out=held))
    print_repo(args, asdict(repo), "changed", len(held) if held is not None else None)
