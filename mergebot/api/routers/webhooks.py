"""Forge webhooks in: ``POST /webhooks/github`` and ``POST /webhooks/gitea`` (Gitea and Forgejo).

No bearer token: a delivery is authenticated by its HMAC signature (``mergebot.forge.webhooks``). The body is
read here with its own limit (25 MiB, GitHub's maximum payload), counted while streaming: an oversized delivery
is refused with 413 before it is all read, and nothing is recorded.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict

from mergebot.api.services import Services
from mergebot.forge.sansio import MAX_BODY_BYTES


class WebhookAnswer(BaseModel):
    """What a forge is told: ``outcome`` when taken (or ignored), ``error`` when refused."""

    model_config = ConfigDict(extra="allow")
    outcome: str | None = None
    error: str | None = None
    duplicate: bool | None = None


_ANSWERS: dict[int | str, dict[str, Any]] = {
    status: {"model": WebhookAnswer, "description": description} for status, description in (
        (200, "Taken, or an earlier delivery with this id was already processed"),
        (202, "Taken: queued as a candidate, refused with a commit status, or ignored (the outcome says which)"),
        (400, "Not a well-formed delivery (headers, JSON or payload shape)"),
        (401, "Missing or wrong signature"),
        (409, "This delivery id was already received with a different body"),
        (413, "The body is over the forge's maximum payload"),
        (415, "The body is neither application/json nor application/x-www-form-urlencoded"),
        (502, "Could not process it now; the forge should redeliver"),
        (503, "The same delivery is being processed now"),
    )
}
router = APIRouter(prefix="/webhooks", tags=["webhooks"], responses=_ANSWERS)


async def _body(request: Request) -> bytes | None:
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > MAX_BODY_BYTES):
        return None
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


async def _deliver(request: Request, endpoint: str) -> JSONResponse:
    body = await _body(request)
    if body is None:
        return JSONResponse({"error": f"the body is over {MAX_BODY_BYTES} bytes"}, status_code=413)
    headers = [(k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in request.scope["headers"]]
    services: Services = request.app.state.services
    answer = await services.webhooks.handle(endpoint, headers, body)
    return JSONResponse(answer.body, status_code=answer.status)


@router.post("/github", summary="GitHub webhook deliveries (push, pull_request, ping), signed")
async def github(request: Request) -> JSONResponse:
    return await _deliver(request, "github")


@router.post("/gitea", summary="Gitea and Forgejo webhook deliveries (push, pull_request, delete), signed")
async def gitea(request: Request) -> JSONResponse:
    return await _deliver(request, "gitea")
