"""What a caller is told when a door stays shut: no token, a token nobody has, a role that may not, a server that
is still starting. The API, the git remote and the pages say the same.

Part of ``mergebot.messages``: its rules hold here.
"""

from __future__ import annotations

NO_TOKEN = "missing token: send 'Authorization: Bearer <token>'"
BAD_TOKEN = "unknown or revoked token"
SERVER_STARTING = "the server is starting; try again in a moment"


def role_may_not(role: str, action: str) -> str:
    """``action`` as ``mergebot.auth`` names it (``submit_result``) or in words."""
    return f"role {role} may not {action.replace('_', ' ')}"


# -- the same, as the command line says it (``mergebot.cli``): the variable to set, not the HTTP header ------------

CLI_NO_TOKEN = ("mergebot: no token: set MERGEBOT_TOKEN (or give --token) to your agent's token; an admin makes one "
                "with `mergebot agent add NAME` on the server's machine")
CLI_BAD_TOKEN = ("mergebot: the server knows no such token (unknown, revoked, or rotated away): check MERGEBOT_TOKEN "
                 "or --token, and that MERGEBOT_URL or --server names the right server; an admin gives a new one with "
                 "`mergebot agent rotate NAME` (or `mergebot agent add NAME`)")


def may_not_approve(name: str, role: str) -> str:
    """An approval refused for the approver's role (``auth.PERMISSIONS['approve']``)."""
    return (f"{name} (role {role}) may not approve a candidate: an approval is a lead's, a reviewer's or an admin's, "
            "so that a person (or a reviewer agent), not the agents doing the work, lets the change land. Nothing "
            "changed.")


def may_not_approve_own(name: str, candidate_id: int) -> str:
    return (f"{name} pushed candidate {candidate_id}: an approval is someone else's (a lead's or a reviewer's). "
            "Nothing changed.")


def approval_too_late(candidate_id: int, status: str) -> str:
    return (f"candidate {candidate_id} is {status}: only a candidate still in the queue (or waiting for its "
            "approval) can be approved; a new push is a new candidate, approved on its own.")
