"""Plain records the store returns. No behaviour beyond building themselves from a row."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, fields, is_dataclass
from datetime import datetime
from typing import Any, Self


@functools.cache
def _names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls))


@functools.cache
def _name_set(cls: type) -> frozenset[str]:
    return frozenset(_names(cls))


class _FromRow:
    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Self:
        names = _name_set(cls)  # type: ignore[arg-type]
        return cls(**{k: v for k, v in row.items() if k in names})


def record(obj: Any) -> dict[str, Any]:
    """A record as a dict for a JSON answer: ``dataclasses.asdict`` without its deep copy of every value (about
    6% of the server's CPU in the seeds' replay; the answer is serialized at once and never changed). A field
    that is a dataclass becomes a dict too; lists and dicts are passed as they are (a dataclass inside one is
    left to the JSON encoder, which encodes dataclasses itself)."""
    cls: type = type(obj)
    out = {}
    for name in _names(cls):
        value = getattr(obj, name)
        out[name] = record(value) if is_dataclass(value) and not isinstance(value, type) else value
    return out


@dataclass
class Agent(_FromRow):
    id: int
    name: str
    role: str
    created_at: datetime | None = None
    revoked_at: datetime | None = None


@dataclass
class Subtask(_FromRow):
    id: int
    title: str
    status: str
    priority: int
    claim_version: int
    attempts: int
    max_attempts: int
    parent_id: int | None = None
    group_name: str | None = None
    description: str = ""
    owner_id: int | None = None
    owner: str | None = None
    previous_owner_id: int | None = None
    previous_owner: str | None = None
    claimed_at: datetime | None = None
    heartbeat_at: datetime | None = None
    lease_expires_at: datetime | None = None
    candidate_sha: str | None = None
    status_reason: str | None = None
    idempotency_key: str | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    finished_at: datetime | None = None
    depends_on: list[int] = field(default_factory=list)


@dataclass
class Handle:
    """What an agent holds after a claim: every later write names both numbers."""

    id: int
    claim_version: int


@dataclass
class Landed(_FromRow):
    id: int
    subtask_id: int
    claim_version: int
    owner_id: int
    repo: str
    target_ref: str
    candidate_sha: str
    base_sha: str
    merged_sha: str
    tree_sha: str
    verifier_command: str
    verifier_result: str
    duration_ms: int
    log_digest: str
    main_status: str
    landed_at: datetime
    owner: str | None = None
    main_sha: str | None = None  # the commit main moved to; differs from merged_sha in a batch
    batch_size: int = 1


@dataclass
class Landing:
    """The evidence the landing path hands to ``Store.land``."""

    subtask_id: int
    claim_version: int
    owner_id: int
    repo: str
    target_ref: str
    candidate_sha: str
    base_sha: str
    merged_sha: str
    tree_sha: str
    verifier_command: str
    verifier_result: str
    duration_ms: int
    log_digest: str
    main_sha: str | None = None  # a batch: the commit main moved to (its last member's merge); None = merged_sha
    batch_size: int = 1
