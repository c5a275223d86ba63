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
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import re
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

__all__ = [
    "MAX_BODY_BYTES",
    "MAX_CONTAINERS",
    "MAX_DEPTH",
    "Delivery",
    "ForgeEvent",
    "Headers",
    "WebhookError",
    "detect_forge",
    "form_payload",
    "parse_delivery",
    "parse_json",
    "to_event",
    "verify_signature",
]

MAX_BODY_BYTES = 25 * 1024 * 1024
"""GitHub caps payloads at 25 MB; anything larger is refused before hashing."""

MAX_DEPTH = 64
"""Deepest nesting of JSON arrays/objects accepted (real payloads stay under 10)."""

MAX_CONTAINERS = 1_000_000
"""Most arrays + objects accepted in one body (real payloads hold a few thousand)."""

MAX_REF_BYTES = 1024
MAX_DELIVERY_ID_CHARS = 200

Headers = Sequence[tuple[str, str]]
"""Request headers: lower-cased names, in arrival order, duplicates kept."""

FORGES = ("github", "gitea", "forgejo")

# Pull-request actions that (re)present a head commit to be landed.
_CANDIDATE_PR_ACTIONS = frozenset({"opened", "synchronize", "reopened"})
# Gitea/Forgejo spell some actions differently from GitHub.
_PR_ACTION_ALIASES = {"synchronized": "synchronize"}

_GITHUB_SIGNATURE = re.compile(r"sha256=([0-9a-fA-F]{64})")
_BARE_SIGNATURE = re.compile(r"[0-9a-fA-F]{64}")
_SHA = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
_DELIVERY_ID = re.compile(r"[\x21-\x7e]+")  # visible ASCII: UUIDs, GUIDs, numbers
_EVENT_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,100}")
# Everything but the bytes that matter to nesting: quotes and brackets.
_NOT_STRUCTURE_BYTES = bytes(b for b in range(256) if b not in b'"[]{}')
_OPEN_AS_SQUARE = bytes.maketrans(b"{}", b"[]")
# C0 controls, DEL and C1 controls (Unicode category Cc).
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


class WebhookError(Exception):
    """A delivery that must be refused; ``status`` is the HTTP status to send."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(status, message)
        self.status = status
        self.message = message

    def __str__(self) -> str:
        return f"{self.status}: {self.message}"


# --------------------------------------------------------------------------- headers


def _values(headers: Headers, name: str) -> list[str]:
    return [value for key, value in headers if key.lower() == name]


def _single(headers: Headers, names: Sequence[str], *, status: int, what: str) -> str | None:
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
        raw = _single(headers, ("x-hub-signature-256",), status=401, what="signature")
        if raw is None:
            raise WebhookError(401, "missing X-Hub-Signature-256 header")
        match = _GITHUB_SIGNATURE.fullmatch(raw)
        if match is None:
            raise WebhookError(401, "malformed X-Hub-Signature-256: expected 'sha256=' and 64 hex digits")
        given = match.group(1)
    elif forge in ("gitea", "forgejo"):
        names = ("x-forgejo-signature", "x-gitea-signature") if forge == "forgejo" else ("x-gitea-signature",)
        label = "X-Forgejo-Signature" if forge == "forgejo" else "X-Gitea-Signature"
        raw = _single(headers, names, status=401, what="signature")
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


# --------------------------------------------------------------------------- JSON


def _outside_strings(body: bytes) -> bytes:
    """The brackets of ``body`` that lie outside JSON strings, ``{}`` written as ``[]``.

    Built from C-speed bytes operations only (no per-token Python or regex
    work), so hostile bodies with millions of strings stay cheap:

    1. drop ``\\\\`` pairs, then ``\\"``: what remains of a backslash run escapes
       the next byte exactly as JSON reads it, so no quote left is escaped;
    2. keep only quotes and brackets;
    3. drop ``""`` pairs: two adjacent quotes have nothing between them, so
       removing them moves nothing into or out of a string and keeps the
       parity of every quote after them;
    4. split on quotes and keep the even pieces: those are outside strings.

    In UTF-8 the bytes of '"' and '\\' never occur inside a multi-byte
    character, so working on bytes is exact. An unterminated string swallows
    the rest of the body, as it does for the JSON decoder.
    """
    kept = body.replace(b"\\\\", b"").replace(b'\\"', b"").translate(None, _NOT_STRUCTURE_BYTES)
    pieces = kept.replace(b'""', b"").split(b'"')
    return b"".join(pieces[::2]).translate(_OPEN_AS_SQUARE)


def _check_structure(body: bytes) -> None:
    """Refuse nesting deeper than MAX_DEPTH or more than MAX_CONTAINERS, without recursing.

    Exact for valid JSON. For invalid JSON it agrees with the decoder up to
    the decoder's first error, which is as far as the decoder recurses.
    """
    skeleton = _outside_strings(body)
    openers = skeleton.count(b"[")
    if openers > MAX_CONTAINERS:
        raise WebhookError(400, f"invalid JSON: more than {MAX_CONTAINERS} arrays and objects")
    if openers <= MAX_DEPTH:
        return
    depth = 0
    for byte in skeleton:
        if byte == 0x5B:  # "[" or "{"
            depth += 1
            if depth > MAX_DEPTH:
                raise WebhookError(400, f"invalid JSON: nested deeper than {MAX_DEPTH} levels")
        else:
            depth -= 1
            if depth < 0:
                return  # more closers than openers: json.loads reports the syntax error here


def _reject_constant(name: str) -> NoReturn:
    raise WebhookError(400, f"invalid JSON: {name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise WebhookError(400, f"invalid JSON: number {text[:40]!r} is out of range")
    return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise WebhookError(400, f"invalid JSON: duplicate key {key[:100]!r} in an object")
            seen.add(key)
    return obj


def parse_json(body: bytes) -> dict[str, Any]:
    """Parse a webhook body strictly; the top level must be an object.

    Refused with 400: invalid UTF-8, a BOM, syntax errors, NaN/Infinity and
    numbers that overflow a float, duplicate keys at any level, nesting deeper
    than :data:`MAX_DEPTH` (checked before ``json`` recurses), more than
    :data:`MAX_CONTAINERS` arrays and objects, and a top level that is not an
    object.
    """
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise WebhookError(400, f"body is not valid UTF-8 (byte {exc.start})") from None
    _check_structure(body)
    try:
        value = json.loads(
            text,
            object_pairs_hook=_unique_keys,
            parse_constant=_reject_constant,
            parse_float=_finite_float,
        )
    except json.JSONDecodeError as exc:
        raise WebhookError(400, f"body is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except (ValueError, RecursionError) as exc:  # e.g. integers over the str->int digit limit
        raise WebhookError(400, f"body is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise WebhookError(400, f"JSON top level must be an object, not {_json_type(value)}")
    return value


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


# --------------------------------------------------------------------------- delivery


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
    raw = _single(headers, ("content-type",), status=415, what="content type")
    media = (JSON_TYPE if raw is None else raw).split(";", 1)[0].strip().lower()
    if media not in (JSON_TYPE, FORM_TYPE):
        raise WebhookError(415, f"content type {media or '(empty)'!r} is not a webhook body: send {JSON_TYPE} "
                                f"or {FORM_TYPE} (GitHub's 'Content type' setting of the webhook)")
    return media


def form_payload(body: bytes) -> bytes:
    """The JSON in a form-encoded delivery: its one ``payload`` field, percent-decoded as strict UTF-8 (400)."""
    try:
        fields = urllib.parse.parse_qsl(body.decode("ascii"), keep_blank_values=True, strict_parsing=True,
                                        encoding="utf-8", errors="strict", max_num_fields=1)
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

    delivery_id = _single(headers, _DELIVERY_HEADERS[forge], status=400, what="delivery id")
    if not delivery_id:
        raise WebhookError(400, f"missing {_DELIVERY_HEADERS[forge][0]} header")
    if len(delivery_id) > MAX_DELIVERY_ID_CHARS:
        raise WebhookError(400, f"delivery id longer than {MAX_DELIVERY_ID_CHARS} characters")
    if _DELIVERY_ID.fullmatch(delivery_id) is None:
        raise WebhookError(400, "delivery id must be visible ASCII without spaces")

    event = _single(headers, _EVENT_HEADERS[forge], status=400, what="event")
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


# --------------------------------------------------------------------------- events


@dataclass(frozen=True)
class ForgeEvent:
    """The forge-neutral facts of a delivery that the merge queue acts on.

    ``ref`` is always a full ref kept verbatim (never shell- or git-parsed):
    the pushed ref, ``refs/heads/<head.ref>`` for a pull request, or
    ``refs/heads|tags/<name>`` built from a ``delete`` event's short name and
    ``ref_type``. ``head_sha`` is the pull request's head, or a push's
    ``after`` (all zeros for a deletion). ``sender`` is ``sender.login``.

    ``candidate`` is True only for a push to ``refs/heads/...`` that is not a
    deletion, and for a pull request opened/synchronize/reopened whose head
    branch lives in ``repository`` itself (not a fork). Everything else,
    tags, deletions, closed pull requests, pings and unknown events, is False.

    A fact an event does not carry is None (or False): the defaults, so each parser names only what it found.
    """

    forge: str
    event: str
    action: str | None = None
    repository: str | None = None
    ref: str | None = None
    before: str | None = None
    after: str | None = None
    sender: str | None = None
    pr_number: int | None = None
    head_sha: str | None = None
    base_ref: str | None = None
    created: bool = False
    deleted: bool = False
    forced: bool = False
    is_tag: bool = False
    candidate: bool = False


def _bad(field: str, problem: str) -> WebhookError:
    return WebhookError(400, f"payload field {field} {problem}")


def _obj(parent: dict[str, Any], key: str, path: str) -> dict[str, Any]:
    value = parent.get(key)
    if not isinstance(value, dict):
        raise _bad(path, "is missing" if value is None else f"must be an object, not {_json_type(value)}")
    return value


def _str(parent: dict[str, Any], key: str, path: str) -> str:
    value = parent.get(key)
    if not isinstance(value, str):
        raise _bad(path, "is missing" if value is None else f"must be a string, not {_json_type(value)}")
    return value


def _text(value: str, path: str) -> str:
    """A non-empty, printable, UTF-8-encodable string of at most MAX_REF_BYTES bytes."""
    if not value:
        raise _bad(path, "is empty")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise _bad(path, "is not valid Unicode (lone surrogate)") from None
    if size > MAX_REF_BYTES:
        raise _bad(path, f"is longer than {MAX_REF_BYTES} bytes")
    if _CONTROL.search(value) is not None:
        raise _bad(path, "contains control characters")
    return value


def _ref(value: str, path: str) -> str:
    """A ref, kept verbatim: only emptiness, length and control characters are refused."""
    return _text(value, path)


def _full_ref(prefix: str, short: str, path: str) -> str:
    """``prefix + short`` for a short branch/tag name, both parts checked."""
    return _ref(prefix + _text(short, path), path)


def _sha(parent: dict[str, Any], key: str, path: str) -> str:
    value = _str(parent, key, path)
    if _SHA.fullmatch(value) is None:
        raise _bad(path, "must be 40 or 64 lowercase hex digits")
    return value


def _bool(parent: dict[str, Any], key: str, path: str) -> bool | None:
    value = parent.get(key)
    if value is None:
        return None
    if not isinstance(value, bool):
        raise _bad(path, f"must be a boolean, not {_json_type(value)}")
    return value


def _repository(payload: dict[str, Any]) -> str:
    repo = _obj(payload, "repository", "repository")
    name = _text(_str(repo, "full_name", "repository.full_name"), "repository.full_name")
    owner, slash, short = name.partition("/")
    if not slash or not owner or not short or "/" in short or name != name.strip():
        raise _bad("repository.full_name", "must look like 'owner/name'")
    return name


def _sender(payload: dict[str, Any]) -> str | None:
    """sender.login; None if there is no sender. (GitHub's pusher has no login.)"""
    if payload.get("sender") is None:
        return None
    sender = _obj(payload, "sender", "sender")
    return _text(_str(sender, "login", "sender.login"), "sender.login")


def _lenient(payload: dict[str, Any]) -> tuple[str | None, str | None]:
    """Repository and sender for events we only record: never an error."""
    try:
        repository: str | None = _repository(payload)
    except WebhookError:
        repository = None
    try:
        sender = _sender(payload)
    except WebhookError:
        sender = None
    return repository, sender


def _is_zero(sha: str) -> bool:
    return sha.count("0") == len(sha)


def _push(delivery: Delivery) -> ForgeEvent:
    payload = delivery.payload
    repository = _repository(payload)
    ref = _ref(_str(payload, "ref", "ref"), "ref")
    before = _sha(payload, "before", "before")
    after = _sha(payload, "after", "after")
    if len(before) != len(after):
        raise _bad("before/after", "mix 40- and 64-digit object names")
    # GitHub states these; Gitea/Forgejo do not, so derive them from the
    # all-zero object name. A stated flag can only add to what the shas say.
    created = bool(_bool(payload, "created", "created")) or _is_zero(before)
    deleted = bool(_bool(payload, "deleted", "deleted")) or _is_zero(after)
    forced = bool(_bool(payload, "forced", "forced"))
    is_branch = ref.startswith("refs/heads/")
    return ForgeEvent(
        delivery.forge, delivery.event, repository=repository, ref=ref, before=before, after=after,
        sender=_sender(payload), head_sha=after, created=created, deleted=deleted, forced=forced,
        is_tag=ref.startswith("refs/tags/"), candidate=is_branch and not deleted,
    )


def _pull_request(delivery: Delivery) -> ForgeEvent:
    payload = delivery.payload
    repository = _repository(payload)
    raw_action = _text(_str(payload, "action", "action"), "action")
    action = _PR_ACTION_ALIASES.get(raw_action, raw_action)
    number = payload.get("number")
    if not isinstance(number, int) or isinstance(number, bool) or number <= 0:
        raise _bad("number", "must be a positive integer")
    pr = _obj(payload, "pull_request", "pull_request")
    head = _obj(pr, "head", "pull_request.head")
    base = _obj(pr, "base", "pull_request.base")
    head_ref = _full_ref("refs/heads/", _str(head, "ref", "pull_request.head.ref"), "pull_request.head.ref")
    base_ref = _full_ref("refs/heads/", _str(base, "ref", "pull_request.base.ref"), "pull_request.base.ref")
    head_sha = _sha(head, "sha", "pull_request.head.sha")
    # A pull request from another repository (a fork, or one since deleted:
    # head.repo null) names a branch that does not exist in `repository`, so
    # it is never a candidate: landing it would graft the fork's branch name
    # and commit onto this repository.
    head_repo = head.get("repo")
    head_repo_name = head_repo.get("full_name") if isinstance(head_repo, dict) else None
    same_repository = isinstance(head_repo_name, str) and head_repo_name.lower() == repository.lower()
    # GitHub's synchronize carries the old and new head; other actions do not.
    before = _sha(payload, "before", "before") if payload.get("before") is not None else None
    after = _sha(payload, "after", "after") if payload.get("after") is not None else None
    return ForgeEvent(
        delivery.forge, delivery.event, action=action, repository=repository, ref=head_ref, before=before,
        after=after, sender=_sender(payload), pr_number=number, head_sha=head_sha, base_ref=base_ref,
        candidate=action in _CANDIDATE_PR_ACTIONS and same_repository,
    )


def _delete(delivery: Delivery) -> ForgeEvent:
    """A ``delete`` event: a short ref name plus ``ref_type`` (Gitea/Forgejo and GitHub alike)."""
    payload = delivery.payload
    repository = _repository(payload)
    name = _str(payload, "ref", "ref")
    ref_type = _str(payload, "ref_type", "ref_type")
    if ref_type == "branch":
        prefix = "refs/heads/"
    elif ref_type == "tag":
        prefix = "refs/tags/"
    else:
        raise _bad("ref_type", "must be 'branch' or 'tag'")
    # Tolerate a full ref name too, should a forge ever send one.
    ref = _ref(name, "ref") if name.startswith(prefix) else _full_ref(prefix, name, "ref")
    return ForgeEvent(
        delivery.forge, delivery.event, repository=repository, ref=ref, sender=_sender(payload), deleted=True,
        is_tag=ref_type == "tag",
    )


def _other(delivery: Delivery) -> ForgeEvent:
    """ping and every event the merge queue does not act on: recorded, never refused."""
    repository, sender = _lenient(delivery.payload)
    return ForgeEvent(delivery.forge, delivery.event, repository=repository, sender=sender)


@dataclass(frozen=True)
class PullComment:
    """A comment written on a pull request (an ``issue_comment`` event on GitHub and Gitea alike): where, by whom,
    and its text, which may hold a command for the bot (``mergebot.forge.commands``)."""

    forge: str
    repository: str
    number: int
    comment_id: int
    body: str
    sender: str | None


def to_pull_comment(delivery: Delivery) -> PullComment | None:
    """A new comment on a pull request; None for any other issue comment (on an issue, edited, deleted). A
    malformed payload is a 400."""
    payload = delivery.payload
    if delivery.event != "issue_comment" or payload.get("action") != "created":
        return None
    repository = _repository(payload)
    issue = _obj(payload, "issue", "issue")
    if not (issue.get("pull_request") or payload.get("is_pull") is True):
        return None  # GitHub marks a pull request's issue with pull_request; Gitea says is_pull
    number = issue.get("number")
    if not isinstance(number, int) or isinstance(number, bool) or number <= 0:
        raise _bad("issue.number", "must be a positive integer")
    comment = _obj(payload, "comment", "comment")
    comment_id = comment.get("id")
    if not isinstance(comment_id, int) or isinstance(comment_id, bool):
        raise _bad("comment.id", "must be an integer")
    body = comment.get("body")
    if not isinstance(body, str):
        raise _bad("comment.body", "must be a string")
    return PullComment(delivery.forge, repository, number, comment_id, body[:10_000], _sender(payload))


def to_event(delivery: Delivery) -> ForgeEvent:
    """Normalise a delivery; a malformed push/pull_request/delete payload is a 400."""
    if delivery.event == "push":
        return _push(delivery)
    if delivery.event == "pull_request":
        return _pull_request(delivery)
    if delivery.event == "delete":
        return _delete(delivery)
    return _other(delivery)
