"""What an operator is told when the bot's setup is wrong: a secret's environment variable unset or holding the
wrong thing, a forge named or configured wrongly, a tool missing. Also the demo's (``mergebot demo``) own failures,
which whoever tries the bot reads.

Part of ``mergebot.messages``: its rules hold here. A sentence names the variable, never its value.
"""

from __future__ import annotations

# -- secrets in the environment --------------------------------------------------------------------------------

APP_KEY_NOT_RSA = "a GitHub App's key is an RSA private key"


def env_unset(env: str | None, what: str) -> str:
    """``env`` is the variable's name; ``what`` says what it should hold."""
    return f"the environment variable {env} ({what}) is not set"


def app_key_unset(env: str) -> str:
    return env_unset(env, "the GitHub App's private key")


def app_key_unusable(env: str, error: BaseException) -> str:
    """The key could not sign; only the error's class is named (its text may quote the key)."""
    return f"{env} holds no RSA private key that can sign ({type(error).__name__})"


def forge_token_unset(env: str | None) -> str:
    return env_unset(env, "the forge token")


# -- a forge's configuration -------------------------------------------------------------------------------------


def forge_repo_malformed(repo: str) -> str:
    return f"repo must be 'owner/name', got {repo!r}"


def forge_needs_base_url(forge: str) -> str:
    return f"{forge} needs a base_url"


def unknown_forge(forge: str) -> str:
    return f"unknown forge {forge!r} (expected github, gitea or forgejo)"


# -- the demo ------------------------------------------------------------------------------------------------------


def demo_git_failed(command: str, stderr: str) -> str:
    return f"git {command}: {stderr}"


def demo_nothing_to_claim(name: str) -> str:
    return f"{name} found nothing to claim"


def demo_status_timeout(subtask_id: int, status: str, timeout: float) -> str:
    return f"subtask {subtask_id} did not become {status} within {timeout:.0f} s"
