"""Sans-I/O webhook parsing for GitHub, Gitea and Forgejo.

Nothing in this module touches a socket, a file, a clock, a logger or the
environment: headers and raw body bytes go in, and a verified
:class:`Delivery` and a normalised :class:`ForgeEvent` come out, or a
:class:`WebhookError` carrying the HTTP status to answer with.

The steps, in the order :func:`parse_delivery` runs them:

1. size: a body over :data:`MAX_BODY_BYTES` is refused (413) unread;
2. forge: chosen from the headers (:func:`detect_forge`, 400);
3. content type: ``application/json`` or GitHub's default for a new webhook,
   ``application/x-www-form-urlencoded`` (415 for anything else; a delivery
   without the header is read as JSON);
4. signature: HMAC-SHA256 of the raw bytes against every configured secret
   (:func:`verify_signature`, 401). Nothing is parsed before this passes;
   a form body is signed as sent, before it is decoded;
5. delivery id and event name headers (400);
6. JSON: strict parsing (:func:`parse_json`, 400), of the whole body or of the
   form's one ``payload`` field (:func:`form_payload`).

:func:`to_event` then reads the few fields the merge queue needs and checks
their shape, so a malformed payload is a 400 and never a ``KeyError``.

The modules, one job each: ``headers`` (which forge, the signature, :class:`WebhookError`), ``strict_json``
(step 6's parser), ``delivery`` (the steps in order, the form body) and ``events`` (the payload read into
facts). Import from this package: the names below are its surface.
"""

from __future__ import annotations

from mergebot.forge.sansio.delivery import (
    FORM_TYPE,
    JSON_TYPE,
    MAX_BODY_BYTES,
    MAX_DELIVERY_ID_CHARS,
    Delivery,
    content_type,
    form_payload,
    parse_delivery,
)
from mergebot.forge.sansio.events import (
    MAX_REF_BYTES,
    ForgeEvent,
    PullComment,
    to_event,
    to_pull_comment,
    to_pull_review,
)
from mergebot.forge.sansio.headers import FORGES, Headers, WebhookError, detect_forge, verify_signature
from mergebot.forge.sansio.strict_json import MAX_CONTAINERS, MAX_DEPTH, parse_json

__all__ = [
    "FORGES",
    "FORM_TYPE",
    "JSON_TYPE",
    "MAX_BODY_BYTES",
    "MAX_CONTAINERS",
    "MAX_DELIVERY_ID_CHARS",
    "MAX_DEPTH",
    "MAX_REF_BYTES",
    "Delivery",
    "ForgeEvent",
    "Headers",
    "PullComment",
    "WebhookError",
    "content_type",
    "detect_forge",
    "form_payload",
    "parse_delivery",
    "parse_json",
    "to_event",
    "to_pull_comment",
    "to_pull_review",
    "verify_signature",
]
