"""Strict JSON for webhook bodies: the standard decoder, with its nesting bounded before it recurses and
everything it would let pass that a forge never sends (NaN, duplicate keys, a top level that is no object) refused.

Part of ``mergebot.forge.sansio``: no I/O here either.
"""

from __future__ import annotations

import json
import math
from typing import Any, NoReturn

from mergebot.forge.sansio.headers import WebhookError

MAX_DEPTH = 64
"""Deepest nesting of JSON arrays/objects accepted (real payloads stay under 10)."""

MAX_CONTAINERS = 1_000_000
"""Most arrays + objects accepted in one body (real payloads hold a few thousand)."""

# Everything but the bytes that matter to nesting: quotes and brackets.
_NOT_STRUCTURE_BYTES = bytes(b for b in range(256) if b not in b'"[]{}')
_OPEN_AS_SQUARE = bytes.maketrans(b"{}", b"[]")


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
        raise WebhookError(400, f"JSON top level must be an object, not {json_type(value)}")
    return value


def json_type(value: object) -> str:
    """A JSON value's type as a refusal names it: ``null``, ``a number``, ``an array``..."""
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
