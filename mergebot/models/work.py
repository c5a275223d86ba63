"""The coordination records: agents, subtasks and the handle a claim gives.

Part of ``mergebot.models``: plain records, no behaviour beyond building themselves.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from mergebot.models.base import FromRow


@dataclass
class Agent(FromRow):
    id: int
    name: str
    role: str
    created_at: datetime | None = None
    revoked_at: datetime | None = None


@dataclass
class Subtask(FromRow):
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
    paths: list[str] = field(default_factory=list)  # its footprint: the paths (globs) it is expected to touch
    allow_test_removal: bool = False  # a lead allowed it to delete tests (never its owner)
    allow_check_changes: bool = False  # a lead allowed it to change what configures the check
    acceptance_probe: int | None = None  # the run of its acceptance tests on main when they were attached
    allow_behaviour_change: bool = False  # a lead marked it as changing behaviour (edits of tests are expected)


@dataclass
class Handle:
    """What an agent holds after a claim: every later write names both numbers."""

    id: int
    claim_version: int
