"""The bot's side of the git hooks. Internal: reached only by the hooks of a push the bot itself is serving.

A hook sends git's ref updates as the request body (``old new ref`` lines, exactly as git gave them), its push
id and quarantine directory as headers, and prints the text answer; 200 accepts, anything else refuses. The
push id is the one the git HTTP endpoint registered for the authenticated agent; an unknown id is refused, so
nobody can judge or queue a push they did not make over HTTP.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse

from mergebot import messages as say
from mergebot.api.deps import ServicesDep
from mergebot.api.services import Services
from mergebot.git import repo as git
from mergebot.git.smarthttp import PushSession
from mergebot.landing.intake.checks import RefUpdate
from mergebot.landing.intake.prereceive import answer_post_receive, judge_push, parse_updates

router = APIRouter(prefix="/internal/hooks", include_in_schema=False)
MAX_UPDATES = 1000


def _answer(message: str, status: int = 200) -> PlainTextResponse:
    return PlainTextResponse(message + ("\n" if message else ""), status_code=status)


async def _read(request: Request, services: Services) -> tuple[PushSession, list[RefUpdate]] | PlainTextResponse:
    """The push this hook speaks for and its ref updates, or the answer that refuses it. The body is read first:
    one over the API's limit is refused (413) before anything else is looked at."""
    body = (await request.body()).decode("utf-8", "replace")
    session = services.git.sessions.get(request.headers.get("x-mergebot-push-id", ""))
    if session is None:
        return _answer(say.UNKNOWN_PUSH, 403)
    lines = [line.split(" ") for line in body.splitlines() if line.strip()]
    try:
        if len(lines) > MAX_UPDATES:
            raise ValueError(f"more than {MAX_UPDATES} ref updates in one push")
        return session, parse_updates(lines)
    except ValueError as e:
        return _answer(say.malformed_push(str(e)), 400)


@router.post("/pre-receive")
async def pre_receive(request: Request, services: ServicesDep) -> PlainTextResponse:
    """Judge the push on its quarantined objects: 200 accepts it, 403 refuses it with the reasons."""
    return await _hook("pre-receive", request, services)


@router.post("/post-receive")
async def post_receive(request: Request, services: ServicesDep) -> PlainTextResponse:
    """Queue what git accepted, and say so."""
    return await _hook("post-receive", request, services)


async def _hook(stage: str, request: Request, services: Services) -> PlainTextResponse:
    read = await _read(request, services)
    if isinstance(read, PlainTextResponse):
        return read
    session, updates = read
    db = services.db
    repo = await db.repos.get_repo(session.repo)
    if stage == "post-receive":
        _, answer = await answer_post_receive(db, repo, session.agent, updates,
                                              git.bare_path(services.root, repo.name), session.started,
                                              machine=session.verdicts)
        services.queue.poke()
        return _answer(answer)
    try:
        verdict = await judge_push(db, repo, git.bare_path(services.root, repo.name), session.agent,
                                   request.headers.get("x-mergebot-quarantine") or None, updates)
    except ValueError as e:  # a quarantine directory that is not this repository's
        return _answer(say.malformed_push(str(e)), 400)
    return _answer(verdict.answer(session.verdicts), 200 if verdict.ok else 403)
