"""Rendering: the Jinja2 environment (autoescaped: logs, titles and notes are written by agents), the filters
the templates use, the response headers every page carries, and the static files.

Pages are never cached (they show live data and a logged-out back button must not show them again), never
framed, and run only this site's script and stylesheet (no inline script or style: the CSP forbids them).
"""

from __future__ import annotations

from datetime import UTC, datetime
from importlib import resources
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse, Response
from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

from mergebot import __version__
from mergebot.web import present
from mergebot.web.present import STATUSES, finding_detail, link
from mergebot.web.session import Viewer

NAV = (("/ui/landed", "Landed"), ("/ui/queue", "Queue"), ("/ui/charts", "Charts"),
       ("/ui/timeline", "Timeline"), ("/ui/subtasks", "Subtasks"), ("/ui/agents", "Agents"),
       ("/ui/board", "Announcements & notes"), ("/ui/reconcile", "Reconciliation"))

SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
                               "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}

env = Environment(loader=PackageLoader("mergebot.web", "templates"), autoescape=select_autoescape(["html"]),
                  undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
env.filters.update(short=present.short, when=present.when, ago=present.ago, duration=present.duration,
                   size=present.size, tone=present.tone, summary=present.summary)
env.globals.update(link=link, statuses=STATUSES, finding_detail=finding_detail, nav=NAV, version=__version__,
                   repo_state=present.repo_state, unattested_text=present.unattested_text,
                   verdict_text=present.verdict_text, cut=present.cut)


def html(request: Request, template: str, who: Viewer | None, *, http_status: int = 200,
         **context: Any) -> HTMLResponse:
    body = env.get_template(template).render(viewer=who, path=request.url.path, now=datetime.now(UTC), **context)
    return HTMLResponse(body, status_code=http_status, headers=SECURITY_HEADERS)


def message(request: Request, who: Viewer | None, status: int, heading: str, text: str, **extra: Any) -> HTMLResponse:
    return html(request, "message.html", who, http_status=status, code=status, heading=heading, message=text,
                action=extra.get("action"), action_label=extra.get("action_label", ""))


STATIC_TYPES = {"pages.css": "text/css; charset=utf-8", "pages.js": "text/javascript; charset=utf-8"}
_STATIC_DIR = resources.files("mergebot.web").joinpath("static")
_static = {name: _STATIC_DIR.joinpath(name).read_bytes() for name in STATIC_TYPES}


def static(name: str) -> Response:
    if name not in _static:
        return Response("not found", status_code=404, media_type="text/plain")
    return Response(_static[name], media_type=STATIC_TYPES[name],
                    headers={"Cache-Control": "public, max-age=3600", "X-Content-Type-Options": "nosniff"})
