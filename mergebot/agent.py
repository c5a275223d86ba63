"""The agent's side of a push (the seeds' executor): claim and prepare a worktree, push and wait for the
verdict, write a handoff note.

``start`` claims a subtask and prepares a git worktree at the current main (or at the previous owner's branch,
when the subtask is handed over) on the branch the claim names, with the bot as ``origin`` and the agent's
token configured for it. ``push`` (``mergebot submit``) pushes HEAD to that branch and follows the candidate
until it lands or is refused, printing the reason and what to do. ``handoff`` leaves a structured note for
the next owner. Everything goes through git and the HTTP API; git commands get argument lists, never shell text.
"""

from __future__ import annotations

import base64
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pygit2

from mergebot.client import Client

FINAL = ("landed", "rejected", "superseded", "cancelled", "parked")


def git(args: list[str], cwd: Path, check: bool = True) -> str:
    out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if check and out.returncode != 0:
        raise RuntimeError(f"git {args[0]} failed:\n{out.stderr.strip()}")
    return out.stdout.strip() + (out.stderr.strip() if not check else "")


def _repo(workdir: Path) -> pygit2.Repository:
    """The worktree's repository, found from any folder inside it as git finds it. Its config, HEAD and refs are
    read and written in-process: a fleet of agents otherwise starts a dozen ``git config`` and ``git rev-parse``
    processes per subtask, and on a shared machine they compete with the checks."""
    found = pygit2.discover_repository(str(workdir))
    if found is None:
        raise RuntimeError(f"{workdir} is not in a git worktree; run `mergebot start` first")
    return pygit2.Repository(found)


@dataclass
class Claim:
    subtask_id: int
    claim_version: int
    repo: str
    server: str

    @property
    def branch(self) -> str:
        return f"subtasks/{self.subtask_id}/v{self.claim_version}"


def _auth_header(token: str) -> str:
    return "Authorization: Basic " + base64.b64encode(f"agent:{token}".encode()).decode()


def start(client: Client, server: str, token: str, repo: str, workdir: Path) -> tuple[Claim, dict[str, Any]] | None:
    """Claim the next subtask and prepare ``workdir`` for it. None when nothing is ready."""
    got = client.post("/api/v1/subtasks/claim")
    if got is None:
        return None
    claim = Claim(got["handle"]["id"], got["handle"]["claim_version"], repo, server.rstrip("/"))
    url = f"{claim.server}/git/{repo}.git"
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
    if previous:
        prev_ref = f"refs/remotes/origin/{previous['branch']}"
        git(["fetch", "--quiet", "origin", f"+refs/heads/{previous['branch']}:{prev_ref}"], workdir, check=False)
        if git(["rev-parse", "--verify", "--quiet", prev_ref], workdir, check=False).strip():
            start_at = prev_ref  # continue from where the previous owner stopped
    git(["checkout", "--quiet", "-B", claim.branch, start_at], workdir)
    config = local.config  # read again: the checkout may have written the branch's upstream
    for key, value in (("mergebot.subtask", str(claim.subtask_id)), ("mergebot.claimVersion", str(claim.claim_version)),
                       ("mergebot.repo", repo), ("mergebot.server", claim.server)):
        config[key] = value
    return claim, got


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
            raise RuntimeError(f"{workdir} is not a mergebot worktree (no {key}); run `mergebot start` first")
        return value

    return Claim(int(cfg("mergebot.subtask")), int(cfg("mergebot.claimVersion")), cfg("mergebot.repo"),
                 cfg("mergebot.server"))


def push(client: Client, workdir: Path, *, wait: float = 3600.0, progress: bool = True) -> dict[str, Any]:
    """Push HEAD to the claim's branch and follow its candidate to a verdict. Returns the final candidate."""
    claim = current_claim(workdir)
    sha = str(_repo(workdir).head.target)
    out = subprocess.run(["git", "push", "--force", "--porcelain", "origin", f"HEAD:refs/heads/{claim.branch}"],
                         cwd=workdir, capture_output=True, text=True, check=False)
    remote = "\n".join(line.removeprefix("remote:").strip() for line in out.stderr.splitlines()
                       if line.startswith("remote:"))
    if out.returncode != 0:
        return {"status": "refused", "reason": remote or out.stderr.strip(), "sha": sha}
    deadline = time.monotonic() + wait
    last = None
    mine: dict[str, Any] | None = None
    while time.monotonic() < deadline:
        if mine is None:  # the push's candidate (queued by the push itself, or soon after for a forge)
            cands = client.get("/api/v1/candidates", subtask=claim.subtask_id, limit=20)["candidates"]
            mine = next((c for c in cands if c["sha"] == sha and c["claim_version"] == claim.claim_version), None)
            if mine is None:
                time.sleep(0.2)
                continue
        else:  # one long-poll request per verdict or 30 s, not a poll every 0.2 s
            left = max(1.0, min(30.0, deadline - time.monotonic()))
            mine = client.get(f"/api/v1/candidates/{mine['id']}", wait=round(left, 1))
            assert mine is not None
        if progress and mine["status"] != last:
            print(f"subtask {claim.subtask_id}: candidate {mine['id']} {mine['status']}", file=sys.stderr)
            last = mine["status"]
        if mine["status"] in FINAL:
            return mine
    return {"status": "waiting", "sha": sha, "reason": f"no verdict within {wait:.0f}s; it is still queued"}


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
