"""Mergebot's own exceptions: one class per thing a caller can act on, each with its HTTP status.

The stores raise these (never raw psycopg errors: see ``mergebot.db.base.translate``); the API turns them into
``{"error": {"code", "message", ...}}`` and the CLI prints their message.
"""

from __future__ import annotations

from typing import Any


class MergebotError(Exception):
    """``status``: the HTTP status it is answered with; ``code``: its name in the answer. A subclass gives either as a
    class keyword (``class NotFound(MergebotError, status=404, code="not_found")``), else keeps its base's."""

    status = 500
    code = "internal"

    def __init_subclass__(cls, *, status: int | None = None, code: str | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.status = status or cls.status
        cls.code = code or cls.code

    def __init__(self, message: str, **detail: Any) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail

    def as_json(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": self.message, **self.detail}}


class Invalid(MergebotError, status=422, code="invalid"):
    """Bad input. ``field`` names the offending field."""


class Unauthorized(MergebotError, status=401, code="unauthorized"):
    """No token, or an unknown or revoked one."""


class Forbidden(MergebotError, status=403, code="forbidden"):
    """The token's role may not do this."""


class NotFound(MergebotError, status=404, code="not_found"):
    """No such thing (``field`` names what was looked up, where known)."""


class Conflict(MergebotError, status=409, code="conflict"):
    """The change clashes with what is there now: it exists already, or its state moved on."""


class Duplicate(Conflict, code="duplicate"):
    """The subtask nearly matches an open one (``twins`` lists the pairs); create it anyway with
    ``allow_duplicate``."""


class ClaimSuperseded(Conflict, code="claim_superseded"):
    """The caller's (id, claim_version) no longer owns the subtask. Stop working on it."""


class InvalidTransition(Conflict, code="invalid_transition"):
    """The status the subtask has does not allow this change."""


class BeingLanded(InvalidTransition, code="being_landed"):
    """Not now: a candidate of the subtask is being landed (its intent is written, main is about to move), so a lead's
    cancel would leave main with a commit no landed row names. A typed answer (``kind``, the ``candidate``): wait for
    its verdict."""

    def __init__(self, message: str, **detail: Any) -> None:
        super().__init__(message, kind=self.code, **detail)


class Unavailable(MergebotError, status=503, code="unavailable"):
    """The database is unreachable or too slow; nothing was written. Retry later."""


class Refused(MergebotError, status=429, code="refused"):
    """Not now: the claim would take more than the bot admits (a typed answer, ``kind`` its code). ``retry_after``
    seconds, when given, is also the answer's Retry-After header."""

    def __init__(self, message: str, **detail: Any) -> None:
        super().__init__(message, kind=self.code, **detail)


class Capacity(Refused, code="capacity"):
    """The claim's lane holds more work than its verifiers clear in a while (``mergebot.landing.intake.admission``):
    the lane, its backlog, ``retry_after`` and the lanes that admit (``elsewhere``)."""


class WipLimit(Refused, code="wip_limit"):
    """The agent holds as many subtasks (running claims and queued candidates) as its cap allows: ``holds`` names
    them. Finish or release one."""
