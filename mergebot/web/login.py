"""The pages' door: the login and logout forms, and the one reader of a form's body every page's form uses.

A visitor is sent here from any /ui URL (``deps.Who``); a token pasted into the form starts a session cookie
(``session``), checked on every later request. Everything else of the pages is ``mergebot.web.routes``.
"""

from __future__ import annotations

from urllib.parse import parse_qs

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response

from mergebot.web import present, render, session
from mergebot.web.deps import Site, Visitor

router = APIRouter(include_in_schema=False)

MAX_FORM_BYTES = 16 * 1024  # our forms hold a token, a CSRF token and a path


async def read_form(request: Request) -> dict[str, str] | None:
    """A URL-encoded form body, read up to ``MAX_FORM_BYTES`` (None when it is longer). The API's body limit
    covers /api/ only, and anyone may post to /login."""
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            return None
    try:
        fields = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True, max_num_fields=20)
    except ValueError:  # more fields than any of our forms has
        return None
    return {k: v[0] for k, v in fields.items()}


# -- login ----------------------------------------------------------------------------------------------------


@router.get("/")
async def home(who: Visitor) -> Response:
    return RedirectResponse("/ui/landed" if who else "/login", status_code=303)


@router.get("/login")
async def login_form(request: Request, who: Visitor) -> Response:
    return render.html(request, "login.html", None, next=present.safe_next(request.query_params.get("next")),
                       message=f"You are logged in as {who.agent.name}; log in again to switch." if who else "")


@router.post("/login")
async def login(request: Request, site: Site) -> Response:
    form = await read_form(request)
    if form is None:
        return render.html(request, "login.html", None, http_status=413, next="/ui/landed",
                           message="That is not a token: paste only the token.")
    token, target = form.get("token", "").strip(), present.safe_next(form.get("next"))
    origin = request.headers.get("origin")
    if origin and not session.same_origin(session.own_origin(request), origin, None):
        return render.html(request, "login.html", None, http_status=403, next=target,
                           message="This form was sent from another site; log in from this page.")
    agent = await site.db.agents.authenticate(token) if token and len(token) <= session.MAX_TOKEN else None
    if agent is None:
        return render.html(request, "login.html", None, http_status=401, next=target,
                           message="Unknown or revoked token. Paste the whole token, mb_ included.")
    response = RedirectResponse(target, status_code=303)
    session.start_session(response, request, token)
    return response


@router.get("/logout")
async def logout_form(request: Request, who: Visitor) -> Response:
    if who is None:
        return RedirectResponse("/login", status_code=303)
    return render.message(request, who, 200, "Log out", f"Log out {who.agent.name} from these pages?",
                          action="/logout", action_label="Log out")


@router.post("/logout")
async def logout(request: Request, who: Visitor) -> Response:
    form = await read_form(request) or {}
    if who is not None and not session.post_allowed(request, who, form.get(session.CSRF_FIELD)):
        return render.message(request, who, 403, "Refused", "This form did not come from this site's pages.")
    response = RedirectResponse("/login", status_code=303)
    session.end_session(response, request)
    return response
