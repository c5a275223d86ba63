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


# -- adding a repository and its held-out checks (``mergebot repo add``/``repo set``, the API) ----------------------


def repo_unknown_forge(forge: str) -> str:
    return f"unknown forge {forge!r}"


FORGE_REPO_NOT_OWNER_NAME = "the forge repository is OWNER/NAME"


def forge_needs_url(forge: str) -> str:
    return f"a {forge} repository needs the server's URL"


CREDENTIALS_IN_FORGE_URL = "put no credentials in a forge URL: the token comes from the environment"


def not_an_env_name(env: str | None) -> str:
    return f"{env!r} is not an environment variable name"


def set_env_first(env: str | None) -> str:
    return f"set the environment variable {env} first (the server reads it; it is never stored)"


def app_key_not_rsa(env: str | None, error: BaseException) -> str:
    return f"{env} holds no RSA private key (a GitHub App's .pem file): {error}"


APP_ONLY_ON_GITHUB = "only a GitHub repository authenticates as a GitHub App"
APP_NEEDS_ID_AND_KEY = "a GitHub App needs both --github-app-id and --github-app-key-env"
APP_IDS_POSITIVE = "a GitHub App's id and installation id are positive numbers"
REPO_NAME_MALFORMED = "a repository name is letters, digits, '-' and '_' (at most 64)"


def repo_exists(name: str, path: object) -> str:
    return f"repository {name!r} already exists at {path}"


def _held_out(folder: object) -> str:
    """How a refusal of ``--held-out DIR`` starts: the option and the directory, as given."""
    return f"--held-out {folder}"


def held_out_not_a_dir(folder: object) -> str:
    return _held_out(folder) + " is not a directory"


def held_out_file_too_big(rel: str, most_mib: int) -> str:
    return f"held-out file {rel} is over {most_mib} MiB"


def held_out_count(folder: object, n: int, most: int) -> str:
    return _held_out(folder) + f" holds {n} files: give 1 to {most}"
