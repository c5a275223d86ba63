"""``mergebot mcp`` end to end: the MCP SDK's own stdio client drives the tools against a real server.

An agent that takes tools the MCP way claims and starts, commits, submits and lands; acts on a conflict verdict
(rebase, resolve, submit again) and lands; and is refused, with the reason, once its claim has gone to another.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from mergebot import agent
from tests.support.bot import Fleet, commit, git


@asynccontextmanager
async def mcp_session(fleet: Fleet, who: str) -> AsyncIterator[ClientSession]:
    env = {**os.environ, "MERGEBOT_URL": fleet.bot.url, "MERGEBOT_TOKEN": fleet.tokens[who]}
    params = StdioServerParameters(command=sys.executable, args=["-m", "mergebot", "mcp"], env=env)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


async def call(session: ClientSession, tool: str, progress: list[str] | None = None, **args: Any) -> dict[str, Any]:
    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        if progress is not None and message:
            progress.append(message)

    result: Any = await session.call_tool(tool, args, progress_callback=on_progress)
    text = "".join(getattr(c, "text", "") for c in result.content)
    if result.is_error:
        return {"error": text}
    data: dict[str, Any] = result.structured_content or json.loads(text)
    return data.get("result", data) if set(data) == {"result"} else data


async def test_mcp_tools_claim_submit_land_resolve_a_conflict_and_refuse_a_stale_claim(fleet: Fleet) -> None:
    for title in ("one", "two", "three", "four"):
        await fleet.db.subtasks.create_subtask(actor_id=None, title=title)
    ann_wt = fleet.work / "ann-mcp"
    async with mcp_session(fleet, "ann") as ann:
        tools = {t.name for t in (await ann.list_tools()).tools}
        assert {"claim_and_start", "submit_and_wait", "verdict", "wait_for_verdict", "release", "heartbeat", "note",
                "handoff", "read_board", "ready_work"} <= tools
        guide = await ann.read_resource("mergebot://guide")
        assert "conflict" in "".join(getattr(c, "text", "") for c in guide.contents)
        prompt = await ann.get_prompt("work_a_subtask", {"repo": "demo", "dir": str(ann_wt)})
        assert "claim_and_start" in str(prompt.messages[0].content)

        # claim, commit, submit: landed
        started = await call(ann, "claim_and_start", repo="demo", dir=str(ann_wt))
        assert started["branch"] == f"refs/heads/subtasks/{started['subtask_id']}/v1" and started["title"] == "one"
        assert Path(started["worktree"]) == ann_wt.resolve() and started["kept_by_keeper_pid"]
        commit(ann_wt, {"one.txt": "one\n"})
        progress: list[str] = []
        landed = await call(ann, "submit_and_wait", progress, dir=str(ann_wt))
        assert landed["status"] == "landed" and landed["verdict"]["kind"] == "landed", landed
        # waiting keyed on (subtask, commit): the worktree's HEAD is that landed candidate; its parent has none
        waited = await call(ann, "wait_for_verdict", dir=str(ann_wt), timeout=5)
        assert (waited["done"], waited["status"], waited["candidate_id"], waited["sha"]) == (
            True, "landed", landed["id"], landed["sha"]), waited
        assert waited["verdict"]["kind"] == "landed"
        parent = git(["rev-parse", "HEAD~1"], ann_wt).stdout.strip()
        older = await call(ann, "wait_for_verdict", subtask_id=started["subtask_id"], sha=parent, timeout=0)
        assert (older["done"], older["status"], older["candidate_id"]) == (False, "unknown", None), older

        # a conflict: bob lands first on the same line; ann acts on the verdict and lands
        second = await call(ann, "claim_and_start", repo="demo", dir=str(ann_wt))
        assert second["title"] == "two"
        _, bob_wt = fleet.start("bob")  # bob takes "three"
        commit(bob_wt, {"notes.txt": "line 1\nBOB\nline 3\n"})
        commit(ann_wt, {"notes.txt": "line 1\nANN\nline 3\n"})
        assert agent.push(fleet.client("bob"), bob_wt, wait=60, progress=False)["status"] == "landed"
        rejected = await call(ann, "submit_and_wait", dir=str(ann_wt))
        v = rejected["verdict"]
        assert (v["kind"], v["paths"]) == ("conflict", ["notes.txt"]) and "BOB" in v["hunks"][0]["hunks"][0]
        seen = await call(ann, "verdict", dir=str(ann_wt))
        assert seen["verdict"]["kind"] == "conflict" and seen["candidate_id"] == rejected["id"]
        git(["fetch", "-q", "origin", "main"], ann_wt)
        git(["rebase", "origin/main"], ann_wt, check=False)  # stops on the conflict the verdict named
        (ann_wt / "notes.txt").write_text("line 1\nBOB\nANN\nline 3\n")
        git(["add", "notes.txt"], ann_wt)
        assert git(["-c", "core.editor=true", "rebase", "--continue"], ann_wt, check=False).returncode == 0
        resolved = await call(ann, "submit_and_wait", dir=str(ann_wt))
        assert resolved["status"] == "landed", resolved
        assert progress and all(p.startswith("candidate ") for p in progress)

        # a stale claim: ann's third claim is released and goes to bob; ann's push is refused with the reason
        third = await call(ann, "claim_and_start", repo="demo", dir=str(ann_wt))
        assert third.get("title") == "four", third
        commit(ann_wt, {"three.txt": "three\n"})
        released = await call(ann, "release", dir=str(ann_wt), reason="handing it over")
        assert released["subtask"]["status"] == "ready"
        bob2 = agent.start(fleet.client("bob"), fleet.bot.url, fleet.tokens["bob"], "demo", fleet.work / "bob2")
        assert bob2 is not None and bob2[0].claim_version == 2
        refused = await call(ann, "submit_and_wait", dir=str(ann_wt))
        assert refused["status"] == "refused" and refused["verdict"]["kind"] == "stale_claim", refused
        assert "--carry" in refused["verdict"]["next"]
        beat = await call(ann, "heartbeat", dir=str(ann_wt))
        assert "claim superseded" in beat["error"] and "bob holds it at claim version 2" in beat["error"], beat
