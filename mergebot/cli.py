"""The ``mergebot`` command line, for people and agents.

Two kinds of commands:
  * local administration, which talks to the database directly (``init``, ``agent``, ``recover``): run it
    on the machine that holds the data directory, or with MERGEBOT_DATABASE_URL;
  * everything an agent or a lead does, which goes through the HTTP API with a token
    (``--server``/MERGEBOT_URL and ``--token``/MERGEBOT_TOKEN), so identity is always the token's.

Every command prints a readable table, or JSON with ``--json``. A refusal prints the server's reason and
exits non-zero (2 for bad input, 3 for "claim superseded", 1 otherwise).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import re
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TextIO, TypeVar

import httpx

from mergebot import __version__
from mergebot.auth import Role
from mergebot.client import ApiError, Client
from mergebot.errors import MergebotError
from mergebot.logs import configure_logging
from mergebot.settings import Settings
from mergebot.store import Store

T = TypeVar("T")
DEFAULT_URL = "http://127.0.0.1:8470"


# -- output ----------------------------------------------------------------------------------------------


def emit(args: argparse.Namespace, data: Any, table: list[dict[str, Any]] | None = None,
         columns: Sequence[str] = ()) -> None:
    if args.json:
        print(json.dumps(data, default=str, indent=2))
        return
    if table is not None:
        print(render_table(table, columns))
    elif isinstance(data, dict):
        for k, v in data.items():
            print(f"{k}: {v}")
    else:
        print(data)


def render_table(rows: list[dict[str, Any]], columns: Sequence[str]) -> str:
    if not rows:
        return "(none)"
    cols = list(columns) or list(rows[0].keys())
    cells = [[_cell(r.get(c)) for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(cols, widths, strict=True))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(line.rstrip() for line in lines)


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, list):
        return ",".join(str(x) for x in v) or "-"
    s = str(v)
    return s if len(s) <= 60 else s[:57] + "..."


# -- local database access -------------------------------------------------------------------------------


def settings_from(args: argparse.Namespace) -> Settings:
    overrides: dict[str, Any] = {}
    if getattr(args, "data_dir", None):
        overrides["data_dir"] = Path(args.data_dir)
    return Settings(**overrides)


def with_store(settings: Settings, fn: Callable[[Store], Awaitable[T]]) -> T:
    from mergebot.db.connect import open_pool, prepare
    from mergebot.landing.store import LandingStore

    async def run() -> T:
        url = await asyncio.to_thread(prepare, settings)
        pool = await open_pool(url, settings, max_size=2)
        try:
            return await fn(LandingStore(pool, lease_seconds=settings.lease_seconds))
        finally:
            await pool.close()

    return asyncio.run(run())


def cmd_init(args: argparse.Namespace) -> None:
    settings = settings_from(args)
    settings.data_dir.mkdir(parents=True, exist_ok=True)

    async def go(store: Store) -> dict[str, Any]:
        try:
            agent, token = await store.add_agent(name=args.admin, role=Role.ADMIN)
        except MergebotError:
            return {"data_dir": str(settings.data_dir), "admin": args.admin,
                    "token": "(exists; use 'mergebot agent rotate' for a new token)"}
        return {"data_dir": str(settings.data_dir), "admin": agent.name, "token": token}

    emit(args, with_store(settings, go))


def cmd_agent_add(args: argparse.Namespace) -> None:
    agent, token = with_store(settings_from(args), lambda s: s.add_agent(name=args.name, role=Role(args.role)))
    emit(args, {"agent": agent.name, "role": agent.role, "token": token})
    if not args.json:
        print("(the token is shown once; store it now)", file=sys.stderr)


def cmd_agent_list(args: argparse.Namespace) -> None:
    rows = with_store(settings_from(args), lambda s: s.list_agents())
    emit(args, rows, rows, ("name", "role", "group_name", "group_role", "holding", "revoked_at"))


def cmd_agent_revoke(args: argparse.Namespace) -> None:
    agent = with_store(settings_from(args), lambda s: s.revoke_agent(name=args.name))
    emit(args, asdict(agent))


def cmd_agent_rotate(args: argparse.Namespace) -> None:
    agent, token = with_store(settings_from(args), lambda s: s.rotate_token(name=args.name))
    emit(args, {"agent": agent.name, "role": agent.role, "token": token})


def cmd_agent_link(args: argparse.Namespace) -> None:
    from mergebot.forge.store import ForgeStore

    forge, login = next((f, v) for f in ("github", "gitea", "forgejo") if (v := getattr(args, f)))

    async def go(store: Store) -> Any:
        agent = await store.agent_by_name(args.name)
        if args.unlink:
            return {"forge": forge, "login": login.lower(),
                    "unlinked": await ForgeStore(store.pool).unlink(forge=forge, login=login)}
        row = await ForgeStore(store.pool).link(forge=forge, login=login, agent_id=agent.id)
        return {"forge": forge, "login": row["login"], "agent": agent.name}

    emit(args, with_store(settings_from(args), go))


def cmd_recover(args: argparse.Namespace) -> None:
    settings = settings_from(args)
    rows = with_store(settings, lambda s: s.recover_expired(grace_seconds=settings.recovery_grace_seconds))
    emit(args, rows, rows, ("id", "status", "claim_version", "previous_owner_id"))


def cmd_serve(args: argparse.Namespace) -> None:
    import uvicorn

    from mergebot.api import create_app

    configure_logging(default_level=logging.INFO)  # a service logs what it does; uvicorn's loggers included
    settings = settings_from(args)
    settings.host, settings.port = args.host or settings.host, args.port or settings.port
    logging.getLogger("mergebot.serve").info(
        "mergebot %s serving on http://%s:%s (database: %s)", __version__, settings.host, settings.port,
        "MERGEBOT_DATABASE_URL" if settings.database_url else settings.data_dir / "pg")
    # uvicorn re-raises SIGTERM after its graceful shutdown; turning it into SystemExit lets exit handlers run,
    # so the embedded PostgreSQL is stopped cleanly by the last process using it.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    # log_config=None: uvicorn installs no handlers of its own, so its lines go through ours. Request lines
    # (method, path, status; never headers) only with MERGEBOT_ACCESS_LOG=1: agents poll, and that is noise.
    level = logging.getLevelName(logging.getLogger().getEffectiveLevel()).lower()
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_config=None, log_level=level,
                access_log=os.environ.get("MERGEBOT_ACCESS_LOG", "") not in ("", "0"))


def cmd_repo_add(args: argparse.Namespace) -> None:
    from mergebot.landing.repos import add_repo, repos_root
    from mergebot.landing.store import LandingStore

    settings = settings_from(args)

    forge = None
    if args.github or args.gitea or args.forgejo:
        from mergebot.landing.repos import forge_settings

        if sum(bool(x) for x in (args.github, args.gitea, args.forgejo, args.source)) > 1:
            raise SystemExit("mergebot: give one of --from, --github, --gitea, --forgejo")
        if args.github:
            kind, url, owner_repo = "github", args.forge_url, args.github[0]
        else:
            kind = "gitea" if args.gitea else "forgejo"
            url, owner_repo = args.gitea or args.forgejo
        forge = forge_settings(kind, owner_repo, url=url, api_url=args.api_url, git_url=args.git_url,
                               secret_env=args.secret_env, token_env=args.token_env)

    async def go(store: Store) -> Any:
        assert isinstance(store, LandingStore)
        return await add_repo(store, repos_root(settings.data_dir), name=args.name, source=args.source,
                              verifier_command=args.verifier, target_branch=args.target,
                              verifier_timeout_s=args.timeout, protected_paths=args.protect or [],
                              max_push_bytes=args.max_push_bytes, max_file_bytes=args.max_file_bytes, forge=forge)

    repo = with_store(settings, go)
    emit(args, asdict(repo))


def cmd_repo_list(args: argparse.Namespace) -> None:
    out = client_from(args).get("/api/v1/repos")
    emit(args, out, out["repos"], ("name", "target_branch", "verifier_command", "protected_paths", "paused"))


def cmd_reconcile(args: argparse.Namespace) -> None:
    out = client_from(args).post("/api/v1/reconcile")
    rows = [{k: (len(v) if isinstance(v, list) else v) for k, v in r.items()} for r in out["reports"]]
    emit(args, out, rows, ("repo", "finished", "rolled_back", "requeued", "enqueued", "unexplained",
                           "landed_not_on_main"))


def cmd_start(args: argparse.Namespace) -> None:
    from mergebot import agent

    token = args.token or os.environ.get("MERGEBOT_TOKEN") or ""
    server = args.server or os.environ.get("MERGEBOT_URL", DEFAULT_URL)
    got = agent.start(client_from(args), server, token, args.repo, Path(args.dir))
    if got is None:
        emit(args, {"claimed": None, "message": "nothing is ready"})
        return
    claim, body = got
    emit(args, {"subtask": claim.subtask_id, "claim_version": claim.claim_version, "branch": claim.branch,
                "worktree": str(Path(args.dir).resolve()), "title": body["subtask"]["title"]})
    if not args.json and body["handoff"]["notes"]:
        print("\nhandoff notes from earlier owners:")
        for n in body["handoff"]["notes"]:
            print(f"--- {n['author']} (claim version {n['claim_version']})\n{n['body']}")


def cmd_push(args: argparse.Namespace) -> None:
    from mergebot import agent

    result = agent.push(client_from(args), Path(args.dir), wait=args.timeout, progress=not args.json)
    if args.json:
        emit(args, result)
    elif result["status"] == "landed":
        print(f"landed: {result['sha'][:12]} is on main as {str(result.get('merged_sha'))[:12]}")
    else:
        print(f"{result['status']}: {result.get('reason') or ''}".rstrip(), file=sys.stderr)
        if result["status"] in ("refused", "rejected"):
            print("fix it in your worktree, commit, and run `mergebot submit` again.", file=sys.stderr)
        elif result["status"] == "parked":
            print("not your fault: main is red. It lands by itself once main is green again.", file=sys.stderr)
    if result["status"] != "landed":
        raise SystemExit(5)


def cmd_handoff(args: argparse.Namespace) -> None:
    from mergebot import agent

    claim = agent.current_claim(Path(args.dir))
    body = agent.handoff_note(Path(args.dir), done=args.done or "", remains=args.remains or "",
                              tried=args.tried or [], checks=args.check or [])
    out = client_from(args).post(f"/api/v1/subtasks/{claim.subtask_id}/notes",
                                 {"body": body, "claim_version": claim.claim_version})
    emit(args, out["note"])


def cmd_repo_hold(args: argparse.Namespace) -> None:
    out = client_from(args).post(f"/api/v1/repos/{args.name}/{args.repo_command}")
    emit(args, out["repo"])


def cmd_verifier_worker(args: argparse.Namespace) -> None:
    """Run verifier workers against a bot over HTTP: jobs through the API, commits through git."""
    from mergebot.verify.worker import HttpRepos, HttpSource, Worker, worker_name

    token = args.token or os.environ.get("MERGEBOT_TOKEN")
    if not token:
        raise SystemExit("mergebot verifier worker needs a verifier token (--token or MERGEBOT_TOKEN)")
    server = args.server or os.environ.get("MERGEBOT_URL", DEFAULT_URL)
    work = Path(args.work_dir).resolve()
    print(f"verifier worker: {args.slots} slot(s) against {server}, work dir {work}", file=sys.stderr)

    async def run() -> None:
        workers = [Worker(HttpSource(Client(server, token), worker_name(i)), HttpRepos(server, token, work / "mirrors"),
                          work / "slots" / f"{os.getpid()}-{i}", sandbox=args.sandbox,
                          heartbeat_every=args.heartbeat) for i in range(args.slots)]
        if args.once:
            await asyncio.gather(*(w.run_one() for w in workers))
            return
        await asyncio.gather(*(w.run() for w in workers))

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    asyncio.run(run())


def cmd_verify(args: argparse.Namespace) -> None:
    """Re-run a repository's check on one commit by hand, exactly as the verifier does, and print the record."""
    from mergebot.git import repo as git
    from mergebot.landing.repos import repos_root
    from mergebot.verify.worker import HttpRepos
    from verifier.runner import run_check

    settings = settings_from(args)
    c = client_from(args)
    repo = next((r for r in c.get("/api/v1/repos")["repos"] if r["name"] == args.repo), None)
    if repo is None:
        raise SystemExit(f"mergebot verify: no repository named {args.repo!r}")
    local = git.bare_path(repos_root(settings.data_dir), args.repo)
    token = args.token or os.environ.get("MERGEBOT_TOKEN") or ""
    server = args.server or os.environ.get("MERGEBOT_URL", DEFAULT_URL)
    import tempfile

    with tempfile.TemporaryDirectory(prefix="mergebot-verify-") as tmp:
        path = local if local.exists() else HttpRepos(server, token, Path(tmp)).path_for(args.repo, args.sha)
        result = run_check(path, args.sha, args.command or repo["verifier_command"],
                           float(args.timeout or repo["verifier_timeout_s"]), sandbox=args.sandbox)
    data = result.as_json()
    if args.json:
        emit(args, data)
    else:
        for k in ("commit_sha", "tree_sha", "command", "outcome", "exit_code", "duration_ms", "sandbox", "log_size",
                  "log_digest"):
            print(f"{k:>12}: {data[k]}")
        print("\n" + result.excerpt(40))
    if not result.passed:
        raise SystemExit(6)


def cmd_drill(args: argparse.Namespace) -> None:
    """Failure drills against a running server, then the invariant check (``mergebot.drill``)."""
    from mergebot import drill

    token = args.token or os.environ.get("MERGEBOT_TOKEN")
    if not token:
        raise SystemExit("mergebot drill needs a token (--token or MERGEBOT_TOKEN): an admin's; any role's with "
                         "--check-only")
    raise SystemExit(drill.run(args, token, args.url or args.server or os.environ.get("MERGEBOT_URL", DEFAULT_URL)))


def cmd_demo(args: argparse.Namespace) -> None:
    from mergebot.demo import run_demo

    run_demo(data_dir=Path(args.data_dir) if args.data_dir else None, agents=args.agents)


# -- API commands -----------------------------------------------------------------------------------------


def client_from(args: argparse.Namespace) -> Client:
    token = args.token or os.environ.get("MERGEBOT_TOKEN")
    return Client(args.server or os.environ.get("MERGEBOT_URL", DEFAULT_URL), token)


def cmd_create(args: argparse.Namespace) -> None:
    c = client_from(args)
    if args.file:
        from mergebot.tree import parse_tree_text

        path = Path(args.file)
        text = path.read_text("utf-8")
        parse_tree_text(text, path.name)  # refuse locally first, with the field named
        import yaml

        data = json.loads(text) if path.name.endswith(".json") else yaml.safe_load(text)
        if isinstance(data, dict) and "subtasks" in data:
            data = data["subtasks"]
        out = c.post("/api/v1/subtasks/batch", {"subtasks": data, "key_prefix": args.key or path.stem})
        rows = [{"key": k, **v} for k, v in out["subtasks"].items()]
        emit(args, out, rows, ("key", "id", "status"))
        return
    if not args.title:
        raise SystemExit("mergebot create: give a TITLE or --file")
    body = {"title": args.title, "description": args.description or "", "priority": args.priority,
            "depends_on": args.depends_on or [], "idempotency_key": args.key, "group": args.group,
            "parent_id": args.parent, "max_attempts": args.max_attempts}
    out = c.post("/api/v1/subtasks", {k: v for k, v in body.items() if v is not None})
    s = out["subtask"]
    emit(args, out, [s], ("id", "status", "title", "priority", "depends_on"))


def cmd_claim(args: argparse.Namespace) -> None:
    c = client_from(args)
    body = None
    if args.complete:
        body = {"complete": {"id": args.complete, "claim_version": args.version, "sha": args.sha}}
    out = c.post("/api/v1/subtasks/claim", body)
    if out is None:
        emit(args, {"claimed": None, "message": "nothing is ready"})
        return
    s = out["subtask"]
    emit(args, out, [{"id": s["id"], "claim_version": s["claim_version"], "title": s["title"],
                      "branch": out["branch"], "lease_expires_at": s["lease_expires_at"]}])
    if not args.json and out["handoff"]["notes"]:
        print("\nhandoff notes:")
        for n in out["handoff"]["notes"]:
            print(f"  [{n['author']} v{n['claim_version']}] {n['body']}")


def _fenced(args: argparse.Namespace, action: str, extra: dict[str, Any] | None = None) -> None:
    out = client_from(args).post(f"/api/v1/subtasks/{args.id}/{action}",
                                 {"claim_version": args.version, **(extra or {})})
    emit(args, out.get("subtask", out))


def cmd_heartbeat(args: argparse.Namespace) -> None:
    _fenced(args, "heartbeat")


def cmd_release(args: argparse.Namespace) -> None:
    _fenced(args, "release", {"reason": args.reason} if args.reason else None)


def cmd_submit(args: argparse.Namespace) -> None:
    if args.id is None:
        cmd_push(args)
        return
    if args.version is None:
        raise SystemExit("mergebot submit ID needs --version (your claim version)")
    _fenced(args, "submit", {"sha": args.sha} if args.sha else None)


def cmd_note(args: argparse.Namespace) -> None:
    c = client_from(args)
    if args.id is None:
        out = c.post("/api/v1/notes", {"body": args.body, "group": args.group})
    else:
        out = c.post(f"/api/v1/subtasks/{args.id}/notes", {"body": args.body, "claim_version": args.version})
    emit(args, out["note"])


def cmd_notes(args: argparse.Namespace) -> None:
    c = client_from(args)
    out = c.get(f"/api/v1/subtasks/{args.id}/notes") if args.id else c.get("/api/v1/notes", group=args.group)
    emit(args, out, out["notes"], ("id", "subtask_id", "author", "claim_version", "body", "created_at"))


def cmd_announce(args: argparse.Namespace) -> None:
    emit(args, client_from(args).post("/api/v1/announcements", {"body": args.body})["announcement"])


def cmd_announcements(args: argparse.Namespace) -> None:
    out = client_from(args).get("/api/v1/announcements")
    emit(args, out, out["announcements"], ("id", "author", "body", "created_at"))


def cmd_assign(args: argparse.Namespace) -> None:
    out = client_from(args).put(f"/api/v1/assignments/{args.agent}", {"group": args.group,
                                                                       "group_role": args.group_role})
    emit(args, out["assignment"])


def cmd_group(args: argparse.Namespace) -> None:
    body: dict[str, Any] = {}
    if args.open is not None:
        body["open"] = args.open == "open"
    if args.description is not None:
        body["description"] = args.description
    emit(args, client_from(args).put(f"/api/v1/groups/{args.name}", body)["group"])


def cmd_list(args: argparse.Namespace) -> None:
    out = client_from(args).get("/api/v1/subtasks", status=args.status, group=args.group, after=args.after,
                                limit=args.limit)
    emit(args, out, out["subtasks"],
         ("id", "status", "priority", "owner", "claim_version", "attempts", "group_name", "title"))


def cmd_show(args: argparse.Namespace) -> None:
    c = client_from(args)
    s = c.get(f"/api/v1/subtasks/{args.id}")["subtask"]
    events = c.get(f"/api/v1/subtasks/{args.id}/events")["events"]
    if args.json:
        emit(args, {"subtask": s, "events": events})
        return
    for k in ("id", "title", "status", "owner", "claim_version", "attempts", "max_attempts", "priority",
              "group_name", "parent_id", "depends_on", "lease_expires_at", "candidate_sha", "status_reason",
              "previous_owner"):
        print(f"{k:>16}: {_cell(s.get(k))}")
    print()
    print(render_table(events, ("at", "actor", "from_status", "to_status", "claim_version", "detail")))


def cmd_wait(args: argparse.Namespace) -> None:
    """Wait (long-polling the server) until every id is landed, failed or cancelled."""
    c = client_from(args)
    deadline = time.monotonic() + args.timeout
    last: dict[str, str] = {}
    while True:
        left = max(0.0, deadline - time.monotonic())
        out = c.post("/api/v1/subtasks/wait", {"ids": args.ids, "timeout": min(30.0, left)})
        if out["statuses"] != last and not args.json:
            done = sum(1 for s in out["statuses"].values() if s in ("landed", "failed", "cancelled"))
            print(f"{done}/{len(args.ids)} finished: " +
                  " ".join(f"{k}={v}" for k, v in sorted(out["statuses"].items())), file=sys.stderr)
        last = out["statuses"]
        if out["done"] or left <= 0:
            break
    emit(args, out)
    if not out["done"]:
        raise SystemExit(4)


# -- views: status, queue, landed, tree (tables, --json, --watch) -------------------------------------------------


def cmd_status(args: argparse.Namespace) -> None:
    c = client_from(args)
    show(args, lambda: c.summary(holders=args.holders), render_status, status_line)


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


def _json_line(data: dict[str, Any]) -> str:
    return json.dumps(data, default=str, sort_keys=True)


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


CLEAR = "\x1b[H\x1b[2J"  # cursor home, clear the screen


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


def _short(sha: Any) -> str | None:
    return str(sha)[:12] if sha else None


def _when(ts: Any) -> str | None:
    """An API timestamp as 'YYYY-MM-DD HH:MM:SS' (UTC as the server wrote it)."""
    return str(ts)[:19].replace("T", " ") if ts else None


def _ids(ids: Sequence[Any], most: int = 5) -> str:
    shown = ", ".join(f"#{i}" for i in ids[:most])
    return shown + (f" (+{len(ids) - most})" if len(ids) > most else "")


def render_status(s: dict[str, Any]) -> str:
    total = s["total"] or 1
    counts = [{"status": k, "count": v, "share": f"{100 * v / total:.1f}%"} for k, v in s["counts"].items()]
    counts.append({"status": "total", "count": s["total"], "share": ""})
    parts = [render_table(counts, ("status", "count", "share")), ""]
    if s["queue"]:
        parts += [render_table(s["queue"], ("repo", "queued", "verifying", "landing", "parked")), ""]
    jobs, landed = s["verify_jobs"], s["landed"]
    parts.append(f"verify jobs: {jobs['queued']} queued, {jobs['running']} running; landed: {landed['total']} "
                 f"({landed['last_hour']} in the last hour)")
    parts.append(f"\n{s['agents_holding']} agent(s) hold {s['claims_held']} claim(s)" +
                 (":" if s["holders"] else "."))
    if s["holders"]:
        rows = [{**h, "subtasks": _ids(h["subtasks"], 3), "next_lease_expiry": _when(h["next_lease_expiry"])}
                for h in s["holders"]]
        parts.append(render_table(rows, ("agent", "role", "holding", "subtasks", "next_lease_expiry")))
        if s["agents_holding"] > len(rows):
            parts.append(f"(the {len(rows)} busiest of {s['agents_holding']}; --holders N for more)")
    return "\n".join(parts)


def status_line(s: dict[str, Any]) -> str:
    c = s["counts"]
    waiting = sum(q["queued"] + q["parked"] for q in s["queue"])
    verifying = sum(q["verifying"] + q["landing"] for q in s["queue"])
    return (f"landed {c['landed']}/{s['total']} running {c['running']} submitted {c['submitted']} "
            f"ready {c['ready']} blocked {c['blocked']} failed {c['failed']} | queue: {verifying} verifying, "
            f"{waiting} waiting | {s['agents_holding']} agent(s) hold claims")


def render_queue(q: dict[str, Any]) -> str:
    if not q["repos"]:
        return "no repositories (mergebot repo add NAME ...)"
    parts = []
    for r in q["repos"]:
        d, w = r["depth"], r["window"]
        flags = (f"  PAUSED: {r['paused_reason'] or 'by an admin'}" if r["paused"] else "") + (
            f"  RED since {_short(r['red_since'])}" if r["red_since"] else "")
        parts.append(f"{r['name']} -> {r['target_branch']}: {d['queued']} queued, {d['verifying']} verifying, "
                     f"{d['landing']} landing, {d['parked']} parked; speculation window {w['in_flight']}/{w['max']} "
                     f"in flight{', batches of up to ' + str(w['batch']) if w.get('batch', 1) > 1 else ''}{flags}")
    jobs = q["verify_jobs"]
    parts.append(f"verify jobs: {jobs['queued']} waiting for a worker, {jobs['running']} running")
    verifying = [{**v, "sha": _short(v["sha"]), "job": f"{v['job_purpose'] or '-'} {v['job_status'] or ''}".strip(),
                  "since": _when(v["started_at"])} for v in q["verifying"]]
    parts += ["", "VERIFYING NOW", render_table(verifying, ("id", "repo", "subtask_id", "owner", "sha", "status",
                                                            "job", "worker_name", "since", "title"))]
    waiting = [{"#": i, **v, "sha": _short(v["sha"]), "queued_at": _when(v["queued_at"])}
               for i, v in enumerate(q["waiting"], start=1)]
    parts += ["", "WAITING (in landing order)", render_table(waiting, (
        "#", "id", "repo", "subtask_id", "owner", "priority", "unblocks", "status", "queued_at", "title"))]
    refusals = [{**r, "at": _when(r["at"]), "message": (r["message"] or "").splitlines()[0] if r["message"] else ""}
                for r in q["refusals"]]
    parts += ["", "RECENT REFUSALS", render_table(refusals, ("at", "repo", "subtask_id", "actor", "kind", "reason",
                                                             "message"))]
    return "\n".join(parts)


def queue_line(q: dict[str, Any]) -> str:
    repos = []
    for r in q["repos"]:
        d, w = r["depth"], r["window"]
        now = " ".join(f"#{v['subtask_id']}" for v in q["verifying"] if v["repo"] == r["name"]) or "-"
        repos.append(f"{r['name']}: verifying {now} (window {w['in_flight']}/{w['max']}), {d['queued']} queued, "
                     f"{d['parked']} parked{' PAUSED' if r['paused'] else ''}")
    last = q["refusals"][0] if q["refusals"] else None
    tail = f" | last refusal: {last['reason']} (subtask {last['subtask_id']})" if last else ""
    return "; ".join(repos) + tail


def render_tree(t: dict[str, Any]) -> str:
    nodes = t["nodes"]
    if not nodes:
        return "(no subtasks)"
    lines = [_tree_line(n, t["depth"]) for n in nodes]
    cut = sum(1 for n in nodes if n["children"] and n["depth"] == t["depth"])
    if t["truncated"] or cut:
        lines.append(f"\n(showing {len(nodes)} of {t['total']} node(s) to depth {t['depth']}"
                     f"{', more below ' + str(cut) + ' of them' if cut else ''}: --root ID to look inside one, "
                     "--depth N to go deeper, --limit N for more)")
    return "\n".join(lines)


def _tree_line(n: dict[str, Any], depth: int) -> str:
    text = f"{'  ' * n['depth']}#{n['id']} {n['status']:<9} {n['title']}"
    if n["owner"]:
        text += f"  @{n['owner']}"
    if n["waits_on"]:
        text += f"  waits on {_ids(n['waits_on'])}"
    if n["descendants"]:
        hidden = " (not shown)" if n["depth"] == depth else ""
        text += f"  [{n['descendants_landed']}/{n['descendants']} below landed{hidden}]"
    return text


def _watch_flag(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--watch", nargs="?", const=2.0, type=float, metavar="SECONDS",
                    help="keep the view live, refreshed every SECONDS (default 2) until Ctrl-C; when output is not "
                    "a terminal, print one line per change")


# -- parser -----------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mergebot", description=__doc__.split("\n")[0] if __doc__ else None)
    p.add_argument("--version", action="version", version=f"mergebot {__version__}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print JSON for machines")
    common.add_argument("--data-dir", help="data directory (default .mergebot, or MERGEBOT_DATA_DIR)")
    common.add_argument("--server", help=f"API base URL (default MERGEBOT_URL or {DEFAULT_URL})")
    common.add_argument("--token", help="agent token (default MERGEBOT_TOKEN)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, fn: Callable[[argparse.Namespace], None], help: str) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, parents=[common], help=help, description=help)
        sp.set_defaults(fn=fn)
        return sp

    sp = add("init", cmd_init, "create the data directory and database, and an admin agent (token shown once)")
    sp.add_argument("--admin", default="admin")
    sp = add("serve", cmd_serve, "run the server (API, waiter, recovery loop)")
    sp.add_argument("--host")
    sp.add_argument("--port", type=int)
    sp = add("demo", cmd_demo, "start a server on the embedded database and let simulated agents work a tree")
    sp.add_argument("--agents", type=int, default=4)

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

    repo = sub.add_parser("repo", help="managed repositories").add_subparsers(
        dest="repo_command", required=True, metavar="ACTION")
    sp = repo.add_parser("add", parents=[common], help="create or import a bare repository with its landing rules")
    sp.add_argument("name")
    sp.add_argument("--from", dest="source", help="import from a path or URL (default: a new, empty repository)")
    sp.add_argument("--verifier", required=True, help="the check run on every merged commit, e.g. 'python -m pytest'")
    sp.add_argument("--timeout", type=int, default=600, help="the check's time limit in seconds")
    sp.add_argument("--target", default="main", help="the branch Mergebot lands into")
    sp.add_argument("--protect", action="append", help="a path pattern agents may not change (repeatable; "
                    "'dir/' protects a folder)")
    sp.add_argument("--max-push-bytes", type=int, default=100 << 20, dest="max_push_bytes")
    sp.add_argument("--max-file-bytes", type=int, default=10 << 20, dest="max_file_bytes")
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
    sp.set_defaults(fn=cmd_repo_add)
    sp = repo.add_parser("list", parents=[common], help="list repositories")
    sp.set_defaults(fn=cmd_repo_list)
    for action, text in (("pause", "hold landing on a repository (admin)"),
                         ("resume", "resume landing; parked candidates go back to the queue (admin)")):
        sp = repo.add_parser(action, parents=[common], help=text)
        sp.add_argument("name")
        sp.set_defaults(fn=cmd_repo_hold)

    verifier = sub.add_parser("verifier", help="verifier workers").add_subparsers(
        dest="verifier_command", required=True, metavar="ACTION")
    sp = verifier.add_parser("worker", parents=[common], help="claim and run verify jobs from a bot over HTTP "
                             "(a verifier token)")
    sp.add_argument("--slots", type=int, default=1, help="jobs run at once, each with its own reused checkout")
    sp.add_argument("--work-dir", default=".mergebot-verifier", dest="work_dir")
    sp.add_argument("--sandbox", default="auto", choices=["auto", "bwrap", "none"])
    sp.add_argument("--heartbeat", type=float, default=10.0, help="seconds between lease renewals")
    sp.add_argument("--once", action="store_true", help="run at most one job per slot, then exit")
    sp.set_defaults(fn=cmd_verifier_worker)
    sp = add("verify", cmd_verify, "run a repository's check on one commit by hand and print the record")
    sp.add_argument("sha")
    sp.add_argument("--repo", required=True)
    sp.add_argument("--command", help="default: the repository's configured check")
    sp.add_argument("--timeout", type=int)
    sp.add_argument("--sandbox", default="auto", choices=["auto", "bwrap", "none"])
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

    sp = add("start", cmd_start, "claim a subtask and prepare a git worktree on the branch the claim names")
    sp.add_argument("--repo", required=True)
    sp.add_argument("--dir", default=".", help="the worktree (created by cloning if missing)")
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
    sp = add("claim", cmd_claim, "claim the best ready subtask (optionally completing the current one)")
    sp.add_argument("--complete", type=int, metavar="ID", help="submit this subtask first, fenced")
    sp.add_argument("--version", type=int, help="claim version of --complete")
    sp.add_argument("--sha", help="commit of --complete")
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
    sp = add("status", cmd_status, "subtasks by status, queue depth per repository, agents holding claims")
    sp.add_argument("--holders", type=int, default=20, help="list at most this many agents holding claims")
    _watch_flag(sp)
    sp = add("landed", cmd_landed, "what landed, newest first")
    sp.add_argument("--repo")
    sp.add_argument("--agent", "--owner", dest="owner", help="landed by this agent")
    sp.add_argument("--subtask", type=int)
    sp.add_argument("--since", type=parse_since, help="landed at or after: an age (30m, 2h, 3d, 1w) or a date or "
                    "time (2024-05-01, 2024-05-01T14:00; local time unless a zone is given)")
    sp.add_argument("--before", type=int, metavar="ID", help="only rows older than this landed id (paging)")
    sp.add_argument("--limit", type=int, default=50)
    sp = add("tree", cmd_tree, "the task tree: indentation, status, owner, unlanded dependencies, progress below")
    sp.add_argument("--root", type=int, metavar="ID", help="start at this subtask (default: every root)")
    sp.add_argument("--depth", type=int, default=3, help="levels below the root to show (default 3)")
    sp.add_argument("--limit", type=int, default=500, help="at most this many nodes (default 500, up to 5000)")
    sp = add("wait", cmd_wait, "wait until subtasks are landed, failed or cancelled")
    sp.add_argument("ids", type=int, nargs="+")
    sp.add_argument("--timeout", type=float, default=3600.0)
    return p


def main(argv: Sequence[str] | None = None) -> None:
    configure_logging()  # JSON lines unless stderr is a terminal; MERGEBOT_LOG_FORMAT, MERGEBOT_LOG_LEVEL
    args = build_parser().parse_args(argv)
    try:
        args.fn(args)
    except ApiError as e:
        print(f"mergebot: refused ({e.status} {e.code}): {e.message}", file=sys.stderr)
        raise SystemExit(3 if e.code == "claim_superseded" else 2 if e.status in (400, 413, 422) else 1) from None
    except MergebotError as e:
        print(f"mergebot: {e.message}", file=sys.stderr)
        raise SystemExit(3 if e.code == "claim_superseded" else 2 if e.status in (400, 413, 422) else 1) from None
    except httpx.HTTPError as e:
        print(f"mergebot: cannot reach the server ({e}); is 'mergebot serve' running, and is --server right?",
              file=sys.stderr)
        raise SystemExit(1) from None
    except OSError as e:
        print(f"mergebot: {e}", file=sys.stderr)
        raise SystemExit(1) from None
