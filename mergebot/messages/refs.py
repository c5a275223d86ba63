"""A subtask's branch: the one name an agent pushes, made and read here and nowhere else.

The branch names the subtask and the claim version it is pushed under, ``subtasks/<id>/v<claim_version>``; its
full ref is ``refs/heads/subtasks/<id>/v<claim_version>``. The claim's answer says which branch; the push checks
read it back to know whose work it is.

Rules:
  * ``subtask_ref`` makes the full ref and ``parse_subtask_ref`` reads one back: for every subtask and claim
    version, ``parse_subtask_ref(subtask_ref(i, v)) == (i, v)``. ``subtask_branch`` is the same name without
    ``refs/heads/``, as ``git checkout -B`` and a claim's ``branch`` say it.
  * Both numbers are positive decimal integers without a sign or leading zeros, at most 18 digits (they fit
    PostgreSQL's bigint), so a subtask's claim has exactly one name: ``subtasks/05/v2``, ``subtasks/5/v0`` or
    ``subtasks/5/v2/x`` is no subtask's branch, and a push to it is refused as a protected ref.
  * ``parse_subtask_ref`` takes the whole text or nothing: a short name, a trailing newline or any other ref is
    None. ``subtask_ref`` refuses (``ValueError``) numbers it could not read back.
"""

from __future__ import annotations

import re

HEADS = "refs/heads/"
PREFIX = f"{HEADS}subtasks/"
PATTERN = f"{PREFIX}<id>/v<claim_version>"  # how a sentence names every subtask branch
GLOB = f"{PREFIX}*"  # every subtask branch, in a refspec
MAX_DIGITS = 18
_NUMBER = rf"[1-9][0-9]{{0,{MAX_DIGITS - 1}}}"
_REF = re.compile(rf"{re.escape(PREFIX)}({_NUMBER})/v({_NUMBER})")


def subtask_ref(subtask_id: int, claim_version: int) -> str:
    """``refs/heads/subtasks/<id>/v<claim_version>``: the ref a claim's owner pushes."""
    for name, n in (("subtask id", subtask_id), ("claim version", claim_version)):
        if not 0 < n < 10**MAX_DIGITS:
            raise ValueError(f"a subtask branch needs a {name} from 1 to {10**MAX_DIGITS - 1}, not {n!r}")
    return f"{PREFIX}{subtask_id}/v{claim_version}"


def subtask_branch(subtask_id: int, claim_version: int) -> str:
    """``subtasks/<id>/v<claim_version>``: ``subtask_ref`` without ``refs/heads/``."""
    return subtask_ref(subtask_id, claim_version).removeprefix(HEADS)


def parse_subtask_ref(ref: str) -> tuple[int, int] | None:
    """``(subtask id, claim version)`` of a subtask's full ref; None for any other text."""
    m = _REF.fullmatch(ref)  # not match with "$": that also matches before a trailing newline
    return (int(m.group(1)), int(m.group(2))) if m else None
