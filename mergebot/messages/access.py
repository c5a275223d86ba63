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
