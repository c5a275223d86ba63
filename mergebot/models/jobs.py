"""Verify jobs and the forge's rows: deliveries and the outbox of statuses, check runs and pull request comments.

Part of ``mergebot.models``: plain records, no behaviour beyond building themselves.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from mergebot.models.base import FromRow


@dataclass
class Job(FromRow):
    """A verify job: the queue's request for the repository's check on one exact commit."""

    id: int
    repo: str
    commit_sha: str
    command: str
    timeout_s: int
    purpose: str  # candidate, retry, base or post_land
    status: str  # queued, running, done or cancelled
    claim_version: int
    attempts: int
    candidate_id: int | None = None
    landed_id: int | None = None
    worker_id: int | None = None
    worker_name: str | None = None
    lease_expires_at: datetime | None = None
    outcome: str | None = None
    result: dict[str, Any] | None = None
    created_at: datetime | None = None
    finished_at: datetime | None = None
    cache: dict[str, Any] | None = None  # the run's cache request: paths, key_files, write (verifier.cache)
    sandbox: dict[str, Any] | None = None  # the run's sandbox: paths (read-only in its view), disk_limit_mb
    tree_sha: str | None = None  # the tree the run was proven to be (set when it finishes)
    started_at: datetime | None = None
    is_group: bool = False  # a run of named checks: finished with its children's combined result, never claimed
    parent_id: int | None = None  # one check of a group (``check_name``; ``required``: it must pass)
    check_name: str | None = None
    required: bool | None = None


@dataclass(kw_only=True)
class Outgoing(FromRow):
    """What each row of the forge outbox keeps of its sending: the tries so far, the last one's error, and when the
    bot gave up on it."""

    attempts: int = 0
    last_error: str | None = None
    given_up_at: datetime | None = None


@dataclass(kw_only=True)
class Revised(Outgoing):
    """An outbox row the forge is sent again as it changes: ``version`` counts its changes, ``sent_version`` is
    the one the forge has."""

    version: int = 1
    sent_version: int = 0


@dataclass
class StatusRow(Outgoing):
    """A commit status waiting in the forge outbox (or sent, or given up)."""

    id: int
    repo: str
    sha: str
    state: str
    description: str
    candidate_id: int | None = None
    sent_at: datetime | None = None


@dataclass
class CheckRunRow(Revised):
    """A check run in the forge outbox (a candidate's, or main's new commit's): GitHub's id once created, and how
    far it was sent."""

    id: int
    kind: str  # "candidate": a pull request's head commit; "main": main's new commit after a landing
    candidate_id: int | None
    repo: str
    head_sha: str
    check_run_id: int | None = None
    named_runs: dict[str, int] = field(default_factory=dict)  # one check run per named check, by its name


@dataclass
class PullRow(Revised):
    """A pull request the bot heard of, with its one living comment once posted, and how far it was sent."""

    repo: str
    number: int
    head_ref: str
    comment_id: int | None = None
    sent_digest: str | None = None
    answer: str | None = None  # to the last command given on the pull request
    full_verdict: bool = False  # "@mergebot why" was asked: the comment shows the whole verdict


@dataclass
class DeliveryRow(FromRow):
    """A forge webhook delivery, by its id."""

    forge: str
    delivery_id: str
    event: str
    body_sha256: str
    status: str
    http_status: int | None = None
    outcome: str | None = None
    repo: str | None = None
    attempts: int = 1
