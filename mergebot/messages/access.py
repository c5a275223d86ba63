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
