"""The local mirror of a forge repository: fetch what webhooks announce, follow the forge's target branch, and
push a verified merge back with an expected-old-value guard.

The forge is the truth for its target branch: before each candidate and at every reconcile the mirror's
target ref is set to the forge's. Landing pushes ``merged:refs/heads/<target>`` with
``--force-with-lease=<target>:<old>``: the forge moves only if its branch is still exactly the base that was
verified, never a blind force push.

Credentials go to git through ``GIT_CONFIG_*`` environment variables (an ``http.extraHeader``), so a token
never appears in a process's arguments, a URL or a log line. Every ref and sha is an argument, never shell text.
The token is the repository's (``git.credentials``): a GitHub App's installation token is asked for at each call
(cached until shortly before it expires), and a call the forge refuses with a 401 is made once more with a
renewed one.
"""

from __future__ import annotations

import base64
import os
import subprocess
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from mergebot.errors import MergebotError
from mergebot.git import credentials
from mergebot.git import repo as git

INCOMING = "refs/mergebot/incoming/"


class ForgeUnavailable(MergebotError):
    """The forge's git remote could not be reached or did not answer: try again later."""


class ForgeRefused(MergebotError):
    """The forge refused our push to its branch for good (a protection rule, permissions): an operator acts."""


@contextmanager
def _talking_to_forge(what: str) -> Iterator[None]:
    try:
        yield
    except (RuntimeError, subprocess.SubprocessError, OSError) as e:
        raise ForgeUnavailable(f"{what}: {e}") from e


@dataclass(frozen=True)
class Remote:
    url: str
    token: str | None = None  # a fixed token; ``creds`` instead when it comes from the repository's credentials
    creds: credentials.Credentials | None = None

    @property
    def http(self) -> bool:
        return self.url.startswith(("http://", "https://"))

    def current_token(self) -> str | None:
        if not self.http:
            return None  # a path or ssh remote takes no token (and a GitHub App mints none for it)
        if self.creds is None:
            return self.token
        try:
            return self.creds.token()
        except credentials.CredentialError as e:
            raise ForgeUnavailable(e.message) from e

    def env(self, token: str | None = None) -> dict[str, str]:
        token = token if token is not None else self.current_token()
        if not token or not self.http:
            return {}
        basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
        return {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "http.extraHeader",
                "GIT_CONFIG_VALUE_0": f"Authorization: Basic {basic}"}

    def run(self, args: list[str], *, cwd: Path, timeout: float) -> str:
        """``git args`` against this remote; refused credentials (401) are renewed once, where they can be."""
        token = self.current_token()
        try:
            return git.run_git(args, cwd=cwd, extra_env=self.env(token), timeout=timeout)
        except RuntimeError as e:
            if self.creds is None or not credentials.refused_credentials(str(e)):
                raise
            try:
                fresh = self.creds.renew(token)
            except credentials.CredentialError as err:
                raise ForgeUnavailable(err.message) from err
            if fresh is None or fresh == token:
                raise
            return git.run_git(args, cwd=cwd, extra_env=self.env(fresh), timeout=timeout)


def remote_for(git_url: str, token_env: str | None) -> Remote:
    """A remote whose token is the environment variable ``token_env``'s (a personal token)."""
    return Remote(git_url, os.environ.get(token_env) if token_env else None)


def remote_of(repo: object) -> Remote:
    """The forge remote of a repository (a ``Repo``, or its columns as a mapping), with its credentials."""
    url = repo.get("forge_git_url") if isinstance(repo, Mapping) else getattr(repo, "forge_git_url", None)
    return Remote(str(url or ""), creds=credentials.for_repo(repo))


def fetch_commit(path: Path, remote: Remote, sha: str, ref: str, tag: str) -> None:
    """Bring ``sha`` into the mirror (by id; by ``ref`` if the forge will not serve ids), under a private ref
    named by ``tag`` (one per delivery, so concurrent deliveries never drop each other's)."""
    target = f"{INCOMING}{tag}"
    with _talking_to_forge(f"fetching {sha[:12]}"):
        try:
            remote.run(["fetch", "--quiet", "--no-tags", "--no-write-fetch-head", "--", remote.url,
                        f"+{sha}:{target}"], cwd=path, timeout=600)
        except RuntimeError:
            remote.run(["fetch", "--quiet", "--no-tags", "--no-write-fetch-head", "--", remote.url,
                        f"+{ref}:{target}"], cwd=path, timeout=600)
    repo = git.open_repo(path)
    got = git.head_of(repo, target)
    if got != sha:
        drop_incoming(path, tag)
        raise ForgeUnavailable(f"the forge no longer has {sha[:12]} (its {ref} is at {got and got[:12]})")


def drop_incoming(path: Path, tag: str) -> None:
    repo = git.open_repo(path)
    ref = f"{INCOMING}{tag}"
    if ref in repo.references:
        repo.references.delete(ref)


def set_branch(path: Path, ref: str, sha: str, message: str) -> None:
    """Point a subtask branch of the mirror at an accepted commit (only the bot writes the mirror's refs)."""
    repo = git.open_repo(path)
    repo.create_reference(ref, sha, force=True, message=message)


def forge_tip(path: Path, remote: Remote, ref: str) -> str | None:
    """The forge's current tip of ``ref`` (ls-remote: one round trip, no objects); None if it has no such ref."""
    with _talking_to_forge(f"reading {ref}"):
        out = remote.run(["ls-remote", "--", remote.url, ref], cwd=path, timeout=120)
    for line in out.splitlines():
        sha, _, name = line.partition("\t")
        if name == ref:
            return sha
    return None


def forge_head(path: Path, remote: Remote, branch: str) -> str:
    tip = forge_tip(path, remote, f"refs/heads/{branch}")
    if tip is None:
        raise ForgeUnavailable(f"the forge has no branch {branch!r}")
    return tip


def sync_target(path: Path, remote: Remote, branch: str) -> str:
    """Make the mirror's target branch what the forge's is, fetching its objects; returns that sha."""
    ref = f"refs/heads/{branch}"
    with _talking_to_forge(f"fetching {branch}"):
        remote.run(["fetch", "--quiet", "--no-tags", "--no-write-fetch-head", "--", remote.url, f"+{ref}:{ref}"],
                   cwd=path, timeout=600)
    head = git.head_of(git.open_repo(path), ref)
    assert head is not None
    return head


def push_lease(path: Path, remote: Remote, branch: str, old: str, new: str) -> bool:
    """Move the forge's ``branch`` from ``old`` to ``new``; False when the forge's branch is not at ``old``.

    Raises ForgeRefused when the forge refuses the update itself (branch protection, permissions) and
    ForgeUnavailable when the outcome is unknown (the connection broke: the push may or may not have landed).
    """
    ref = f"refs/heads/{branch}"
    try:
        remote.run(["push", "--quiet", f"--force-with-lease={ref}:{old}", "--", remote.url, f"{new}:{ref}"],
                   cwd=path, timeout=600)
    except RuntimeError as e:
        text = str(e)
        if "stale info" in text or "fetch first" in text or "non-fast-forward" in text:
            return False
        if "remote rejected" in text or "protected branch" in text or "permission" in text.lower():
            raise ForgeRefused(f"the forge refused the push to {branch}: {text[-500:]}") from e
        raise ForgeUnavailable(f"pushing to the forge failed: {text[-500:]}") from e
    except (subprocess.SubprocessError, OSError) as e:
        raise ForgeUnavailable(f"pushing to the forge failed: {e}") from e
    return True
