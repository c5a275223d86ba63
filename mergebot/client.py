"""A small synchronous client for the JSON API, used by the CLI and the demo.

Errors from the server come back as ``ApiError`` carrying the server's code and message, so the CLI can
print exactly what was refused and why.
"""

from __future__ import annotations

from typing import Any

import httpx

DEFAULT_URL = "http://127.0.0.1:8470"  # where ``mergebot serve`` listens by default (MERGEBOT_URL says otherwise)


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, body: dict[str, Any]) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.body = body


class Client:
    def __init__(self, base_url: str, token: str | None, *, timeout: float = 70.0) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=base_url.rstrip("/"), headers=headers, timeout=timeout)

    def close(self) -> None:
        self.http.close()

    def request(self, method: str, path: str, **kw: Any) -> Any:
        r = self.http.request(method, path, **kw)
        if r.status_code == 204:
            return None
        try:
            body = r.json()
        except ValueError:
            body = {"error": {"code": "http_error", "message": r.text[:500]}}
        if r.status_code >= 400:
            err = body.get("error", {}) if isinstance(body, dict) else {}
            raise ApiError(r.status_code, err.get("code", "http_error"), err.get("message", r.reason_phrase), body)
        return body

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params={k: v for k, v in params.items() if v is not None})

    def post(self, path: str, json: Any = None) -> Any:
        return self.request("POST", path, json=json)

    def put(self, path: str, json: Any = None) -> Any:
        return self.request("PUT", path, json=json)

    # -- read views (mergebot status, queue, landed, tree) ----------------------------------------------------

    def summary(self, *, holders: int = 20) -> dict[str, Any]:
        out: dict[str, Any] = self.get("/api/v1/summary", holders=holders)
        return out

    def queue_view(self, *, repo: str | None = None, limit: int = 50, refusals: int = 10) -> dict[str, Any]:
        out: dict[str, Any] = self.get("/api/v1/queue", repo=repo, limit=limit, refusals=refusals)
        return out

    def tree(self, *, root: int | None = None, depth: int = 3, limit: int = 500) -> dict[str, Any]:
        out: dict[str, Any] = self.get("/api/v1/tree", root=root, depth=depth, limit=limit)
        return out

    def landed(self, *, repo: str | None = None, owner: str | None = None, subtask: int | None = None,
               since: str | None = None, before: int | None = None, limit: int = 100) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = self.get("/api/v1/landed", repo=repo, owner=owner, subtask=subtask, since=since,
                                             before=before, limit=limit)["landed"]
        return out

    def metrics(self) -> str:
        """The Prometheus text exposition of ``/metrics`` (raises ApiError like every other call)."""
        r = self.http.get("/metrics")
        if r.status_code >= 400:
            json_body = r.headers.get("content-type", "").startswith("application/json")
            err = r.json().get("error", {}) if json_body else {}
            raise ApiError(r.status_code, err.get("code", "http_error"), err.get("message", r.reason_phrase),
                           {"error": err})
        return r.text
