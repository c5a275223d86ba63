"""Webhook deliveries as the forges send them, for the tests of the pure parser (``mergebot.forge.sansio``).

The recorded payloads (``tests/forge_payloads/``) and the names of the objects in them; the headers GitHub,
Gitea and Forgejo send with a delivery, signed with a test secret; and the short ways to run a delivery through
``parse_delivery`` and ``to_event`` (:func:`event_of`, :func:`status_of`) and to write the event expected
(:func:`expect`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path
from typing import Any

import pytest

from mergebot.forge.sansio import ForgeEvent, Headers, WebhookError, parse_delivery, to_event

PAYLOADS = Path(__file__).parent.parent / "forge_payloads"
SECRET = b"whsec-fleet-widgets-7Qm2"
OTHER = b"whsec-fleet-gadgets-Lx91"
DELIVERY = "9b3c0f4e-3d6a-11f0-8c1a-7e2b9c2f6a10"
Z40 = "0" * 40

# Names in the recorded payloads: repositories, branches, objects.
GH_REPO = "octo-fleet/widgets"
GT_REPO = "fleet/widgets"
GH_BRANCH = "refs/heads/agent-7/sizing"
GT_BRANCH = "refs/heads/agent-3/cache"
MAIN = "refs/heads/main"
GH_C1 = "ef8a50cc608150b8a9079e7c977e0645b7946238"
GH_C2 = "0c44607bfcc6ddbadf635fce83627eebd5e96f2d"
GH_C3 = "b964dff4bc59f450826cb2961207ff135d49d378"
GH_TAG = "f9f6fd2c40d9712fa4bc37982a2cc8805a5d18d4"
GH_PR43 = "09ee5da287f5989e48286f3bfaf384db5df83e24"
GT_C1 = "e07c387b9d01c40519d6e116785ada7efe3c78e1"
GT_C2 = "7e8260ce8dc26fc7423cc5f3f5483b670fc463de"
GT_TAG = "ad718c40376aaf279986e73a09d16f994714cf92"
GT_S0 = "2c1258ec4087dd050d2939faa1755f8cde4bf4b448e1bbae4094a3dd14f9bbd1"
GT_S2 = "40dca4a06c6be8b54c56aa456ff32300c38a82a2271f1d8a57d6f2c8b823f414"
FJ_BEFORE = "295b196c2fd53d971d90ee6fc4fdab9c4bbcca8a"
FJ_C1 = "b81070fff752597ecdcb59a869226ac9b2a389bc"


def load(name: str) -> bytes:
    return (PAYLOADS / name).read_bytes()


def load_obj(name: str) -> dict[str, Any]:
    value = json.loads(load(name))
    assert isinstance(value, dict)
    return value


def dump(obj: object) -> bytes:
    return json.dumps(obj).encode()


def sign(body: bytes, secret: bytes = SECRET) -> str:
    return hmac.new(secret, body, hashlib.sha256).hexdigest()


def github_headers(
    event: str, body: bytes, *, secret: bytes = SECRET, delivery: str = DELIVERY
) -> list[tuple[str, str]]:
    """Headers as GitHub sends them (lower-cased by the server)."""
    return [
        ("host", "mergebot.fleet.example"),
        ("user-agent", "GitHub-Hookshot/8e2a1f4"),
        ("content-type", "application/json"),
        ("accept", "*/*"),
        ("x-github-delivery", delivery),
        ("x-github-event", event),
        ("x-github-hook-id", "548127730"),
        ("x-github-hook-installation-target-id", "735104228"),
        ("x-github-hook-installation-target-type", "repository"),
        ("x-hub-signature", "sha1=" + hmac.new(secret, body, hashlib.sha1).hexdigest()),
        ("x-hub-signature-256", "sha256=" + sign(body, secret)),
    ]


def gitea_headers(
    event: str, body: bytes, *, event_type: str | None = None, secret: bytes = SECRET, delivery: str = DELIVERY
) -> list[tuple[str, str]]:
    """Headers as Gitea's services/webhook/deliver.go sends them: its own, Gogs' and GitHub's."""
    sig = sign(body, secret)
    kind = event_type or event
    return [
        ("host", "mergebot.fleet.example"),
        ("user-agent", "Go-http-client/1.1"),
        ("content-type", "application/json"),
        ("x-github-delivery", delivery),
        ("x-github-event", event),
        ("x-github-event-type", kind),
        ("x-gitea-delivery", delivery),
        ("x-gitea-event", event),
        ("x-gitea-event-type", kind),
        ("x-gitea-signature", sig),
        ("x-gogs-delivery", delivery),
        ("x-gogs-event", event),
        ("x-gogs-event-type", kind),
        ("x-gogs-signature", sig),
        ("x-hub-signature", "sha1=" + hmac.new(secret, body, hashlib.sha1).hexdigest()),
        ("x-hub-signature-256", "sha256=" + sig),
    ]


def forgejo_headers(
    event: str, body: bytes, *, event_type: str | None = None, secret: bytes = SECRET, delivery: str = DELIVERY
) -> list[tuple[str, str]]:
    """Forgejo sends X-Forgejo-* and, for compatibility, everything Gitea sends."""
    sig = sign(body, secret)
    kind = event_type or event
    own = [
        ("x-forgejo-delivery", delivery),
        ("x-forgejo-event", event),
        ("x-forgejo-event-type", kind),
        ("x-forgejo-signature", sig),
    ]
    return own + gitea_headers(event, body, event_type=event_type, secret=secret, delivery=delivery)


def headers_for(forge: str, event: str, body: bytes, **kw: Any) -> list[tuple[str, str]]:
    if forge == "github":
        kw.pop("event_type", None)
        return github_headers(event, body, **kw)
    if forge == "gitea":
        return gitea_headers(event, body, **kw)
    return forgejo_headers(event, body, **kw)


def without(headers: Headers, *names: str) -> list[tuple[str, str]]:
    return [(k, v) for k, v in headers if k not in names]


def replaced(headers: Headers, name: str, value: str) -> list[tuple[str, str]]:
    return [(k, value if k == name else v) for k, v in headers]


def status_of(headers: Headers, body: bytes, secrets: list[bytes] | None = None) -> int:
    with pytest.raises(WebhookError) as info:
        to_event(parse_delivery(headers, body, [SECRET] if secrets is None else secrets))
    return info.value.status


def event_of(forge: str, event: str, obj: dict[str, Any], event_type: str | None = None) -> ForgeEvent:
    body = dump(obj)
    return to_event(parse_delivery(headers_for(forge, event, body, event_type=event_type), body, [SECRET]))


def expect(forge: str, event: str, **fields: Any) -> ForgeEvent:
    """A ForgeEvent with every field not named left at its default, None/False."""
    return ForgeEvent(forge=forge, event=event, **fields)


def json_depth(value: object) -> int:
    """How deeply arrays and objects nest in a parsed JSON value (a scalar is 0)."""
    if isinstance(value, list):
        return 1 + max((json_depth(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((json_depth(v) for v in value.values()), default=0)
    return 0
