"""What git and the remotes the bot talks git to say when they fail: a git command, the forge's git remote (fetch,
push, ls-remote), the bot's own servers as a remote verifier reaches them, the git slots when all are busy. These
reach operators (logs, ``/healthz``, a paused repository's reason) and agents (a worktree command that failed).

Part of ``mergebot.messages``: its rules hold here. ``stderr`` is git's own words, quoted as given (trimmed).
"""

from __future__ import annotations

from collections.abc import Sequence

from mergebot.messages.words import _short

# -- a git command ---------------------------------------------------------------------------------------------


def git_failed(args: Sequence[str], stderr: str) -> str:
    """``args``: the command's first words (``fetch --quiet``)."""
    return f"git {' '.join(args)} failed: {stderr.strip()[:2000]}"


def git_failed_in_worktree(command: str, stderr: str) -> str:
    return f"git {command} failed:\n{stderr.strip()}"


def no_branch(source: str, branch: str) -> str:
    return f"{source} has no branch {branch!r}"


def already_exists(path: object) -> str:
    return f"{path} already exists"


HOOKS_NEED_CURL = "the hooks need curl: install it (apt-get install curl)"


def no_git_slot(timeout: float, limit: int) -> str:
    return f"no free git slot within {timeout:g} s ({limit} busy)"


# -- the forge's git remote --------------------------------------------------------------------------------------


def forge_git_failed(what: str, error: object) -> str:
    """``what``: what the bot was doing, a phrase its caller words (``fetching main``)."""
    return f"{what}: {error}"


def forge_lost_commit(sha: str, ref: str, got: str | None) -> str:
    return f"the forge no longer has {_short(sha)} (its {ref} is at {got and _short(got)})"


def forge_refused_push(branch: str, text: str) -> str:
    return f"the forge refused the push to {branch}: {text[-500:]}"


def forge_push_failed(text: str) -> str:
    return f"pushing to the forge failed: {text[-500:]}"


# -- the bot's servers, from a remote verifier -------------------------------------------------------------------


def servers_unreachable(urls: Sequence[str], last: object) -> str:
    return f"cannot reach {' or '.join(urls)} ({last})"


def servers_fetch_failed(sha: str, repo: str, urls: Sequence[str], stderr: str) -> str:
    return f"could not fetch {_short(sha)} of {repo} from {' or '.join(urls)}: {stderr.strip()[-300:]}"
