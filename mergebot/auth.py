"""Tokens and roles. Pure: no database here.

A token is shown once when an agent is added; only its SHA-256 is stored. Tokens carry 256 random bits, so a
plain hash (no salt, no stretching) cannot be reversed, and the lookup by hash is an index probe. The stored
hash is compared again with ``hmac.compare_digest`` so the comparison itself is constant-time.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from enum import StrEnum

TOKEN_PREFIX = "mb_"


class Role(StrEnum):
    ADMIN = "admin"
    LEAD = "lead"
    AGENT = "agent"
    VERIFIER = "verifier"
    REVIEWER = "reviewer"


# Who may do what. Reading is open to every role; the rest is listed here, in one place.
PERMISSIONS: dict[str, frozenset[Role]] = {
    "claim": frozenset({Role.AGENT, Role.LEAD, Role.ADMIN}),
    "create_subtask": frozenset({Role.AGENT, Role.LEAD, Role.ADMIN}),
    "note": frozenset({Role.AGENT, Role.LEAD, Role.ADMIN}),
    "announce": frozenset({Role.LEAD, Role.ADMIN}),
    "assign": frozenset({Role.LEAD, Role.ADMIN}),
    "manage_subtasks": frozenset({Role.LEAD, Role.ADMIN}),
    "verify": frozenset({Role.VERIFIER, Role.ADMIN}),
    "admin": frozenset({Role.ADMIN}),
    "approve": frozenset({Role.LEAD, Role.REVIEWER, Role.ADMIN}),  # let a passed candidate land (a person's gate)
    "reverify": frozenset({Role.LEAD, Role.REVIEWER, Role.ADMIN}),  # run a landed record's check again (issue 44)
    "read": frozenset(Role),
}


def allowed(role: Role, action: str) -> bool:
    return role in PERMISSIONS[action]


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_token(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()


def same_hash(a: bytes, b: bytes) -> bool:
    return hmac.compare_digest(a, b)
