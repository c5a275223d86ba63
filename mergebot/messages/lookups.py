"""What a caller is told when what it asked for by name or id is not there (the API's 404s, the pages').

Part of ``mergebot.messages``: its rules hold here.
"""

from __future__ import annotations


def no_such_repository(repo: str) -> str:
    return f"no repository named {repo!r}"


def no_such_subtask(subtask_id: int) -> str:
    return f"subtask {subtask_id} does not exist"
