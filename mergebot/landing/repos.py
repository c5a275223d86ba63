"""Repositories of the bot: adding one (a bare repository on disk plus its landing configuration in the database),
and an operator's hold on its queue (pause, resume)."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from mergebot import messages as say
from mergebot.db.database import Database
from mergebot.errors import Conflict, Invalid
from mergebot.git import credentials, mirror
from mergebot.git import repo as git
from mergebot.models import Agent, Repo
from verifier import cache as caches
from verifier import outcomes as outcome_files
from verifier import view as views
from verifier.runner import DISK_LIMIT_MB, MEMORY_MB

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
FORGE_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}/[A-Za-z0-9._-]{1,100}$")
ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]{0,99}$")
SECRET_ENV = "MERGEBOT_WEBHOOK_SECRET"  # the name of the variable, not a secret


def forge_settings(forge: str, forge_repo: str, *, url: str | None = None, api_url: str | None = None,
                   git_url: str | None = None, secret_env: str = SECRET_ENV,
                   token_env: str | None = None, app_id: int | None = None, app_key_env: str | None = None,
                   installation_id: int | None = None) -> dict[str, Any]:
    """The forge columns of a repository, with each forge's defaults, checked; the named variables must be set.

    With ``app_id`` and ``app_key_env`` a GitHub repository authenticates as that App's installation
    (``installation_id``, or the one GitHub names for the repository): its key must be an RSA private key, and the
    personal token's variable is then not needed."""
    if forge not in ("github", "gitea", "forgejo"):
        raise Invalid(f"unknown forge {forge!r}", field="forge")
    if not FORGE_REPO.match(forge_repo) or forge_repo.endswith(".git"):
        raise Invalid("the forge repository is OWNER/NAME", field="forge_repo")
    if forge == "github":
        web = (url or "https://github.com").rstrip("/")
        api = api_url or ("https://api.github.com" if web == "https://github.com" else f"{web}/api/v3")
    else:
        if not url:
            raise Invalid(f"a {forge} repository needs the server's URL", field="url")
        web = url.rstrip("/")
        api = api_url or web
    for u in (web, api, git_url or ""):
        if "@" in u.split("://", 1)[-1].split("/", 1)[0]:
            raise Invalid("put no credentials in a forge URL: the token comes from the environment", field="url")
    token_env = token_env or ("GITHUB_TOKEN" if forge == "github" else "GITEA_TOKEN")
    app = github_app(forge, app_id, app_key_env, installation_id)
    for env in (secret_env, token_env, *([app_key_env] if app else [])):
        if not ENV_NAME.match(env or ""):
            raise Invalid(f"{env!r} is not an environment variable name", field="env")
        if not os.environ.get(env or "") and not (app and env == token_env):
            raise Invalid(f"set the environment variable {env} first (the server reads it; it is never stored)",
                          field="env")
    if app:
        try:
            credentials.check_key(os.environ[str(app_key_env)])
        except (ValueError, TypeError) as e:
            raise Invalid(f"{app_key_env} holds no RSA private key (a GitHub App's .pem file): {e}",
                          field="github_app_key_env") from e
    return {"forge": forge, "forge_repo": forge_repo, "forge_api_url": api,
            "forge_git_url": git_url or f"{web}/{forge_repo}.git", "webhook_secret_env": secret_env,
            "forge_token_env": token_env, **app}


def github_app(forge: str, app_id: int | None, key_env: str | None, installation_id: int | None) -> dict[str, Any]:
    """The GitHub App columns of a repository (empty for a personal token), checked."""
    if app_id is None and key_env is None and installation_id is None:
        return {}
    if forge != "github":
        raise Invalid("only a GitHub repository authenticates as a GitHub App", field="github_app_id")
    if app_id is None or not key_env:
        raise Invalid("a GitHub App needs both --github-app-id and --github-app-key-env", field="github_app_id")
    if app_id <= 0 or (installation_id is not None and installation_id <= 0):
        raise Invalid("a GitHub App's id and installation id are positive numbers", field="github_app_id")
    return {"github_app_id": app_id, "github_app_key_env": key_env, "github_installation_id": installation_id}


def repos_root(data_dir: Path) -> Path:
    return (data_dir / "repos").resolve()


async def add_repo(db: Database, root: Path, *, name: str, source: str | None, verifier_command: str,
                   target_branch: str = "main", verifier_timeout_s: int = 600, protected_paths: list[str] | None = None,
                   max_push_bytes: int = 100 << 20, max_file_bytes: int = 10 << 20,
                   forge: dict[str, Any] | None = None, footprint_refuse: bool = False,
                   cache_paths: list[str] | None = None, cache_key: list[str] | None = None,
                   setup_command: str | None = None, setup_network: bool = False,
                   post_land_command: str | None = None, sandbox_paths: list[str] | None = None,
                   disk_limit_mb: int = DISK_LIMIT_MB, memory_limit_mb: int = MEMORY_MB,
                   report: str = "pytest", check_config: list[str] | None = None) -> Repo:
    """Create (or import from ``source``, a path or URL) the bare repository and record its configuration.

    With ``forge`` (see ``forge_settings``) the repository is a mirror of the forge's, cloned from it.
    """
    if not NAME.fullmatch(name):  # fullmatch: "$" would let a trailing newline through
        raise Invalid("a repository name is letters, digits, '-' and '_' (at most 64)", field="name")
    _check_paths(cache=cache_paths, cache_key=cache_key)
    sandbox_paths = check_sandbox(sandbox_paths, disk_limit_mb, memory_limit_mb)
    check_report(report)
    path = git.bare_path(root, name)
    if path.exists():
        raise Conflict(f"repository {name!r} already exists at {path}", field="name")
    extra_env: dict[str, str] = {}
    if forge:
        remote = mirror.remote_of(forge)
        source, extra_env = remote.url, remote.env()
    try:
        bare = await asyncio.to_thread(git.create_bare, path, source=source, branch=target_branch,
                                       extra_env=extra_env, only_branch=forge is not None)
    except (RuntimeError, ValueError) as e:
        raise Invalid(str(e), field="source") from e
    head = git.head_of(bare, f"refs/heads/{target_branch}")
    assert head is not None
    try:
        return await db.repos.create_repo(name=name, target_branch=target_branch,
                                          verifier_command=verifier_command, verifier_timeout_s=verifier_timeout_s,
                                          protected_paths=protected_paths or [], max_push_bytes=max_push_bytes,
                                          max_file_bytes=max_file_bytes, root_sha=head, forge=forge,
                                          footprint_refuse=footprint_refuse, cache_paths=cache_paths or [],
                                          cache_key=cache_key or [], setup_command=setup_command or None,
                                          setup_network=setup_network,
                                          post_land_command=post_land_command or None,
                                          sandbox_paths=sandbox_paths, disk_limit_mb=disk_limit_mb,
                                          memory_limit_mb=memory_limit_mb, report=report,
                                          check_config=check_globs(check_config))
    except BaseException:
        shutil.rmtree(path, ignore_errors=True)
        raise


async def set_rules(db: Database, name: str, *, held_out: list[tuple[str, bytes]] | None = None,
                    **rules: Any) -> Repo:
    """Change a repository's landing rules (``mergebot repo set``): only the ones given, each checked as
    ``add_repo`` checks it; ``held_out`` replaces its held-out checks (``[]``: none any more). Returns the
    repository as it is now."""
    if held_out is not None:
        await db.repos.get_repo(name)
        await db.repos.set_held_out(name, held_out)
    _check_paths(cache_paths=rules.get("cache_paths"), cache_key=rules.get("cache_key"))
    if any(rules.get(k) is not None for k in ("sandbox_paths", "disk_limit_mb", "memory_limit_mb")):
        paths = check_sandbox(rules.get("sandbox_paths"), rules.get("disk_limit_mb") or DISK_LIMIT_MB,
                              rules.get("memory_limit_mb") or MEMORY_MB)
        if rules.get("sandbox_paths") is not None:
            rules["sandbox_paths"] = paths
    if rules.get("report") is not None:
        check_report(rules["report"])
    if rules.get("check_config") is not None:
        rules["check_config"] = check_globs(rules["check_config"])
    if rules.get("test_paths") is not None:
        rules["test_paths"] = check_globs(rules["test_paths"], "tests")
        if not rules["test_paths"]:
            raise Invalid("--tests needs at least one glob: the paths a judging run takes from main", field="tests")
    if rules.get("suspicious") not in (None, "flag", "refuse"):
        raise Invalid(f"--suspicious is flag or refuse, not {rules['suspicious']!r}", field="suspicious")
    return await db.repos.update_repo(name, **rules)


HELD_OUT_MAX_FILES = 500
HELD_OUT_MAX_BYTES = 1 << 20


def read_held_out(folder: Path) -> list[tuple[str, bytes]]:
    """The files of a held-out checks directory (``repo set --held-out DIR``), by path relative to it; caches and
    byte code are left out."""
    if not folder.is_dir():
        raise Invalid(f"--held-out {folder} is not a directory", field="held_out")
    out = []
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        if path.is_dir() or "__pycache__" in rel.split("/") or rel.endswith(".pyc") or rel.startswith("."):
            continue
        data = path.read_bytes()
        if len(data) > HELD_OUT_MAX_BYTES:
            raise Invalid(f"held-out file {rel} is over {HELD_OUT_MAX_BYTES >> 20} MiB", field="held_out")
        out.append((rel, data))
    if not out or len(out) > HELD_OUT_MAX_FILES:
        raise Invalid(f"--held-out {folder} holds {len(out)} files: give 1 to {HELD_OUT_MAX_FILES}", field="held_out")
    return out


def check_globs(globs: list[str] | None, option: str = "check-config") -> list[str] | None:
    """The globs of a repository's paths (``--check-config``, ``--tests``; None: the default list)."""
    if globs is None:
        return None
    out = [g.strip() for g in globs if g.strip()]
    for g in out:
        if g.startswith("/") or ".." in g.split("/") or len(g) > 500:
            raise Invalid(f"--{option} {g!r} is not a glob inside the repository", field=option.replace("-", "_"))
    if len(out) > 100:
        raise Invalid(f"--{option}: at most 100 globs", field=option.replace("-", "_"))
    return out


def check_report(report: str) -> None:
    """Where a repository's tests report: ``pytest`` (our plugin) or ``junit:PATH`` inside the checkout."""
    if report != "pytest" and outcome_files.junit_path(report) is None:
        raise Invalid(f"--report is pytest or junit:PATH (a path inside the checkout), not {report!r}", field="report")


def check_sandbox(paths: list[str] | None, disk_limit_mb: int, memory_limit_mb: int = MEMORY_MB) -> list[str]:
    """A repository's sandbox paths (absolute, normalized; never ``/``, ``/root``, ``/home`` or a whole home
    directory: bind what it holds instead), its disk limit (16 MiB to 1 TiB) and memory limit (64 MiB to 1 TiB).
    Returns the paths normalized."""
    out = []
    for p in paths or []:
        norm = os.path.normpath(str(p))
        if not os.path.isabs(norm) or "\0" in norm or len(norm) > 4000:
            raise Invalid(f"sandbox path {p!r} is not an absolute path", field="sandbox_paths")
        if views.too_wide(norm):
            raise Invalid(f"sandbox path {p!r} would show a whole home directory or more to every check: give the "
                          "directories inside it that the check needs", field="sandbox_paths")
        out.append(norm)
    if len(out) > 50:
        raise Invalid("at most 50 sandbox paths", field="sandbox_paths")
    if not 16 <= int(disk_limit_mb) <= 1 << 20:
        raise Invalid("the disk limit is between 16 MiB and 1 TiB", field="disk_limit_mb")
    if not 64 <= int(memory_limit_mb) <= 1 << 20:
        raise Invalid("the memory limit is between 64 MiB and 1 TiB", field="memory_limit_mb")
    return list(dict.fromkeys(out))


def _check_paths(**lists: list[str] | None) -> None:
    """Cache paths and key files must be paths inside the checkout (``verifier.cache.valid_path``)."""
    for what, paths in lists.items():
        bad = [p for p in paths or [] if not caches.valid_path(str(p))]
        if bad:
            raise Invalid(f"{what} {bad[0]!r} is not a path inside the checkout (relative, no '..' or .git)",
                          field=what)


async def hold(db: Database, name: str, action: str, by: Agent, poke: Callable[[], None],
               remend: Callable[[], Awaitable[object]] | None = None) -> Repo:
    """An admin pauses or resumes landing on ``name`` (on a resume the queue is poked: parked candidates go back
    to the queue, and a red main whose mend gave up is mended again through ``remend``, the queue's reconcile).
    Returns the repository as it is now."""
    before = await db.repos.get_repo(name)  # NotFound for a repository that does not exist
    if action == "pause":
        await db.repos.set_paused(repo=name, paused=True, reason=f"paused by {by.name}")
    else:
        await db.repos.set_paused(repo=name, paused=False, reason=None)
        await db.subtasks.announce(author_id=by.id, body=say.resumed_by(name, by.name))
        poke()
        if before.mend_given_up and remend is not None:
            await remend()
    return await db.repos.get_repo(name)
