"""The bot's side of the git hooks. Internal: reached only by the hooks of a push the bot itself is serving.

A hook sends git's ref updates as the request body (``old new ref`` lines, exactly as git gave them), its push
id and quarantine directory as headers, and prints the text answer; 200 accepts, anything else refuses. The
push id is the one the git HTTP endpoint registered for the authenticated agent; an unknown id is refused, so
nobody can judge or queue a push they did not make over HTTP.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse

from mergebot.git import repo as git
from mergebot.landing.prereceive import accept_push, judge_push, parse_updates
from mergebot.landing.store import LandingStore

router = APIRouter(prefix="/internal/hooks", include_in_schema=False)
MAX_UPDATES = 1000


def _answer(message: str, status: int = 200) -> PlainTextResponse:
    return PlainTextResponse(message + ("\n" if message else ""), status_code=status)


async def _read(request: Request) -> tuple[Any, list[list[str]], str | None]:
    session = request.app.state.git.sessions.get(request.headers.get("x-mergebot-push-id", ""))
    body = (await request.body()).decode("utf-8", "replace")
    lines = [line.split(" ") for line in body.splitlines() if line.strip()]
    return session, lines, request.headers.get("x-mergebot-quarantine") or None


@router.post("/pre-receive")
async def pre_receive(request: Request) -> PlainTextResponse:
    session, lines, quarantine = await _read(request)
    if session is None:
        return _answer("Mergebot: unknown push; push over HTTP through `mergebot serve`.", 403)
    try:
        if len(lines) > MAX_UPDATES:
            raise ValueError(f"more than {MAX_UPDATES} ref updates in one push")
        updates = parse_updates(lines)
        store: LandingStore = request.app.state.store
        repo = await store.get_repo(session.repo)
        verdict = await judge_push(store, repo, git.bare_path(request.app.state.repos_root, repo.name),
                                   session.agent, quarantine, updates)
    except ValueError as e:
        return _answer(f"Mergebot: malformed push: {e}", 400)
    return _answer(verdict.message, 200 if verdict.ok else 403)


@router.post("/post-receive")
async def post_receive(request: Request) -> PlainTextResponse:
    session, lines, _ = await _read(request)
    if session is None:
        return _answer("Mergebot: unknown push.", 403)
    try:
        if len(lines) > MAX_UPDATES:
            raise ValueError(f"more than {MAX_UPDATES} ref updates in one push")
        updates = parse_updates(lines)
    except ValueError as e:
        return _answer(f"Mergebot: malformed push: {e}", 400)
    store: LandingStore = request.app.state.store
    repo = await store.get_repo(session.repo)
    candidates = await accept_push(store, repo, session.agent, updates)
    request.app.state.queue.poke()
    return _answer("\n".join(f"Mergebot: queued subtask {c.subtask_id} v{c.claim_version} ({c.sha[:12]}) as "
                             f"candidate {c.id}; `mergebot wait {c.subtask_id}` follows it." for c in candidates))
