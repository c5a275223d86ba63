"""Git for the benchmarks: a clean configuration with an identity, a checked ``git`` call, a source repository made
from a folder, and the agents' worktrees cloned from the bot once."""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
from pathlib import Path


def git_env(home: Path) -> None:
    """A clean git configuration and an identity for the agents' commits (inherited by every git we run)."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "gitconfig").write_text("")
    os.environ.update({
        "GIT_CONFIG_GLOBAL": str(home / "gitconfig"), "GIT_CONFIG_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0",
        "GIT_AUTHOR_NAME": "Fleet Agent", "GIT_AUTHOR_EMAIL": "agent@fleet.invalid",
        "GIT_COMMITTER_NAME": "Fleet Agent", "GIT_COMMITTER_EMAIL": "agent@fleet.invalid",
    })


def run_git(args: list[str], cwd: Path) -> str:
    out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed in {cwd}:\n{out.stderr.strip()}")
    return out.stdout.strip()


def commit_all(path: Path) -> Path:
    """``path`` made a repository on ``main`` whose one commit, "initial", holds everything in it."""
    run_git(["init", "-q", "-b", "main"], path)
    run_git(["add", "-A"], path)
    run_git(["commit", "-q", "-m", "initial"], path)
    return path


def agent_worktrees(bot_url: str, repo: str, token: str, work: Path, agents: int) -> list[Path]:
    """One clone of ``repo`` from the bot (as the agent of ``token``), copied to ``work/agent-NNNN`` for each agent.

    ``mergebot.agent.start`` reuses a worktree that has ``.git`` (it re-points origin and the token), so a benchmark
    makes these before its clock starts and measures the fleet's work, not one clone per agent."""
    work.mkdir(parents=True, exist_ok=True)
    template = work / "template"
    header = "Authorization: Basic " + base64.b64encode(f"agent:{token}".encode()).decode()
    run_git(["-c", f"http.extraHeader={header}", "clone", "-q", f"{bot_url}/git/{repo}.git", str(template)], work)
    wts = [work / f"agent-{i:04d}" for i in range(agents)]
    for wt in wts:
        shutil.copytree(template, wt, symlinks=True)
    return wts
