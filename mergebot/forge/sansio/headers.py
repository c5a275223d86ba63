"""The headers of a webhook delivery: which forge sent it and whether its signature holds, and the
:class:`WebhookError` every step of the parser refuses with.

Part of ``mergebot.forge.sansio``: no I/O here either.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Sequence

Headers = Sequence[tuple[str, str]]
"""Request headers: lower-cased names, in arrival order, duplicates kept."""

FORGES = ("github", "gitea", "forgejo")

_GITHUB_SIGNATURE = re.compile(r"sha256=([0-9a-fA-F]{64})")
_BARE_SIGNATURE = re.compile(r"[0-9a-fA-F]{64}")


class WebhookError(Exception):
    """A delivery that must be refused; ``status`` is the HTTP status to send."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(status, message)
        self.status = status
        self.message = message

    def __str__(self) -> str:
        return f"{self.status}: {self.message}"


def _values(headers: Headers, name: str) -> list[str]:
    return [value for key, value in headers if key.lower() == name]


def single_header(headers: Headers, names: Sequence[str], *, status: int, what: str) -> str | None:
    """The value of the first of ``names`` present, each allowed at most once.

    When several of the names are present (Forgejo sends its own header and
    Gitea's), they must agree, compared case-insensitively.
    """
    found: list[tuple[str, str]] = []
    for name in names:
        values = _values(headers, name)
        if len(values) > 1:
            raise WebhookError(status, f"{what}: header {name} sent {len(values)} times, exactly one is allowed")
        if values:
            found.append((name, values[0]))
    if not found:
        return None
    first_name, first = found[0]
    for name, value in found[1:]:
        if value.lower() != first.lower():
            raise WebhookError(status, f"{what}: headers {first_name} and {name} disagree")
    return first


def detect_forge(headers: Headers) -> str:
    """Which forge sent this: ``"forgejo"``, ``"gitea"`` or ``"github"``.

    Gitea and Forgejo also send ``X-GitHub-Event`` (and ``X-Gogs-Event``) for
    compatibility, so their own headers are looked for first.
    """
    names = {key.lower() for key, _ in headers}
    if any(name.startswith("x-forgejo-") for name in names):
        return "forgejo"
    if any(name.startswith("x-gitea-") for name in names):
        return "gitea"
    if "x-github-event" in names:
        return "github"
    raise WebhookError(400, "not a forge webhook: no X-GitHub-Event, X-Gitea-* or X-Forgejo-* header")


def verify_signature(forge: str, headers: Headers, body: bytes, secrets: Sequence[bytes]) -> int:
    """Check the body's HMAC-SHA256 signature; return the index of the secret that made it.

    GitHub sends ``X-Hub-Signature-256: sha256=<hex>``; Gitea sends the bare
    hex digest in ``X-Gitea-Signature``; Forgejo sends it in
    ``X-Forgejo-Signature`` and, for compatibility, ``X-Gitea-Signature``
    (either is accepted; if both arrive they must be equal). The digest is
    compared with every non-empty secret, in constant time per comparison.
    Any failure is a 401.
    """
    if forge == "github":
        raw = single_header(headers, ("x-hub-signature-256",), status=401, what="signature")
        if raw is None:
            raise WebhookError(401, "missing X-Hub-Signature-256 header")
        match = _GITHUB_SIGNATURE.fullmatch(raw)
        if match is None:
            raise WebhookError(401, "malformed X-Hub-Signature-256: expected 'sha256=' and 64 hex digits")
        given = match.group(1)
    elif forge in ("gitea", "forgejo"):
        names = ("x-forgejo-signature", "x-gitea-signature") if forge == "forgejo" else ("x-gitea-signature",)
        label = "X-Forgejo-Signature" if forge == "forgejo" else "X-Gitea-Signature"
        raw = single_header(headers, names, status=401, what="signature")
        if raw is None:
            raise WebhookError(401, f"missing {label} header")
        if _BARE_SIGNATURE.fullmatch(raw) is None:
            raise WebhookError(401, f"malformed {label}: expected 64 hex digits")
        given = raw
    else:
        raise ValueError(f"unknown forge {forge!r}; expected one of {', '.join(FORGES)}")

    usable = [bool(secret) for secret in secrets]
    if not any(usable):
        raise WebhookError(401, "no webhook secret is configured; refusing the delivery")
    given_bytes = given.lower().encode("ascii")
    matched = -1
    for index, secret in enumerate(secrets):
        if not usable[index]:
            continue  # an empty key would let anyone sign
        expected = hmac.new(secret, body, hashlib.sha256).hexdigest().encode("ascii")
        ok = hmac.compare_digest(expected, given_bytes)
        if ok and matched < 0:
            matched = index
    if matched < 0:
        raise WebhookError(401, "signature does not match any configured webhook secret")
    return matched
