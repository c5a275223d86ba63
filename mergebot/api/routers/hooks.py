"""The bot's side of the git hooks. Internal: reached only by the hooks of a push the bot itself is serving.

A hook names its push by the id the git HTTP endpoint registered for the authenticated agent; an unknown id is
refused, so nobody can judge or queue a push they did not make over HTTP.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from mergebot.git import repo as git
from mergebot.landing.prereceive import accept_push, judge_push, parse_updates
from mergebot.landing.store import LandingStore

router = APIRouter(prefix="/internal/hooks", include_in_schema=False)


class HookIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    push_id: Annotated[str, Field(min_length=10, max_length=100)]
    quarantine: Annotated[str, Field(max_length=4096)] | None = None
    updates: Annotated[list[list[str]], Field(max_length=1000)]


def _answer(ok: bool, message: str, status: int = 200) -> JSONResponse:
    return JSONResponse({"ok": ok, "message": message}, status_code=status)


def _session(request: Request, push_id: str) -> Any:
    return request.app.state.git.sessions.get(push_id)


@router.post("/pre-receive")
async def pre_receive(body: HookIn, request: Request) -> JSONResponse:
    session = _session(request, body.push_id)
    if session is None:
        return _answer(False, "Mergebot: unknown push; push over HTTP through `mergebot serve`.", 403)
    try:
        updates = parse_updates(body.updates)
    except ValueError as e:
        return _answer(False, f"Mergebot: malformed ref update: {e}", 400)
    store: LandingStore = request.app.state.store
    repo = await store.get_repo(session.repo)
    try:
        verdict = await judge_push(store, repo, git.bare_path(request.app.state.repos_root, repo.name), session.agent,
                                   body.quarantine, updates)
    except ValueError as e:
        return _answer(False, f"Mergebot: {e}", 400)
    return _answer(verdict.ok, verdict.message)


@router.post("/post-receive")
async def post_receive(body: HookIn, request: Request) -> JSONResponse:
    session = _session(request, body.push_id)
    if session is None:
        return _answer(False, "Mergebot: unknown push.", 403)
    store: LandingStore = request.app.state.store
    repo = await store.get_repo(session.repo)
    candidates = await accept_push(store, repo, session.agent, parse_updates(body.updates))
    request.app.state.queue.poke()
    lines = [f"Mergebot: queued subtask {c.subtask_id} v{c.claim_version} ({c.sha[:12]}) as candidate {c.id}; "
             f"`mergebot wait {c.subtask_id}` follows it." for c in candidates]
    return _answer(True, "\n".join(lines))
