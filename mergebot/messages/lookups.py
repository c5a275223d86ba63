"""What a caller is told when what it asked for by name or id is not there (the API's 404s, the pages').

Part of ``mergebot.messages``: its rules hold here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence


def no_such_repository(repo: str) -> str:
    return f"no repository named {repo!r}"


def no_such_repository_on(repo: str, server: str) -> str:
    """``mergebot drill``'s check, asking a running server."""
    return f"{no_such_repository(repo)} on {server}"


def no_such_subtasks(missing: Sequence[int]) -> str:
    return f"no such subtasks: {list(missing)}"


def _by_id(template: str) -> Callable[[int], str]:
    """The sentence for a row asked for by its id and not there: ``template``, its ``{}`` the id."""

    def sentence(row_id: int) -> str:
        return template.format(row_id)

    return sentence


no_such_subtask = _by_id("subtask {} does not exist")
no_subtask = _by_id("no subtask {}")
no_such_candidate = _by_id("candidate {} does not exist")
no_such_landed = _by_id("no landed row {}")
no_such_job = _by_id("verify job {} does not exist")
