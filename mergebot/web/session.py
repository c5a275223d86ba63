"""Who is looking at a page: the login cookie, and the checks every form post passes.

Rules:
  * A visitor logs in by pasting their bearer token into /login. The token is checked exactly as the API
    checks it (``db.agents.authenticate``: SHA-256 lookup, constant-time compare, revoked tokens refused) and kept
    in a cookie that scripts cannot read (HttpOnly), that no other site's request carries (SameSite=Strict),
    and that travels only over https when the page was served over https (Secure).
  * Every request authenticates the cookie again, so a revoked or rotated token stops working at once.
  * Every role may read. Anything else a page does is checked against ``mergebot.auth.PERMISSIONS``.
  * Every POST but the login form carries a CSRF token derived from the session's token (an HMAC keyed by its
    hash, so it is useless without the cookie and differs per token) and must come from this site: its Origin
    header, or failing that its Referer, names this origin. A POST with neither is refused.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from urllib.parse import urlsplit

from fastapi import Request
from fastapi.responses import RedirectResponse, Response

from mergebot import auth
from mergebot.db.database import Database
from mergebot.models import Agent
from mergebot.web.present import link

COOKIE = "mergebot_session"
CSRF_FIELD = "csrf"
MAX_TOKEN = 200  # longer than any token we issue; longer input is refused before hashing
SESSION_SECONDS = 12 * 3600


@dataclass
class Viewer:
    agent: Agent
    csrf: str

    @property
    def role(self) -> auth.Role:
        return auth.Role(self.agent.role)

    def may(self, action: str) -> bool:
        return auth.allowed(self.role, action)


def csrf_token(token: str) -> str:
    return hmac.new(auth.hash_token(token), b"mergebot pages csrf v1", hashlib.sha256).hexdigest()


def csrf_matches(expected: str, submitted: str | None) -> bool:
    return bool(submitted) and hmac.compare_digest(expected.encode(), (submitted or "").encode())


def origin_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}".lower() if parts.scheme and parts.netloc else ""


def same_origin(own: str, origin: str | None, referer: str | None) -> bool:
    """Whether a POST comes from this site. Origin decides when present ("null" never matches); else Referer."""
    own = own.lower()
    if origin:
        return origin.lower() == own
    if referer:
        return origin_of(referer) == own
    return False


def own_origin(request: Request) -> str:
    return f"{request.url.scheme}://{request.url.netloc}".lower()


def is_https(request: Request) -> bool:
    public = str(getattr(request.app.state.settings, "public_url", "") or "")
    return request.url.scheme == "https" or public.startswith("https://")


async def viewer(db: Database, request: Request) -> Viewer | None:
    """The logged-in agent, re-authenticated from the cookie on every request; None for a visitor."""
    token = request.cookies.get(COOKIE, "")
    if not token or len(token) > MAX_TOKEN:
        return None
    agent = await db.agents.authenticate(token)
    return Viewer(agent, csrf_token(token)) if agent is not None else None


def to_login(request: Request) -> RedirectResponse:
    """Send a visitor to the login form, remembering where they were going (a path on this site)."""
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse(link("/login", next=target), status_code=303)


def start_session(response: Response, request: Request, token: str) -> None:
    response.set_cookie(COOKIE, token, max_age=SESSION_SECONDS, path="/", httponly=True, samesite="strict",
                        secure=is_https(request))


def end_session(response: Response, request: Request) -> None:
    response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict", secure=is_https(request))


def post_allowed(request: Request, who: Viewer, submitted_csrf: str | None) -> bool:
    """A form post is from this site and carries this session's CSRF token."""
    return same_origin(own_origin(request), request.headers.get("origin"), request.headers.get("referer")) \
        and csrf_matches(who.csrf, submitted_csrf)
