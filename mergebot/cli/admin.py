"""Local administration: the commands that open the database themselves, and those that run a process here.

The database commands (``init``, ``agent add/list/revoke/rotate/link``, ``recover``; ``repo add/set`` are
``mergebot.cli.repos``) take no
token: run them on the machine that holds the data directory, or with MERGEBOT_DATABASE_URL. The process
commands are ``serve``, ``demo``, and three that talk to a running bot with ``--server`` and ``--token`` like
an agent's commands: ``verifier worker``, ``verify`` and ``drill``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any, TypeVar

from mergebot import __version__
from mergebot import messages as say
from mergebot.attest import keys
from mergebot.auth import Role
from mergebot.cli.agent import client_from
from mergebot.cli.render import emit
from mergebot.client import DEFAULT_URL, ApiError
from mergebot.db.database import Database, open_database
from mergebot.errors import MergebotError
from mergebot.logs import configure_logging
from mergebot.settings import Settings

T = TypeVar("T")


def settings_from(args: argparse.Namespace) -> Settings:
    overrides: dict[str, Any] = {}
    if getattr(args, "data_dir", None):
        overrides["data_dir"] = Path(args.data_dir)
    return Settings(**overrides)


def with_db(settings: Settings, fn: Callable[[Database], Awaitable[T]]) -> T:
    """Run ``fn`` on the settings' database (embedded unless MERGEBOT_DATABASE_URL), for local commands."""

    async def run() -> T:
        async with open_database(settings) as db:
            return await fn(db)

    return asyncio.run(run())


def cmd_init(args: argparse.Namespace) -> None:
    settings = settings_from(args)
    settings.data_dir.mkdir(parents=True, exist_ok=True)

    async def go(db: Database) -> dict[str, Any]:
        try:
            agent, token = await db.agents.add_agent(name=args.admin, role=Role.ADMIN)
        except MergebotError:
            return {"data_dir": str(settings.data_dir), "admin": args.admin,
                    "token": say.ADMIN_TOKEN_EXISTS}
        return {"data_dir": str(settings.data_dir), "admin": agent.name, "token": token,
                "trust_file": str(keys.trust_path(settings.attest_folder))}

    out = with_db(settings, go)
    keys.signer(settings.attest_folder)  # the key landing statements are signed with, and the trust file naming it
    emit(args, out)
    if not args.json and out["token"].startswith("mb_"):
        print(say.INIT_TOKEN_SHOWN_ONCE, file=sys.stderr)


def cmd_agent_add(args: argparse.Namespace) -> None:
    agent, token = with_db(settings_from(args), lambda db: db.agents.add_agent(name=args.name, role=Role(args.role)))
    emit(args, {"agent": agent.name, "role": agent.role, "token": token})
    if not args.json:
        print(say.TOKEN_SHOWN_ONCE, file=sys.stderr)


def cmd_agent_list(args: argparse.Namespace) -> None:
    rows = with_db(settings_from(args), lambda db: db.agents.list_agents())
    emit(args, rows, rows, ("name", "role", "group_name", "group_role", "holding", "revoked_at"))


def cmd_agent_revoke(args: argparse.Namespace) -> None:
    agent = with_db(settings_from(args), lambda db: db.agents.revoke_agent(name=args.name))
    emit(args, asdict(agent))


def cmd_agent_rotate(args: argparse.Namespace) -> None:
    agent, token = with_db(settings_from(args), lambda db: db.agents.rotate_token(name=args.name))
    emit(args, {"agent": agent.name, "role": agent.role, "token": token})


def cmd_agent_link(args: argparse.Namespace) -> None:
    forge, login = next((f, v) for f in ("github", "gitea", "forgejo") if (v := getattr(args, f)))

    async def go(db: Database) -> Any:
        agent = await db.agents.agent_by_name(args.name)
        if args.unlink:
            return {"forge": forge, "login": login.lower(), "unlinked": await db.forge.unlink(forge=forge, login=login)}
        row = await db.forge.link(forge=forge, login=login, agent_id=agent.id)
        return {"forge": forge, "login": row["login"], "agent": agent.name}

    emit(args, with_db(settings_from(args), go))


def cmd_recover(args: argparse.Namespace) -> None:
    settings = settings_from(args)
    rows = with_db(settings, lambda db: db.subtasks.recover_expired(grace_seconds=settings.recovery_grace_seconds))
    emit(args, rows, rows, ("id", "status", "claim_version", "previous_owner_id"))


def cmd_serve(args: argparse.Namespace) -> None:
    from mergebot.api import create_app, http

    configure_logging(default_level=logging.INFO)  # a service logs what it does; uvicorn's loggers included
    settings = settings_from(args)
    settings.host, settings.port = args.host or settings.host, args.port or settings.port
    where = "MERGEBOT_DATABASE_URL" if settings.database_url else settings.data_dir / "pg"
    if (why := _cannot_listen(settings.host, settings.port)) is not None:  # one line, before anything starts
        raise SystemExit(say.serve_cannot_listen(settings.host, settings.port, why))
    from mergebot.db.connect import prepare

    # Reach the database and migrate it before the server starts: a database that is not there is one sentence
    # from the command (the CLI's handler), not a traceback from the application's startup.
    settings.database_url = prepare(settings)
    keys.signer(settings.attest_folder)  # the landing statements' key: made now if the data directory has none
    if _active_agents(settings.database_url) == 0:  # started anyway: the demo and the tests add agents later
        logging.getLogger("mergebot.serve").warning(say.serve_no_agents(where))
    logging.getLogger("mergebot.serve").info(
        "mergebot %s serving on http://%s:%s with %s (database: %s)", __version__, settings.host, settings.port,
        settings.http_server, where)
    # uvicorn re-raises SIGTERM after its graceful shutdown; turning it into SystemExit lets exit handlers run,
    # so the embedded PostgreSQL is stopped cleanly by the last process using it.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    # Request lines (method, path, status; never headers) only with MERGEBOT_ACCESS_LOG=1: agents poll, and
    # that is noise.
    http.run(create_app(settings), host=settings.host, port=settings.port, server=settings.http_server,
             access_log=os.environ.get("MERGEBOT_ACCESS_LOG", "") not in ("", "0"))


def _cannot_listen(host: str, port: int) -> str | None:
    """Why ``host:port`` cannot be listened on (None: it can), asked as the HTTP server will bind it. Asked before
    the database starts and "serving on" is said, so a port in use is one line, not an error among the start-up's
    (a port taken between this and the server's own bind still fails there)."""
    import socket

    try:
        family, kind, proto, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                          flags=socket.AI_PASSIVE)[0]
        with socket.socket(family, kind, proto) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn: a port left in TIME_WAIT is free
            s.bind(addr)
    except OSError as e:
        return e.strerror or str(e)
    return None


def _active_agents(url: str) -> int | None:
    """How many agents hold a token that works (None: not known; the server starts either way)."""
    import psycopg

    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
            row = conn.execute("SELECT count(*) FROM agents WHERE revoked_at IS NULL").fetchone()
    except psycopg.Error:
        return None
    return int(row[0]) if row else None


def cmd_verifier_worker(args: argparse.Namespace) -> None:
    """Run verifier workers against a bot over HTTP: jobs through the API, commits through git."""
    from mergebot.secrets import secret_values
    from mergebot.verify.remote import HttpRepos, HttpSource, Servers
    from mergebot.verify.worker import Worker, sweep_slots, worker_name
    from verifier.sandbox import bwrap_problem

    token = args.token or os.environ.get("MERGEBOT_TOKEN")
    if not token:
        raise SystemExit(say.WORKER_NEEDS_TOKEN)
    server = args.server or os.environ.get("MERGEBOT_URL", DEFAULT_URL)
    work = Path(args.work_dir).resolve()
    print(say.worker_starting(args.slots, server, work), file=sys.stderr)
    if args.sandbox == "none":
        print(say.WORKER_NO_SANDBOX, file=sys.stderr)
    elif (problem := bwrap_problem(os.environ.get("MERGEBOT_BWRAP") or "bwrap")) is not None:
        print(say.worker_sandbox_broken(problem), file=sys.stderr)

    servers = Servers(server.split(","), token)  # several replicas: --server URL1,URL2
    with contextlib.suppress(ApiError):  # a wrong URL is told now; once running, an outage is waited out
        servers.call(lambda c: c.get("/healthz"))

    async def run() -> None:
        own = secret_values(os.environ)  # this machine's: the server masks its own again when the result arrives

        async def secrets() -> list[str]:
            return own

        sweep_slots(work / "slots")
        workers = [Worker(HttpSource(servers, worker_name(i)), HttpRepos(servers, token, work / "mirrors"),
                          work / "slots" / f"{os.getpid()}-{i}", sandbox="none" if args.sandbox == "none" else "bwrap",
                          heartbeat_every=args.heartbeat, hide=[work], secrets=secrets,
                          bwrap=os.environ.get("MERGEBOT_BWRAP") or "bwrap") for i in range(args.slots)]
        if args.once:
            await asyncio.gather(*(w.run_one() for w in workers))
            return
        await asyncio.gather(*(w.run() for w in workers))

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    asyncio.run(run())


def cmd_verify(args: argparse.Namespace) -> None:
    """Re-run a repository's check on one commit by hand, exactly as the verifier does, and print the record."""
    from mergebot.git import repo as git
    from mergebot.landing.main.repos import repos_root
    from mergebot.secrets import secret_values
    from mergebot.verify.remote import HttpRepos
    from mergebot.verify.worker import cache_root, private_paths
    from verifier.explain import explain
    from verifier.runner import DISK_LIMIT_MB, MEMORY_MB, run_check

    settings = settings_from(args)
    c = client_from(args)
    repo = next((r for r in c.get("/api/v1/repos")["repos"] if r["name"] == args.repo), None)
    if repo is None:
        raise SystemExit(say.verify_no_such_repository(args.repo))
    sandbox_paths = list(repo.get("sandbox_paths") or [])
    disk_limit = int(repo.get("disk_limit_mb") or DISK_LIMIT_MB)
    memory = int(repo.get("memory_limit_mb") or MEMORY_MB)
    if args.explain_sandbox:
        seen = explain(sandbox=args.sandbox, timeout=float(args.timeout or repo["verifier_timeout_s"]),
                       memory_mb=memory, sandbox_paths=sandbox_paths, disk_limit_mb=disk_limit,
                       hide=private_paths(settings.data_dir, settings.database_url, settings.database_direct_url,
                                          attest=settings.attest_folder),
                       slot=settings.data_dir.resolve() / "slots" / f"{os.getpid()}-0", bwrap=settings.bwrap)
        if args.json:
            emit(args, seen)
        else:
            print(say.verify_the_check(args.repo, args.command or repo["verifier_command"]))
            print(seen["text"])
        return
    if not args.sha:
        raise SystemExit(say.VERIFY_NEEDS_COMMIT)
    secrets = secret_values(os.environ, named=[n for n in (repo.get("webhook_secret_env"), repo.get("forge_token_env"))
                                               if n], urls=[settings.database_url])
    local = git.bare_path(repos_root(settings.data_dir), args.repo)
    token = args.token or os.environ.get("MERGEBOT_TOKEN") or ""
    server = args.server or os.environ.get("MERGEBOT_URL", DEFAULT_URL)
    import tempfile

    from verifier.runner import CheckSpec, Setup

    # as a candidate's run: the setup offline, the bot's own cache generations read-only
    spec = CheckSpec(args.command or repo["verifier_command"], float(args.timeout or repo["verifier_timeout_s"]),
                     memory_mb=memory, sandbox_paths=tuple(sandbox_paths), disk_limit_mb=disk_limit,
                     report=str(repo.get("report") or "pytest"),
                     setup=Setup(repo["setup_command"]) if repo.get("setup_command") else None,
                     cache_paths=tuple(repo.get("cache_paths") or []) if args.cache else (),
                     cache_key=tuple(repo.get("cache_key") or []))
    pin = None
    if spec.cache_paths:  # a landed commit is re-run with the generation its deciding run read; any other the newest
        landed = c.landed(repo=args.repo, limit=1000)
        pin = next(((r.get("verifier_cache") or {}).get("generation") for r in landed
                    if args.sha in (r.get("merged_sha"), r.get("main_sha"))), None)
    cache = spec.cache_request(cache_root(settings.data_dir.resolve() / "slots", args.repo), pin=pin)
    with tempfile.TemporaryDirectory(prefix="mergebot-verify-") as tmp:
        path = local if local.exists() else HttpRepos(server, token, Path(tmp)).path_for(args.repo, args.sha)
        result = run_check(path, args.sha, spec, sandbox=args.sandbox, cache=cache, secrets=secrets,
                           bwrap=settings.bwrap,
                           hide=private_paths(settings.data_dir, settings.database_url, settings.database_direct_url,
                                              attest=settings.attest_folder))
    data = result.as_json()
    if args.json:
        emit(args, data)
    else:
        for k in ("commit_sha", "tree_sha", "command", "outcome", "exit_code", "duration_ms", "sandbox", "log_size",
                  "log_digest"):
            print(f"{k:>12}: {data[k]}")
        if data.get("limits"):
            print(f"{'limits':>12}: {data['limits'].get('enforced')}")
        if data.get("cache"):
            print(f"{'cache':>12}: {data['cache']['note']}")
        print("\n" + result.excerpt(40))
    if not result.passed:
        raise SystemExit(6)


def cmd_drill(args: argparse.Namespace) -> None:
    """Failure drills against a running server, then the invariant check (``mergebot.drill``)."""
    from mergebot import drill

    token = args.token or os.environ.get("MERGEBOT_TOKEN")
    if not token:
        raise SystemExit(say.DRILL_NEEDS_TOKEN)
    raise SystemExit(drill.run(args, token, args.url or args.server or os.environ.get("MERGEBOT_URL", DEFAULT_URL)))


def cmd_demo(args: argparse.Namespace) -> None:
    from mergebot.demo import run_demo

    run_demo(data_dir=Path(args.data_dir) if args.data_dir else None)
