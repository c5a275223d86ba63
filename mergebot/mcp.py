"""``mergebot mcp``: Mergebot's agent commands as Model Context Protocol tools, served over stdio.

Agents of 2026 take tools this way. Each tool is the same step as a CLI command, answering the same records
(a claim with its branch and handoff, a candidate with its typed ``verdict``), and every one goes through the
HTTP API with the token of the process (``MERGEBOT_TOKEN`` against ``MERGEBOT_URL``): identity is the token's,
never an argument. Worktrees are directories the agent names (``dir``), prepared by ``claim_and_start`` and
kept alive by a keeper as with ``mergebot start``. The agents' guide is the ``mergebot://guide`` resource and
the ``work_a_subtask`` prompt.

A refusal is a tool error (MCP's ``isError``) whose text is the server's sentence, so an agent reads why and
what to do in the same words as everywhere else.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from mergebot import __version__
from mergebot.agent import guide, keeper, submit, worktree
from mergebot.client import DEFAULT_URL, ApiError, Client
from mergebot.errors import MergebotError
from mergebot.messages.refs import subtask_ref

INSTRUCTIONS = ("Mergebot lands your work on main. Claim and start a subtask (claim_and_start), work and commit in "
                "the worktree it gives you, then submit_and_wait: the answer's verdict says what happened and what "
                "to do next. To wait on a commit already pushed, call wait_for_verdict, never submit it again. Read "
                "the mergebot://guide resource first.")


def _client() -> Client:
    return Client(os.environ.get("MERGEBOT_URL", DEFAULT_URL), os.environ.get("MERGEBOT_TOKEN"))


async def _call(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Run a blocking step off the event loop; a refusal becomes a tool error with the server's sentence."""
    try:
        return await asyncio.to_thread(fn, *args, **kwargs)
    except ApiError as e:
        raise ToolError(f"refused ({e.status} {e.code}): {e.message}") from None
    except MergebotError as e:
        raise ToolError(e.message) from None


def build_server() -> MCPServer:
    server = MCPServer("mergebot", version=__version__, instructions=INSTRUCTIONS)

    @server.tool()
    async def claim_and_start(repo: str, dir: str, carry: bool = False, wait: float = 0.0,
                              touch: list[str] | None = None) -> dict[str, Any]:
        """Claim the best ready subtask and prepare the worktree `dir` on the branch the claim names (cloned if
        missing). `wait`: seconds (up to 60) to wait for work when nothing is ready. `carry`: put the
        worktree's commits not on main onto the new claim's branch. `touch`: paths or globs you expect to change
        (they join the subtask's footprint). Returns the subtask, its branch, the worktree path, the handoff
        notes, the previous owner's branch, and the subtasks in flight that may touch the same paths
        (`overlaps`, with owners); a keeper then keeps the claim alive. When the claim is held back the answer says
        so instead (`refused`: `capacity`, the repository's queue is full, with `retry_after` seconds and the
        repositories that admit now in `elsewhere`; `wip_limit`, you hold your cap, named in `holds`: finish or
        release one) with its `message`."""
        server_url = os.environ.get("MERGEBOT_URL", DEFAULT_URL)
        token = os.environ.get("MERGEBOT_TOKEN", "")
        try:
            got = await asyncio.to_thread(worktree.start, _client(), server_url, token, repo, Path(dir), carry=carry,
                                          wait=wait, touch_paths=touch)
        except ApiError as e:
            if e.code in ("capacity", "wip_limit"):  # a typed "not now": the record, with its sentence and next step
                return {"claimed": None, "refused": e.code, **e.body.get("error", {})}
            raise ToolError(f"refused ({e.status} {e.code}): {e.message}") from None
        except MergebotError as e:
            raise ToolError(e.message) from None
        if got is None:
            return {"claimed": None, "message": "nothing is ready; call again with wait=60 to wait for work"}
        claim, body = got
        pid = await _call(keeper.spawn, Path(dir))
        previous = body["handoff"].get("previous")
        return {"subtask_id": claim.subtask_id, "claim_version": claim.claim_version,
                "branch": subtask_ref(claim.subtask_id, claim.claim_version), "worktree": str(Path(dir).resolve()),
                "title": body["subtask"]["title"], "description": body["subtask"].get("description", ""),
                "handoff_notes": body["handoff"]["notes"], "previous_branch": previous["branch"] if previous else None,
                "last_reason": body["handoff"].get("last_reason"), "carried": body.get("carried"),
                "footprint": body["subtask"].get("paths") or [], "overlaps": body.get("overlaps") or [],
                "kept_by_keeper_pid": pid}

    @server.tool()
    async def submit_and_wait(dir: str, ctx: Context, again: bool = False, timeout: float = 900.0) -> dict[str, Any]:
        """Push the worktree's HEAD to its claim's branch (or, with `again`, queue the branch's tip once more) and
        wait for the verdict, reporting each status as progress. Returns the candidate with its `verdict`."""
        client = _client()
        first = await _call(submit.push, client, Path(dir), wait=0, progress=False, again=again)
        if first["status"] != "waiting":
            return dict(first)
        notices = {"notices": first["notices"]} if first.get("notices") else {}  # the forecast, warnings
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        seen = "queued"
        while loop.time() < deadline:
            left = min(30.0, max(1.0, deadline - loop.time()))
            cand = await _call(client.get, f"/api/v1/candidates/{first['id']}", wait=round(left, 1))
            if cand["status"] != seen:
                seen = cand["status"]
                await ctx.report_progress(0, None, f"candidate {cand['id']}: {seen}")
            if cand["status"] in submit.STOPS:
                return {**cand, **notices}
        return {**first, "reason": f"no verdict within {timeout:.0f} s; call verdict later"}

    @server.tool()
    async def verdict(dir: str | None = None, subtask_id: int | None = None) -> dict[str, Any]:
        """The latest verdict on the worktree's subtask (or on `subtask_id`), with the subtask's branch and
        status: what happened to the newest push and what to do next."""
        if subtask_id is None:
            subtask_id = (await _call(worktree.current_claim, Path(dir or "."))).subtask_id
        sid = subtask_id
        sub = (await _call(_client().get, f"/api/v1/subtasks/{sid}"))["subtask"]
        return {"subtask_id": sid, "status": sub["status"], "claim_version": sub["claim_version"],
                "branch": sub.get("branch"), "candidate_id": sub.get("candidate_id"), "verdict": sub.get("verdict")}

    @server.tool()
    async def wait_for_verdict(ctx: Context, dir: str | None = None, subtask_id: int | None = None,
                               sha: str | None = None, timeout: float = 900.0) -> dict[str, Any]:
        """Wait for the verdict of exactly one commit: `sha` (default: the HEAD of the worktree `dir`) of the
        worktree's subtask (or of `subtask_id`), never a newer or older push's. Call this instead of submitting
        again while it is queued or verifying: re-queueing changes nothing. Returns `status` (queued, verifying,
        landed, rejected, ...; `unknown` while the commit has no candidate), `done`, `candidate_id` and the typed
        `verdict`; `done` is false when `timeout` seconds passed first."""
        if subtask_id is None or sha is None:
            where = Path(dir or ".")
            if subtask_id is None:
                subtask_id = (await _call(worktree.current_claim, where)).subtask_id
            if sha is None:
                sha = await _call(worktree.head_sha, where)
        client = _client()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        seen = None
        while True:
            left = max(0.0, min(30.0, deadline - loop.time()))
            out: dict[str, Any] = await _call(client.get, f"/api/v1/subtasks/{subtask_id}/verdict", sha=sha,
                                              wait=round(left, 1))
            if out["status"] != seen:
                seen = out["status"]
                await ctx.report_progress(0, None, f"{out['sha'][:12]}: {seen}")
            if out["done"] or loop.time() >= deadline:
                return out

    @server.tool()
    async def heartbeat(dir: str) -> dict[str, Any]:
        """Renew the worktree's claim now (the keeper does this while you work; this is for long silent steps)."""
        claim = await _call(worktree.current_claim, Path(dir))
        out: dict[str, Any] = await _call(_client().post, f"/api/v1/subtasks/{claim.subtask_id}/heartbeat",
                                          {"claim_version": claim.claim_version})
        return out

    @server.tool()
    async def release(dir: str, reason: str = "") -> dict[str, Any]:
        """Give the worktree's subtask back (its keeper stops): the next agent can claim it."""
        claim = await _call(worktree.current_claim, Path(dir))
        await _call(keeper.stop, Path(dir))
        body: dict[str, Any] = {"claim_version": claim.claim_version, **({"reason": reason} if reason else {})}
        out: dict[str, Any] = await _call(_client().post, f"/api/v1/subtasks/{claim.subtask_id}/release", body)
        return out

    @server.tool()
    async def note(dir: str, body: str) -> dict[str, Any]:
        """Leave a note on the worktree's subtask (plans, progress); the next owner reads the notes."""
        claim = await _call(worktree.current_claim, Path(dir))
        out: dict[str, Any] = await _call(_client().post, f"/api/v1/subtasks/{claim.subtask_id}/notes",
                                          {"body": body, "claim_version": claim.claim_version})
        return out

    @server.tool()
    async def handoff(dir: str, done: str = "", remains: str = "", tried: list[str] | None = None,
                      checks: list[str] | None = None) -> dict[str, Any]:
        """Leave a structured handoff note (what was done, the commits, the checks run, what remains, what failed)
        for the next owner of the worktree's subtask."""
        claim = await _call(worktree.current_claim, Path(dir))
        text = await _call(worktree.handoff_note, Path(dir), done=done, remains=remains, tried=tried or [],
                           checks=checks or [])
        out: dict[str, Any] = await _call(_client().post, f"/api/v1/subtasks/{claim.subtask_id}/notes",
                                          {"body": text, "claim_version": claim.claim_version})
        return out

    @server.tool()
    async def read_board(group: str | None = None, limit: int = 50) -> dict[str, Any]:
        """The announcements and the newest notes (of `group`, if given): the plan, and what others are doing."""
        client = _client()
        anns = (await _call(client.get, "/api/v1/announcements", limit=limit))["announcements"]
        notes = (await _call(client.get, "/api/v1/notes", group=group, limit=limit))["notes"]
        return {"announcements": anns, "notes": notes}

    @server.tool()
    async def ready_work(limit: int = 20) -> dict[str, Any]:
        """Subtasks ready to be claimed now, in id order."""
        out = await _call(_client().get, "/api/v1/subtasks", status="ready", limit=limit)
        return {"subtasks": out["subtasks"]}

    @server.resource("mergebot://guide", name="guide", title="Working with Mergebot", mime_type="text/markdown")
    def guide_resource() -> str:
        """The guide for agents: the loop, how claims are kept, every verdict kind and what to do about it."""
        return guide.text()

    @server.prompt(title="Work a subtask with Mergebot")
    def work_a_subtask(repo: str, dir: str) -> str:
        """Instructions to claim, work, submit and act on the verdict, with the guide."""
        return (f"Work one subtask of repository {repo!r} with Mergebot, in the directory {dir!r}. Call "
                f"claim_and_start(repo={repo!r}, dir={dir!r}), read the title and the handoff notes, do the work, "
                "commit it with git, then call submit_and_wait. Act on the verdict's `next`.\n\n" + guide.text())

    return server


def run() -> None:
    build_server().run("stdio")
