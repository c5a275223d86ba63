"""What the security tests share: the app in-process with one agent of each role, raw HTTP and git credentials,
a repository's refs, and the app's routes as FastAPI declares them (with the role each one requires).
"""

from __future__ import annotations

import base64
import http.client
import inspect
import re
from collections.abc import Iterator
from typing import Any

import httpx
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient

from mergebot.auth import Role
from tests.support.bot import Fleet

ZERO = "0" * 40


class Api:
    """The app in-process on a real database, with tokens made through the owner's db (the ``roles_api``
    fixture: one agent of each of ``ROLES``, bodies capped at 64 KiB)."""

    def __init__(self, client: TestClient, tokens: dict[str, str]) -> None:
        self.client = client
        self.tokens = tokens

    def call(self, method: str, path: str, who: str | None = None, **kw: Any) -> httpx.Response:
        headers = dict(kw.pop("headers", {}))
        if who is not None:
            headers["Authorization"] = f"Bearer {self.tokens[who]}"
        response: httpx.Response = self.client.request(method, path, headers=headers, **kw)
        return response


ROLES = (("root", Role.ADMIN), ("lead", Role.LEAD), ("ann", Role.AGENT), ("bob", Role.AGENT),
         ("rita", Role.REVIEWER), ("vera", Role.VERIFIER))


def basic(token: str, user: str = "agent") -> str:
    return "Basic " + base64.b64encode(f"{user}:{token}".encode()).decode()


def raw_get(port: int, target: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    """A request whose target is sent byte for byte (httpx and git both normalise '..' away)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    try:
        conn.putrequest("GET", target, skip_accept_encoding=True)
        for k, v in (headers or {}).items():
            conn.putheader(k, v)
        conn.endheaders()
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def refs_of(fleet: Fleet) -> dict[str, str]:
    bare = fleet.bare()
    return {r: str(bare.references[r].target) for r in bare.references if not r.startswith("refs/mergebot")}


def actions_of(dependant: Any) -> set[str]:
    """The role actions (``require(action)``) anywhere in a route's dependency tree."""
    found = set()
    for dep in dependant.dependencies:
        if dep.call is not None and getattr(dep.call, "__closure__", None):
            action = inspect.getclosurevars(dep.call).nonlocals.get("action")
            if isinstance(action, str):
                found.add(action)
        found |= actions_of(dep)
    return found


def concrete(path: str) -> str:
    return re.sub(r"\{([^}]+)\}", lambda m: "1" if m.group(1).endswith("id") else "demo", path)


def flat_routes(routes: list[Any]) -> Iterator[Any]:
    for route in routes:
        inner = getattr(route, "original_router", None)  # FastAPI >= 0.160 keeps included routers whole
        if inner is not None:
            yield from flat_routes(inner.routes)
        else:
            yield route


def routes_of(app: Any) -> list[tuple[str, str, APIRoute]]:
    out = []
    for route in flat_routes(app.routes):
        if isinstance(route, APIRoute):
            out += [(m, route.path, route) for m in sorted((route.methods or set()) - {"HEAD"})]
    return out
