"""What a caller is told when what it asked for by name or id is not there (the API's 404s, the pages').

Part of ``mergebot.messages``: its rules hold here.
"""

from __future__ import annotations

from collections.abc import Sequence


def no_such_repository(repo: str) -> str:
    return f"no repository named {repo!r}"


def no_such_subtask(subtask_id: int) -> str:
    return f"subtask {subtask_id} does not exist"


def no_such_repository_on(repo: str, server: str) -> str:
    """``mergebot drill``'s check, asking a running server."""
    return f"no repository named {repo!r} on {server}"


def no_such_subtasks(missing: Sequence[int]) -> str:
    return f"no such subtasks: {list(missing)}"


def no_subtask(subtask_id: int) -> str:
    return f"no subtask {subtask_id}"


def no_such_candidate(cand_id: int) -> str:
    return f"candidate {cand_id} does not exist"


def no_such_landed(landed_id: int) -> str:
    return f"no landed row {landed_id}"


def no_such_job(job_id: int) -> str:
    return f"verify job {job_id} does not exist"
