"""DSSE envelopes (securesystemslib's): seal a statement, open one with the trusted keys.

An envelope is ``{"payload": base64, "payloadType": ..., "signatures": [{"keyid", "sig"}]}``; its signatures cover
the payload type as well as the payload (DSSE's pre-authentication encoding), so neither can change unseen.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from typing import Any

from securesystemslib.dsse import Envelope
from securesystemslib.exceptions import FormatError, VerificationError
from securesystemslib.signer import Key, Signer

from mergebot import messages as say

IN_TOTO = "application/vnd.in-toto+json"


class Untrusted(Exception):
    """An envelope, statement or trust file that does not hold; ``message`` says why."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def canonical(data: Any) -> bytes:
    """The bytes a statement is signed as: JSON with sorted keys and no spaces (the same bytes for the same facts)."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def seal(payload: dict[str, Any], payload_type: str, signer: Signer) -> dict[str, Any]:
    envelope = Envelope(canonical(payload), payload_type, {})
    envelope.sign(signer)
    return envelope.to_dict()


def open_envelope(data: Any, keys: Sequence[Key], payload_type: str) -> tuple[dict[str, Any], str]:
    """The payload of an envelope signed by one of ``keys``, of ``payload_type``, and the id of the key that signed
    it; ``Untrusted`` with the reason otherwise."""
    try:
        envelope = Envelope.from_dict(copy.deepcopy(data))  # it rewrites the signatures it is given
    except (KeyError, TypeError, ValueError, AttributeError, FormatError) as e:
        raise Untrusted(say.attest_unreadable("envelope", e)) from e
    if envelope.payload_type != payload_type:
        raise Untrusted(say.attest_wrong_payload_type(envelope.payload_type, payload_type))
    if not envelope.signatures:
        raise Untrusted(say.ATTEST_UNSIGNED)
    if not keys:
        raise Untrusted(say.attest_unknown_key(sorted(envelope.signatures)))
    try:
        accepted = envelope.verify(list(keys), 1)
    except VerificationError as e:
        known = {k.keyid for k in keys}
        if not any(keyid in known for keyid in envelope.signatures):
            raise Untrusted(say.attest_unknown_key(sorted(envelope.signatures))) from e
        raise Untrusted(say.ATTEST_BAD_SIGNATURE) from e
    try:
        payload = json.loads(envelope.payload)
    except ValueError as e:
        raise Untrusted(say.attest_unreadable("payload", e)) from e
    if not isinstance(payload, dict):
        raise Untrusted(say.attest_unreadable("payload", type(payload).__name__))
    return payload, sorted(accepted)[0]
