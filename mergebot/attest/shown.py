"""A landed record's provenance as its page and the API show it (pure): whether its landing statement verifies with
the data directory's trust file, by which key, its number and main's move, and every statement of the commit,
decoded, each with whether it opens with a trusted key.

The statements come from the database (``db.attest.of_landed``); they are checked exactly as ``mergebot attest
verify`` checks a git note (``chain.landing_of``), so what the page says is what a verifier with a clone finds.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mergebot import messages as say
from mergebot.attest import chain, keys, notes
from mergebot.attest.envelope import IN_TOTO, Untrusted, open_envelope


@dataclass(frozen=True)
class Provenance:
    verified: bool
    why: str | None = None  # why it does not verify
    keyid: str | None = None  # the key that signed the landing statement
    sequence: int | None = None
    before: str | None = None
    after: str | None = None
    signed_at: str | None = None
    statements: list[dict[str, Any]] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {"verified": self.verified, "why": self.why, "keyid": self.keyid, "sequence": self.sequence,
                "main": {"before": self.before, "after": self.after}, "signed_at": self.signed_at,
                "statements": self.statements}


def decoded(envelope: Any) -> dict[str, Any] | None:
    """An envelope's statement as it reads, not yet trusted (None when it is no base64 JSON object)."""
    try:
        payload = json.loads(base64.b64decode(str(envelope.get("payload")), validate=True))
    except (AttributeError, ValueError, binascii.Error):
        return None
    return payload if isinstance(payload, dict) else None


def of_landed(sha: str, repo: str, rows: Sequence[Mapping[str, Any]], trust_text: str | None) -> Provenance:
    """The provenance of ``repo``'s landed commit ``sha`` from its statements' rows (``kind, sequence, keyid,
    subject_sha, envelope``) and the trust file's text (None: the data directory has none)."""
    mine = [r for r in rows if r.get("subject_sha") == sha]
    trust: keys.Trust | None = None
    problem: str | None = None
    if trust_text is None:
        problem = say.ATTEST_NO_TRUST_FILE
    else:
        try:
            trust = keys.read_trust(trust_text)
        except Untrusted as e:
            problem = say.attest_server_trust_bad(e.message)
    statements = []
    for r in mine:
        opened: str | None = None
        if trust is not None:
            try:
                open_envelope(r["envelope"], [k.key() for k in trust.keys], IN_TOTO)
            except Untrusted as e:
                opened = e.message
        statements.append({"id": r.get("id"), "kind": r.get("kind"), "sequence": r.get("sequence"),
                           "keyid": r.get("keyid"), "envelope": r["envelope"], "statement": decoded(r["envelope"]),
                           "signature_verifies": trust is not None and opened is None, "why": opened or problem})
    if trust is None:
        return Provenance(False, problem, statements=statements)
    try:
        statement, keyid = chain.landing_of(sha, notes.text([r["envelope"] for r in mine]), trust, repo)
    except Untrusted as e:
        return Provenance(False, e.message, statements=statements)
    p = statement["predicate"]
    main = p.get("main") or {}
    return Provenance(True, None, keyid, p.get("sequence"), main.get("before"), main.get("after"),
                      (p.get("timings") or {}).get("signedAt"), statements)
