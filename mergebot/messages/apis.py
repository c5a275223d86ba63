"""What a forge's API call that failed says: GitHub or Gitea (Forgejo) unreachable, an error status, an answer
that is not what was asked for, a client that cannot do what was asked. These reach operators: the outbox's
errors, a paused repository's reason, the logs.

Part of ``mergebot.messages``: its rules hold here. ``forge`` is the forge's name as people write it
(``GitHub``, ``Gitea``); ``doing`` is a phrase its caller words (``reading pull request owner/name#3``).
"""

from __future__ import annotations


def forge_unreachable(forge: str, doing: str, error: object) -> str:
    """``error`` as the caller shows it (``repr(e)`` for a transport error's class)."""
    return f"{forge} unreachable while {doing}: {error}"


def forge_answered(forge: str, status: int, doing: str, why: object) -> str:
    """An error status, with the forge's own message (or the status's reason phrase)."""
    return f"{forge} {status} while {doing}: {why}"


def forge_sent_no(forge: str, what: str, doing: str) -> str:
    """An answer without the body asked for: ``what`` is ``object`` (GitHub's) or ``JSON`` (Gitea's)."""
    return f"{forge} sent no {what} while {doing}"


NO_INSTALLATION_TOKEN = "GitHub's installation token answer has no token or expiry"
CLIENT_WRITES_NO_COMMENTS = "this client writes no comments"
CLIENT_POSTS_NO_CHECK_RUNS = "this client posts no check runs"
CHECK_RUNS_ARE_GITHUBS = "check runs are GitHub's"
NO_FORGE_TOKEN = "no forge token"
