"""One delivery authenticated and parsed: :func:`parse_delivery` runs the checks in the order the package's
docstring lists, and yields a :class:`Delivery` whose JSON is parsed but not yet interpreted.

Part of ``mergebot.forge.sansio``: no I/O here either.
"""

from __future__ import annotations

import hashlib
import re
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mergebot.forge.sansio.headers import Headers, WebhookError, detect_forge, single_header, verify_signature
from mergebot.forge.sansio.strict_json import parse_json

MAX_BODY_BYTES = 25 * 1024 * 1024
"""GitHub caps payloads at 25 MB; anything larger is refused before hashing."""

MAX_DELIVERY_ID_CHARS = 200

_DELIVERY_ID = re.compile(r"[\x21-\x7e]+")  # visible ASCII: UUIDs, GUIDs, numbers
_EVENT_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,100}")


@dataclass(frozen=True)
class Delivery:
    """One authenticated webhook delivery, its JSON parsed but not interpreted."""

    forge: str
    event: str
    delivery_id: str
    body_sha256: str
    secret_index: int
    payload: dict[str, Any]


_DELIVERY_HEADERS = {
    "github": ("x-github-delivery",),
    "gitea": ("x-gitea-delivery",),
    "forgejo": ("x-forgejo-delivery", "x-gitea-delivery"),
}
_EVENT_HEADERS = {
    "github": ("x-github-event",),
    "gitea": ("x-gitea-event",),
    "forgejo": ("x-forgejo-event", "x-gitea-event"),
}


JSON_TYPE = "application/json"
FORM_TYPE = "application/x-www-form-urlencoded"


def content_type(headers: Headers) -> str:
    """The body's media type, lower-cased and without parameters: JSON, or a form (415 for anything else)."""
    raw = single_header(headers, ("content-type",), status=415, what="content type")
    media = (JSON_TYPE if raw is None else raw).split(";", 1)[0].strip().lower()
    if media not in (JSON_TYPE, FORM_TYPE):
        raise WebhookError(
            415,
            f"content type {media or '(empty)'!r} is not a webhook body: send {JSON_TYPE} "
            f"or {FORM_TYPE} (GitHub's 'Content type' setting of the webhook)",
        )
    return media


def form_payload(body: bytes) -> bytes:
    """The JSON in a form-encoded delivery: its one ``payload`` field, percent-decoded as strict UTF-8 (400)."""
    try:
        fields = urllib.parse.parse_qsl(
            body.decode("ascii"),
            keep_blank_values=True,
            strict_parsing=True,
            encoding="utf-8",
            errors="strict",
            max_num_fields=1,
        )
    except (UnicodeDecodeError, ValueError) as e:
        raise WebhookError(400, f"malformed form body: {e}") from None
    if [name for name, _ in fields] != ["payload"]:
        raise WebhookError(400, "a form-encoded delivery must hold exactly one field, payload=<the JSON>")
    return fields[0][1].encode("utf-8")


def parse_delivery(headers: Headers, body: bytes, secrets: Sequence[bytes]) -> Delivery:
    """Authenticate and parse one delivery; see the module docstring for the order of checks."""
    if len(body) > MAX_BODY_BYTES:
        raise WebhookError(413, f"body of {len(body)} bytes exceeds the {MAX_BODY_BYTES}-byte limit")
    forge = detect_forge(headers)
    media = content_type(headers)
    secret_index = verify_signature(forge, headers, body, secrets)

    delivery_id = single_header(headers, _DELIVERY_HEADERS[forge], status=400, what="delivery id")
    if not delivery_id:
        raise WebhookError(400, f"missing {_DELIVERY_HEADERS[forge][0]} header")
    if len(delivery_id) > MAX_DELIVERY_ID_CHARS:
        raise WebhookError(400, f"delivery id longer than {MAX_DELIVERY_ID_CHARS} characters")
    if _DELIVERY_ID.fullmatch(delivery_id) is None:
        raise WebhookError(400, "delivery id must be visible ASCII without spaces")

    event = single_header(headers, _EVENT_HEADERS[forge], status=400, what="event")
    if not event:
        raise WebhookError(400, f"missing {_EVENT_HEADERS[forge][0]} header")
    if _EVENT_NAME.fullmatch(event) is None:
        raise WebhookError(400, "event name must be 1-100 letters, digits, '_', '.' or '-'")

    payload = parse_json(form_payload(body) if media == FORM_TYPE else body)
    return Delivery(
        forge=forge,
        event=event,
        delivery_id=delivery_id,
        body_sha256=hashlib.sha256(body).hexdigest(),
        secret_index=secret_index,
        payload=payload,
    )
