"""The agent's worktree: claim and prepare it, read which claim it holds, carry its commits, write a handoff.

Rules:
  * ``start`` checks the repository before it claims (a claim is never orphaned by a typo), claims, and prepares
    the worktree at the current main (or at the previous owner's branch, when the subtask is handed over) on the
    branch the claim names, with the bot as ``origin``. The agent's token is kept in the worktree's git config
    (``http.extraHeader``), so every later ``git`` and ``mergebot`` command there is the agent's.
  * Nothing committed is dropped: a worktree whose branch holds commits not on main (nor landed squashed: the
    landed rows say which) is never switched under them. ``start`` refuses, naming the commands that would help,
    unless asked to ``carry`` them: then the new claim's branch starts at those commits, and the answer says so.
    A worktree with uncommitted changes to tracked files is refused too.
  * If preparing the worktree fails after the claim, the claim is released again with the reason.
  * Every ``mergebot`` command run in a worktree marks it active (``touch``), which the keeper counts as a sign of
    life; the worktree's own state lives in ``<git dir>/mergebot/``.
Everything goes through git and the HTTP API; git commands get argument lists, never shell text.
"""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pygit2

from mergebot import messages as say
from mergebot.client import ApiError, Client
from mergebot.errors import Invalid, MergebotError
from mergebot.messages.refs import subtask_branch


def git(args: list[str], cwd: Path, check: bool = True) -> str:
    out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if check and out.returncode != 0:
        raise MergebotError(say.git_failed_in_worktree(args[0], out.stderr))
    return out.stdout.strip() + (out.stderr.strip() if not check else "")


def _repo(workdir: Path) -> pygit2.Repository:
    """The worktree's repository, found from any folder inside it as git finds it. Its config, HEAD and refs are
    read and written in-process: a fleet of agents otherwise starts a dozen ``git config`` and ``git rev-parse``
    processes per subtask, and on a shared machine they compete with the checks."""
    found = pygit2.discover_repository(str(workdir))
    if found is None:
        raise Invalid(say.not_a_worktree(workdir) if workdir.is_dir() else say.no_such_dir(workdir), field="dir")
    return pygit2.Repository(found)


@dataclass
class Claim:
    subtask_id: int
    claim_version: int
    repo: str
    server: str

    @property
    def branch(self) -> str:
        return subtask_branch(self.subtask_id, self.claim_version)


def _auth_header(token: str) -> str:
    return "Authorization: Basic " + base64.b64encode(f"agent:{token}".encode()).decode()


def state_dir(workdir: Path) -> Path:
    """Where the worktree's own state lives (keeper pid, log and state, the activity mark): inside its git dir."""
    path = Path(_repo(workdir).path) / "mergebot"
    path.mkdir(exist_ok=True)
    return path


def touch(workdir: Path) -> None:
    """Mark the worktree active now (a ``mergebot`` command ran in it). Not a worktree: nothing to mark."""
    with contextlib.suppress(MergebotError, OSError, pygit2.GitError):
        (state_dir(workdir) / "activity").touch()


def _unlanded(workdir: Path, client: Client | None = None) -> tuple[str, int] | None:
    """The current branch and how many of its commits are not on main, if it is a mergebot worktree with any.

    A commit that landed squashed (the repository's merge method ``squash``) is not on main by ancestry: main holds
    one commit of its own for it. So, with a ``client``, the commits of the worktree's last subtask's landed
    candidates (the landed rows', asked of the bot) count as landed too."""
    if not (workdir / ".git").exists():
        return None
    local = _repo(workdir)
    if local.head_is_unborn or local.head_is_detached:
        return None
    main = _origin_head(local)
    landed: list[str] = []

    def ahead() -> int:
        count = git(["rev-list", "--count", f"{main}..HEAD", "--not", *landed], workdir, check=False).strip()
        return int(count) if count.isdigit() else 0

    if ahead() == 0:  # on main as last fetched: main only moves forward, so on main as it is now too
        return None
    name = main.split("/", 1)[1]  # main as it is now: commits that landed since are not "unlanded"
    git(["fetch", "--quiet", "origin", f"+refs/heads/{name}:refs/remotes/origin/{name}"], workdir, check=False)
    n = ahead()
    if n and client is not None:
        landed = _landed_here(client, local)
        n = ahead() if landed else n
    return (local.head.shorthand, n) if n else None


def _landed_here(client: Client, local: pygit2.Repository) -> list[str]:
    """The candidates of the worktree's last subtask that landed (by the landed rows), the ones this clone has."""
    config = local.config
    sid = str(config["mergebot.subtask"] or "").strip() if "mergebot.subtask" in config else ""
    if not sid.isdigit():
        return []
    try:
        rows = client.get("/api/v1/landed", subtask=int(sid))["landed"]
    except ApiError:  # the bot cannot say: the commits count as not landed, as before
        return []
    return [sha for r in rows if isinstance(sha := r.get("candidate_sha"), str) and sha in local]


def _dirty(workdir: Path) -> list[str]:
    if not (workdir / ".git").exists():
        return []
    out = git(["status", "--porcelain", "--untracked-files=no"], workdir, check=False)
    return [line[3:] for line in out.splitlines() if line.strip()]


def check_repo(client: Client, repo: str) -> None:
    names = [r["name"] for r in client.get("/api/v1/repos")["repos"]]
    if repo not in names:
        raise Invalid(say.no_such_repo_here(repo, names), field="repo")


def start(client: Client, server: str, token: str, repo: str, workdir: Path, *, carry: bool = False,
          wait: float = 0.0, touch_paths: list[str] | None = None) -> tuple[Claim, dict[str, Any]] | None:
    """Claim the next subtask (waiting up to ``wait`` seconds for one) and prepare ``workdir`` for it. None when
    nothing is ready. The answer's ``carried`` says which commits the new branch starts with, if any; with
    ``touch_paths`` (the claimer's estimate of what it will touch) they join the footprint, and ``overlaps`` lists
    the subtasks in flight that may touch the same."""
    check_repo(client, repo)
    dirty = _dirty(workdir)
    if dirty:
        raise Invalid(say.worktree_dirty(workdir, dirty), field="dir")
    unlanded = _unlanded(workdir, client)
    if unlanded and not carry:
        branch, n = unlanded
        raise Invalid(say.worktree_unlanded(workdir, n, branch, repo), field="dir")
    # The repository names the claim's lane: admission control may answer 429 (kinds capacity, wip_limit).
    got = client.post("/api/v1/subtasks/claim", {"repo": repo, **({"wait": wait} if wait else {})})
    if got is None:
        return None
    claim = Claim(got["handle"]["id"], got["handle"]["claim_version"], repo, server.rstrip("/"))
    created = not workdir.exists()
    try:
        if touch_paths:
            touched = client.post(f"/api/v1/subtasks/{claim.subtask_id}/touch",
                                  {"claim_version": claim.claim_version, "paths": touch_paths})
            got["subtask"], got["overlaps"] = touched["subtask"], touched["overlaps"]
        got["carried"] = _prepare(claim, got, token, workdir, carry=unlanded)
    except BaseException as e:
        with contextlib.suppress(ApiError, OSError):
            client.post(f"/api/v1/subtasks/{claim.subtask_id}/release",
                        {"claim_version": claim.claim_version, "reason": say.worktree_not_prepared(e)})
        if created:
            shutil.rmtree(workdir, ignore_errors=True)
        raise
    touch(workdir)
    return claim, got


def _prepare(claim: Claim, got: dict[str, Any], token: str, workdir: Path,
             carry: tuple[str, int] | None) -> dict[str, Any] | None:
    url = f"{claim.server}/git/{claim.repo}.git"
    header = _auth_header(token)
    if not (workdir / ".git").exists():
        workdir.mkdir(parents=True, exist_ok=True)
        git(["-c", f"http.extraHeader={header}", "clone", "--quiet", "--single-branch", "--", url, str(workdir)],
            cwd=workdir.parent)
    local = _repo(workdir)
    config = local.config
    config["http.extraHeader"] = header
    config["remote.origin.url"] = url
    # Only main and the previous owner's branch: with a fleet pushing, "every branch" is hundreds of refs.
    main = _origin_head(local)
    branch = main.split("/", 1)[1]
    git(["fetch", "--quiet", "origin", f"+refs/heads/{branch}:refs/remotes/origin/{branch}"], workdir)
    start_at = main
    previous = got["handoff"].get("previous")
    if carry:
        start_at = "HEAD"  # the commits stay: the new branch starts at them
    elif previous:
        prev_ref = f"refs/remotes/origin/{previous['branch']}"
        git(["fetch", "--quiet", "origin", f"+refs/heads/{previous['branch']}:{prev_ref}"], workdir, check=False)
        if git(["rev-parse", "--verify", "--quiet", prev_ref], workdir, check=False).strip():
            start_at = prev_ref  # continue from where the previous owner stopped
    git(["checkout", "--quiet", "-B", claim.branch, start_at], workdir)
    config = local.config  # read again: the checkout may have written the branch's upstream
    for key, value in (("mergebot.subtask", str(claim.subtask_id)), ("mergebot.claimVersion", str(claim.claim_version)),
                       ("mergebot.repo", claim.repo), ("mergebot.server", claim.server)):
        config[key] = value
    return {"branch": carry[0], "commits": carry[1]} if carry else None


def _origin_head(local: pygit2.Repository) -> str:
    """``origin/<default branch>`` as the clone recorded it (``origin/main`` when it did not)."""
    try:
        target = str(local.references["refs/remotes/origin/HEAD"].target)
    except (KeyError, pygit2.GitError):
        return "origin/main"
    return target.removeprefix("refs/remotes/") if target.startswith("refs/remotes/origin/") else "origin/main"


def current_claim(workdir: Path) -> Claim:
    config = _repo(workdir).config

    def cfg(key: str) -> str:
        value = (config[key] or "").strip() if key in config else ""
        if not value:
            raise Invalid(say.not_a_mergebot_worktree(workdir, key), field="dir")
        return value

    return Claim(int(cfg("mergebot.subtask")), int(cfg("mergebot.claimVersion")), cfg("mergebot.repo"),
                 cfg("mergebot.server"))


def head_sha(workdir: Path) -> str:
    return str(_repo(workdir).head.target)


# What git leaves in a worktree's own git dir (``git rev-parse --git-path NAME``) while an operation waits for the
# user to finish it, first found first: the operation and the command that finishes it.
UNFINISHED = (("rebase-merge", "rebase"), ("rebase-apply", "rebase"), ("MERGE_HEAD", "merge"),
              ("CHERRY_PICK_HEAD", "cherry-pick"), ("REVERT_HEAD", "revert"))


def unfinished(workdir: Path) -> str | None:
    """The git operation the worktree is in the middle of (``rebase``, ``merge``, ``cherry-pick``, ``revert``), or
    None. HEAD then is not the agent's work: mid-rebase it is a commit of main's with part of the change on top."""
    gitdir = Path(_repo(workdir).path)  # a linked worktree's own git dir, where git keeps these
    return next((what for name, what in UNFINISHED if (gitdir / name).exists()), None)


def head_branch(workdir: Path) -> str | None:
    """The branch HEAD is on (``subtasks/5/v1``), or None when it is detached or unborn."""
    repo = _repo(workdir)
    if repo.head_is_detached or repo.head_is_unborn:
        return None
    return repo.head.shorthand


def changed_paths(workdir: Path) -> list[str]:
    """What the worktree's commits change since they forked off main (as last fetched), at most 1,000 paths."""
    main = _origin_head(_repo(workdir))
    out = subprocess.run(["git", "diff", "-z", "--name-only", "--no-renames", f"{main}...HEAD"], cwd=workdir,
                         capture_output=True, text=True, check=False)
    return [p for p in out.stdout.split("\0") if p][:1000] if out.returncode == 0 else []


def token_of(workdir: Path) -> str:
    """The agent's token, as ``start`` kept it in the worktree's git config."""
    config = _repo(workdir).config
    header = (config["http.extraHeader"] or "") if "http.extraHeader" in config else ""
    with contextlib.suppress(ValueError, UnicodeDecodeError):
        return base64.b64decode(header.rsplit(" ", 1)[-1]).decode().split(":", 1)[1]
    return os.environ.get("MERGEBOT_TOKEN", "")


def handoff_note(workdir: Path, *, done: str, remains: str, tried: list[str], checks: list[str]) -> str:
    """A structured note: what was done, the commits, the checks run, what remains, what failed."""
    claim = current_claim(workdir)
    commits = git(["log", "--oneline", "--no-decorate", "-n", "20", "origin/HEAD..HEAD"], workdir, check=False)
    lines = [f"## Handoff for subtask {claim.subtask_id} (claim version {claim.claim_version})",
             f"Branch: {claim.branch}", "", "### Done", done or "(nothing recorded)", "", "### Commits",
             commits.strip() or "(none pushed)", "", "### Checks run"]
    lines += [f"- {c}" for c in checks] or ["(none)"]
    lines += ["", "### What remains", remains or "(not recorded)", "", "### Failed attempts"]
    lines += [f"- {t}" for t in tried] or ["(none)"]
    return "\n".join(lines)
