"""Git for the benchmarks: a clean configuration with an identity, and a checked ``git`` call."""

from __future__ import annotations

import os
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
