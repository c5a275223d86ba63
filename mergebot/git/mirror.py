"""The local mirror of a forge repository: fetch what webhooks announce, follow the forge's target branch, and
push a verified merge back with an expected-old-value guard.

The forge is the truth for its target branch: before each candidate and at every reconcile the mirror's
target ref is set to the forge's. Landing pushes ``merged:refs/heads/<target>`` with
``--force-with-lease=<target>:<old>``: the forge moves only if its branch is still exactly the base that was
verified, never a blind force push.

Replicas share no disk: each keeps its own mirror, cloned from the forge when it first needs it
(``ensure_mirror``). A commit made here that another machine must run (a candidate merged onto main) is pushed
to a queue branch on the forge, ``mergebot-queue/<target>/<sha>`` (as GitHub's own queue pushes
``gh-readonly-queue/...``), and deleted after its verdict; any replica or worker fetches it from there
(``have_commit``).

Credentials go to git through ``GIT_CONFIG_*`` environment variables (an ``http.extraHeader``), so a token
never appears in a process's arguments, a URL or a log line. Every ref and sha is an argument, never shell text.
The token is the repository's (``git.credentials``): a GitHub App's installation token is asked for at each call
(cached until shortly before it expires), and a call the forge refuses with a 401 is made once more with a
renewed one.
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from mergebot import messages as say
from mergebot.errors import MergebotError
from mergebot.git import credentials
from mergebot.git import repo as git
from mergebot.models import Repo

INCOMING = "refs/mergebot/incoming/"
QUEUE = "refs/heads/mergebot-queue/"


class ForgeUnavailable(MergebotError):
    """The forge's git remote could not be reached or did not answer: try again later."""


class ForgeRefused(MergebotError):
    """The forge refused our push to its branch for good (a protection rule, permissions): an operator acts."""


@contextmanager
def _talking_to_forge(what: str) -> Iterator[None]:
    try:
        yield
    except (RuntimeError, subprocess.SubprocessError, OSError) as e:
        raise ForgeUnavailable(say.forge_git_failed(what, e)) from e


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
        raise ForgeUnavailable(say.forge_lost_commit(sha, ref, got))


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


def sync_target(path: Path, remote: Remote, branch: str) -> str:
    """Make the mirror's target branch what the forge's is, fetching its objects (the mirror is cloned first when
    this machine has none, ``ensure_mirror``); returns that sha."""
    ensure_mirror(path, remote, branch)
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
            raise ForgeRefused(say.forge_refused_push(branch, text)) from e
        raise ForgeUnavailable(say.forge_push_failed(text)) from e
    except (subprocess.SubprocessError, OSError) as e:
        raise ForgeUnavailable(say.forge_push_failed(str(e))) from e
    return True


# -- replicas without a shared disk ------------------------------------------------------------------------------


def queue_ref(branch: str, sha: str) -> str:
    """The forge branch that carries a commit made here until its verdict."""
    return f"{QUEUE}{branch}/{sha}"


def ensure_mirror(path: Path, remote: Remote, branch: str) -> None:
    """This machine's mirror of the forge repository, cloned from the forge (its target branch alone) when there is
    none yet: a replica on its own data directory, a new machine. Cloned beside and renamed into place, so two
    callers at once end with one whole mirror."""
    if path.exists():
        return
    spare = path.with_name(f"{path.name}.{os.getpid()}-{os.urandom(4).hex()}.tmp")
    with _talking_to_forge(f"cloning {remote.url}"):
        try:
            git.create_bare(spare, source=remote.url, branch=branch, extra_env=remote.env(), only_branch=True)
        except ValueError as e:
            raise ForgeUnavailable(str(e)) from e
    try:
        spare.rename(path)
    except OSError:
        if not path.exists():
            raise
    finally:
        if spare.exists():
            shutil.rmtree(spare, ignore_errors=True)


def have_commit(path: Path, remote: Remote, branch: str, sha: str, ref: str | None = None) -> None:
    """Make sure the mirror holds ``sha``: fetched from the forge (by id; else by ``ref``, by default its queue
    branch) when another replica made or received it."""
    ensure_mirror(path, remote, branch)
    if sha in git.open_repo(path):
        return
    tag = f"have-{sha}"
    fetch_commit(path, remote, sha, ref or queue_ref(branch, sha), tag)
    drop_incoming(path, tag)  # the objects stay; nothing here needs the ref


def commit_here(root: Path, repo: Repo, sha: str) -> None:
    """Make sure this machine's copy of ``repo`` holds ``sha`` before a run checks it out: a forge
    repository's mirror fetches it when another replica made or received it; a repository hosted here always has
    it (its pushes land in this very directory), so nothing is done."""
    if repo.forge:
        have_commit(git.bare_path(root, repo.name), remote_of(repo), repo.target_branch, sha)


def missing(path: Path, shas: list[str]) -> list[str]:
    repo = git.open_repo(path)
    return [s for s in shas if s not in repo]


def publish(path: Path, remote: Remote, branch: str, sha: str) -> None:
    """Push ``sha`` to its queue branch on the forge, for the replicas and workers that do not have it."""
    with _talking_to_forge(f"pushing {sha[:12]} to its queue branch"):
        remote.run(["push", "--quiet", "--force", "--", remote.url, f"{sha}:{queue_ref(branch, sha)}"], cwd=path,
                   timeout=600)


def published(path: Path, remote: Remote, branch: str) -> list[str]:
    """The commits on the forge's queue branches of ``branch``."""
    prefix = f"{QUEUE}{branch}/"
    with _talking_to_forge("listing the queue branches"):
        out = remote.run(["ls-remote", "--", remote.url, f"{prefix}*"], cwd=path, timeout=120)
    return [name[len(prefix):] for line in out.splitlines()
            if (name := line.partition("\t")[2]).startswith(prefix)]


def unpublish(path: Path, remote: Remote, branch: str, shas: list[str]) -> None:
    """Delete the queue branches of ``shas`` on the forge (one push)."""
    if not shas:
        return
    with _talking_to_forge("deleting queue branches"):
        remote.run(["push", "--quiet", "--", remote.url, *(f":{queue_ref(branch, s)}" for s in shas)], cwd=path,
                   timeout=600)


def push_notes(path: Path, remote: Remote, ref: str) -> None:
    """Push this mirror's notes ``ref`` (the landing statements) to the forge, where a clone fetches it. The bot is
    the only writer of the ref, so its copy wins."""
    with _talking_to_forge("pushing the landing statements' notes"):
        remote.run(["push", "--quiet", "--force", "--", remote.url, f"{ref}:{ref}"], cwd=path, timeout=600)
