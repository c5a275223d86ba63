"""Adding repositories to the bot: a bare repository on disk plus its landing configuration in the database."""

from __future__ import annotations

import asyncio
import re
import shutil
from pathlib import Path

from mergebot.errors import Conflict, Invalid
from mergebot.git import repo as git
from mergebot.landing.store import LandingStore, Repo

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")


def repos_root(data_dir: Path) -> Path:
    return (data_dir / "repos").resolve()


async def add_repo(store: LandingStore, root: Path, *, name: str, source: str | None, verifier_command: str,
                   target_branch: str = "main", verifier_timeout_s: int = 600, protected_paths: list[str] | None = None,
                   max_push_bytes: int = 100 << 20, max_file_bytes: int = 10 << 20) -> Repo:
    """Create (or import from ``source``, a path or URL) the bare repository and record its configuration."""
    if not NAME.match(name):
        raise Invalid("a repository name is letters, digits, '-' and '_' (at most 64)", field="name")
    path = git.bare_path(root, name)
    if path.exists():
        raise Conflict(f"repository {name!r} already exists at {path}", field="name")
    try:
        bare = await asyncio.to_thread(git.create_bare, path, source=source, branch=target_branch)
    except (RuntimeError, ValueError) as e:
        raise Invalid(str(e), field="source") from e
    head = git.head_of(bare, f"refs/heads/{target_branch}")
    assert head is not None
    try:
        return await store.create_repo(name=name, target_branch=target_branch, verifier_command=verifier_command,
                                       verifier_timeout_s=verifier_timeout_s, protected_paths=protected_paths or [],
                                       max_push_bytes=max_push_bytes, max_file_bytes=max_file_bytes, root_sha=head)
    except BaseException:
        shutil.rmtree(path, ignore_errors=True)
        raise
