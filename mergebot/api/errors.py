"""Every error leaves the API as ``{"error": {"code", "message", ...}}`` with the right status.

Also the request-size guard: bodies are counted while they stream in, so a huge body is refused with 413
without being read whole (a Content-Length over the limit is refused before reading anything).

``ERROR_RESPONSES`` documents that shape in ``/openapi.json`` for every status the API answers with (the
routers pass it as ``responses=``), in place of FastAPI's default 422 body, which Mergebot never sends.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mergebot.errors import MergebotError

log = logging.getLogger(__name__)


class ErrorDetail(BaseModel):
    model_config = ConfigDict(extra="allow")  # more detail: field, errors, current claim_version, ...
    code: str
    message: str


class ErrorOut(BaseModel):
    error: ErrorDetail


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorOut, "description": description} for status, description in (
        (400, "Malformed request (for example a body that is not JSON)"),
        (401, "No token, or an unknown or revoked one"),
        (403, "The token's role may not do this"),
        (404, "No such resource"),
        (409, "Conflict: the claim was superseded, the transition is not allowed, or it already exists"),
        (413, "The request body is over the limit"),
        (422, "Invalid input; `field` names it"),
        (429, "Not now: a claim over its lane's capacity (kind `capacity`) or over the agent's cap on work in "
              "progress (kind `wip_limit`); `retry_after` seconds, also as the Retry-After header"),
        (503, "The database is unreachable or too slow; nothing was changed"),
    )
}


def error_response(status: int, code: str, message: str, /, **detail: Any) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    if isinstance(detail.get("retry_after"), int) and detail["retry_after"] > 0:  # a typed "not now" (429)
        headers = {"Retry-After": str(detail["retry_after"])}
    return JSONResponse({"error": {"code": code, "message": message, **detail}}, status_code=status,
                        headers=headers)


def install_handlers(app: FastAPI) -> None:
    @app.exception_handler(MergebotError)
    async def _ours(request: Request, exc: MergebotError) -> JSONResponse:
        if exc.status >= 500:
            log.warning("%s %s: %s", request.method, request.url.path, exc.message)
        return error_response(exc.status, exc.code, exc.message, **exc.detail)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        first = errors[0] if errors else {}
        loc = [str(p) for p in first.get("loc", ()) if p != "body"] or ["body"]
        field = ".".join(loc)
        if first.get("type") == "json_invalid":
            return error_response(400, "malformed_json", f"the body is not valid JSON: {first.get('msg')}",
                                  field="body")
        simple = [{"field": ".".join(str(p) for p in e.get("loc", ()) if p != "body") or "body",
                   "message": e.get("msg", "")} for e in errors[:20]]
        too_long = first.get("type") in ("string_too_long", "too_long")
        return error_response(413 if too_long and field == "body" else 422, "invalid",
                              f"{field}: {first.get('msg', 'invalid')}", field=field, errors=simple)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed", 413: "too_large"}.get(exc.status_code, "http_error")
        extra = {"field": "body"} if exc.status_code == 413 else {}
        return error_response(exc.status_code, code, str(exc.detail), **extra)


class BodyLimit:
    """Raw ASGI middleware: refuse request bodies over ``limit`` bytes with 413, counting as they stream."""

    def __init__(self, app: ASGIApp, limit: int, prefixes: tuple[str, ...] = ("/api/", "/internal/")) -> None:
        self.app = app
        self.limit = limit
        self.prefixes = prefixes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(self.prefixes):
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = self.limit + 1
                if declared > self.limit:
                    await self._refuse(send)
                    return
        seen = 0
        started = False

        async def counted_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    # An HTTPException passes through FastAPI's body parsing unchanged (others become 400).
                    raise StarletteHTTPException(413, f"request body over {self.limit} bytes")
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counted_receive, tracking_send)
        except StarletteHTTPException as e:
            if e.status_code != 413 or started:
                raise
            await self._refuse(send)

    async def _refuse(self, send: Send) -> None:
        body = json.dumps({"error": {"code": "too_large",
                                     "message": f"request body over {self.limit} bytes", "field": "body"}})
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body.encode()})
