"""Mergebot's own exceptions: one class per thing a caller can act on, each with its HTTP status.

The stores raise these (never raw psycopg errors: see ``mergebot.db.base.translate``); the API turns them into
``{"error": {"code", "message", ...}}`` and the CLI prints their message.
"""

from __future__ import annotations

from typing import Any


class MergebotError(Exception):
    status = 500
    code = "internal"

    def __init__(self, message: str, **detail: Any) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail

    def as_json(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": self.message, **self.detail}}


class Invalid(MergebotError):
    """Bad input. ``field`` names the offending field."""

    status = 422
    code = "invalid"


class Unauthorized(MergebotError):
    status = 401
    code = "unauthorized"


class Forbidden(MergebotError):
    status = 403
    code = "forbidden"


class NotFound(MergebotError):
    status = 404
    code = "not_found"


class Conflict(MergebotError):
    status = 409
    code = "conflict"


class Duplicate(Conflict):
    """The subtask nearly matches an open one (``twins`` lists the pairs); create it anyway with
    ``allow_duplicate``."""

    code = "duplicate"


class ClaimSuperseded(Conflict):
    """The caller's (id, claim_version) no longer owns the subtask. Stop working on it."""

    code = "claim_superseded"


class InvalidTransition(Conflict):
    code = "invalid_transition"


class Unavailable(MergebotError):
    """The database is unreachable or too slow; nothing was written. Retry later."""

    status = 503
    code = "unavailable"
