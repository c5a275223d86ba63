"""What an agent or a lead does, through the HTTP API: claim, work, submit, talk, and look at subtasks.

Every command here is a request with a token (``--token``/MERGEBOT_TOKEN against ``--server``/MERGEBOT_URL),
so identity is always the token's and the server decides: a refusal comes back as an ``ApiError`` for
``main`` to print. ``start``, ``submit`` (without an ID) and ``handoff`` also work a git worktree, through
``mergebot.agent``, imported as ``worktree`` so it is not mistaken for this module.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from mergebot import messages as say
from mergebot.cli.render import conflict_lines, emit, worktree_next
from mergebot.client import DEFAULT_URL, Client
from mergebot.table import cell as _cell
from mergebot.table import render_table


def server_from(args: argparse.Namespace) -> str:
    """The server a command talks to: ``--server``, else MERGEBOT_URL, else the default (an empty one is unset)."""
    server: str = getattr(args, "server", None) or os.environ.get("MERGEBOT_URL") or DEFAULT_URL
    return server


def client_from(args: argparse.Namespace) -> Client:
    token = args.token or os.environ.get("MERGEBOT_TOKEN")
    return Client(server_from(args), token)


def cmd_repo_list(args: argparse.Namespace) -> None:
    out = client_from(args).get("/api/v1/repos")
    emit(args, out, out["repos"], ("name", "target_branch", "verifier_command", "protected_paths", "paused"))


def cmd_reconcile(args: argparse.Namespace) -> None:
    out = client_from(args).post("/api/v1/reconcile")
    rows = [{k: (len(v) if isinstance(v, list) else v) for k, v in r.items()} for r in out["reports"]]
    emit(args, out, rows, ("repo", "finished", "rolled_back", "requeued", "enqueued", "unexplained",
                           "landed_not_on_main", "unattested"))


def cmd_start(args: argparse.Namespace) -> None:
    from mergebot.agent import keeper, worktree

    token = args.token or os.environ.get("MERGEBOT_TOKEN") or ""
    server = server_from(args)
    wt = Path(args.dir)
    got = worktree.start(client_from(args), server, token, args.repo, wt, carry=args.carry, wait=args.wait,
                         touch_paths=args.touch)
    if got is None:  # not a success: a script looping on `start` must tell "no work" from work
        if args.json:
            emit(args, {"claimed": None, "message": say.nothing_ready(args.wait)})
        else:
            print(say.start_nothing_ready(args.wait), file=sys.stderr)
        raise SystemExit(4)
    claim, body = got
    kept = None if args.no_keeper else keeper.spawn(wt)
    out = {"subtask": claim.subtask_id, "claim_version": claim.claim_version, "branch": claim.branch,
           "worktree": str(wt.resolve()), "title": body["subtask"]["title"], "carried": body.get("carried"),
           "keeper_pid": kept, "handoff": body["handoff"], "footprint": body["subtask"].get("paths") or [],
           "overlaps": body.get("overlaps") or []}
    if args.json:
        emit(args, out)
        return
    emit(args, {k: v for k, v in out.items() if k not in ("handoff", "carried", "keeper_pid", "overlaps")})
    if out["overlaps"]:
        print("\n" + say.OVERLAPS_HEADING)
        for o in out["overlaps"]:
            print(say.overlap_line(o["id"], o["title"], o["status"], o["owner"], o["paths"]))
    if body.get("carried"):
        c = body["carried"]
        print("\n" + say.carried(c["commits"], c["branch"], claim.branch))
    if kept:
        print("\n" + say.keeper_running(kept, keeper.idle_limit() / 60))
    if body["handoff"]["notes"]:
        print("\n" + say.HANDOFF_HEADING)
        for n in body["handoff"]["notes"]:
            print(f"--- {n['author']} (claim version {n['claim_version']})\n{n['body']}")


def cmd_stop(args: argparse.Namespace) -> None:
    """Stop the worktree's keeper: the claim is no longer renewed and lapses after its lease."""
    from mergebot.agent import keeper, worktree

    claim = worktree.current_claim(Path(args.dir))
    stopped = keeper.stop(Path(args.dir))
    emit(args, {"subtask": claim.subtask_id, "claim_version": claim.claim_version, "keeper_stopped": stopped,
                "message": say.KEEPER_STOPPED if stopped else say.NO_KEEPER})


def cmd_push(args: argparse.Namespace) -> None:
    from mergebot import agent as worktree

    result = worktree.push(client_from(args), Path(args.dir), wait=args.timeout, progress=not args.json,
                           again=args.again)
    if not args.json:
        for line in result.get("notices") or []:
            print(line, file=sys.stderr)
    if args.json:
        emit(args, result)
    elif result["status"] == "landed":
        print(say.landed(result["sha"], result.get("merged_sha")))
    else:
        verdict = result.get("verdict") or {}
        print(f"{verdict.get('kind') or result['status']}: {verdict.get('message') or result.get('reason') or ''}"
              .rstrip(), file=sys.stderr)
        for line in conflict_lines(verdict):
            print(line, file=sys.stderr)
        claim = worktree.current_claim(Path(args.dir))
        step = worktree_next(verdict, claim.repo, args.dir, claim.subtask_id)
        if step:
            print(say.push_next(step), file=sys.stderr)
    if not args.json and (result.get("verdict") or {}).get("sandbox") == "none":
        print(say.NO_SANDBOX, file=sys.stderr)
    if result["status"] != "landed":
        raise SystemExit(5)


def cmd_handoff(args: argparse.Namespace) -> None:
    from mergebot import agent as worktree

    claim = worktree.current_claim(Path(args.dir))
    body = worktree.handoff_note(Path(args.dir), done=args.done or "", remains=args.remains or "",
                                 tried=args.tried or [], checks=args.check or [])
    out = client_from(args).post(f"/api/v1/subtasks/{claim.subtask_id}/notes",
                                 {"body": body, "claim_version": claim.claim_version})
    emit(args, out["note"])


def cmd_repo_hold(args: argparse.Namespace) -> None:
    out = client_from(args).post(f"/api/v1/repos/{args.name}/{args.repo_command}")
    emit(args, out["repo"])


def _accept_files(specs: list[Any], base: Path) -> list[dict[str, str]]:
    """``LOCAL_FILE:REPO_PATH`` (or ``{file, path}`` in a tree file) as the API's acceptance files; a local path is
    read relative to ``base``."""
    out = []
    for spec in specs:
        if isinstance(spec, dict):
            local, target = str(spec.get("file", "")), str(spec.get("path", ""))
        else:
            local, _, target = str(spec).partition(":")
        if not local or not target:
            raise SystemExit(say.create_bad_acceptance(spec))
        try:
            text = (base / local).read_text("utf-8")
        except OSError as e:
            raise SystemExit(say.create_unreadable_acceptance(local, e.strerror)) from e
        out.append({"path": target, "text": text})
    return out


def _attach(c: Any, args: argparse.Namespace, subtask_id: int, files: list[dict[str, str]]) -> dict[str, Any]:
    repo = args.repo
    if not repo:
        repos = c.get("/api/v1/repos")["repos"]
        if len(repos) != 1:
            raise SystemExit(say.CREATE_NEEDS_REPO)
        repo = repos[0]["name"]
    out: dict[str, Any] = c.put(f"/api/v1/subtasks/{subtask_id}/acceptance", {"repo": repo, "files": files})
    return out


def _pop_accept(items: Any, found: dict[str, list[Any]]) -> None:
    """Take the ``accept:`` entries out of a tree's nodes (the batch API does not take them), by node key."""
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict):
            if "accept" in item:
                found[str(item.get("key"))] = list(item.pop("accept") or [])
            _pop_accept(item.get("children"), found)


def cmd_create(args: argparse.Namespace) -> None:
    c = client_from(args)
    if args.file:
        from mergebot.tree import parse_tree, read_tree_file, subtasks_of

        path = Path(args.file)
        data = subtasks_of(read_tree_file(path))  # missing, unreadable, not YAML/JSON: Invalid, named (exit 2)
        accept: dict[str, list[Any]] = {}
        _pop_accept(data, accept)
        parse_tree(data)  # refuse locally first, with the field named
        by_key = {key: _accept_files(specs, path.parent) for key, specs in accept.items()}
        out = c.post("/api/v1/subtasks/batch", {"subtasks": data, "key_prefix": args.key or path.stem,
                                                "allow_duplicate": args.allow_duplicate})
        for key, attached in by_key.items():
            out["subtasks"][key]["acceptance"] = _attach(c, args, out["subtasks"][key]["id"], attached)
        rows = [{"key": k, **v} for k, v in out["subtasks"].items()]
        emit(args, out, rows, ("key", "id", "status"))
        return
    if not args.title:
        raise SystemExit(say.CREATE_NEEDS_TITLE)
    body = {"title": args.title, "description": args.description or "", "priority": args.priority,
            "depends_on": args.depends_on or [], "idempotency_key": args.key, "group": args.group,
            "parent_id": args.parent, "max_attempts": args.max_attempts, "paths": args.paths,
            "allow_duplicate": args.allow_duplicate or None}
    files = _accept_files(args.accept or [], Path.cwd())
    out = c.post("/api/v1/subtasks", {k: v for k, v in body.items() if v is not None})
    s = out["subtask"]
    if files:
        out["acceptance"] = _attach(c, args, s["id"], files)
    emit(args, out, [s], ("id", "status", "title", "priority", "depends_on"))


def cmd_claim(args: argparse.Namespace) -> None:
    c = client_from(args)
    body: dict[str, Any] = {}
    if args.complete:
        body["complete"] = {"id": args.complete, "claim_version": args.version, "sha": args.sha}
    if args.wait:
        body["wait"] = args.wait
    if args.repo:
        body["repo"] = args.repo
    out = c.post("/api/v1/subtasks/claim", body or None)
    if out is None:
        emit(args, {"claimed": None, "message": say.NOTHING_READY})
        return
    s = out["subtask"]
    emit(args, out, [{"id": s["id"], "claim_version": s["claim_version"], "title": s["title"],
                      "branch": out["branch"], "lease_expires_at": s["lease_expires_at"]}])
    if not args.json and out["handoff"]["notes"]:
        print("\n" + say.CLAIM_HANDOFF_HEADING)
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
        raise SystemExit(say.SUBMIT_NEEDS_VERSION)
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
              "previous_owner", "acceptance"):
        print(f"{k:>16}: {_cell(s.get(k))}")
    print()
    print(render_table(events, ("at", "actor", "from_status", "to_status", "claim_version", "detail")))


def cmd_allow(args: argparse.Namespace) -> None:
    """A lead or admin allows a subtask what its owner may not decide for itself."""
    if args.test_removal is None and args.check_changes is None and args.behaviour_change is None:
        raise SystemExit(say.ALLOW_NEEDS_WHAT)
    out = client_from(args).post(f"/api/v1/subtasks/{args.id}/allow", {
        "test_removal": args.test_removal, "check_changes": args.check_changes,
        "behaviour_change": args.behaviour_change})
    emit(args, {k: out["subtask"][k] for k in ("id", "title", "status", "allow_test_removal", "allow_check_changes",
                                               "allow_behaviour_change")})


def cmd_guide(args: argparse.Namespace) -> None:
    from mergebot.agent import guide

    if args.json:
        emit(args, {"guide": guide.text()})
    else:
        print(guide.text())


def cmd_mcp(args: argparse.Namespace) -> None:
    """Serve the agent commands as MCP tools over stdio (``mergebot.mcp``), with this process's token."""
    from mergebot import mcp

    if args.server:
        os.environ["MERGEBOT_URL"] = args.server
    if args.token:
        os.environ["MERGEBOT_TOKEN"] = args.token
    mcp.run()
