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
from mergebot.rules import Rules, RulesChange

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
        raise Invalid(say.repo_unknown_forge(forge), field="forge")
    if not FORGE_REPO.match(forge_repo) or forge_repo.endswith(".git"):
        raise Invalid(say.FORGE_REPO_NOT_OWNER_NAME, field="forge_repo")
    if forge == "github":
        web = (url or "https://github.com").rstrip("/")
        api = api_url or ("https://api.github.com" if web == "https://github.com" else f"{web}/api/v3")
    else:
        if not url:
            raise Invalid(say.forge_needs_url(forge), field="url")
        web = url.rstrip("/")
        api = api_url or web
    for u in (web, api, git_url or ""):
        if "@" in u.split("://", 1)[-1].split("/", 1)[0]:
            raise Invalid(say.CREDENTIALS_IN_FORGE_URL, field="url")
    token_env = token_env or ("GITHUB_TOKEN" if forge == "github" else "GITEA_TOKEN")
    app = github_app(forge, app_id, app_key_env, installation_id)
    for env in (secret_env, token_env, *([app_key_env] if app else [])):
        if not ENV_NAME.match(env or ""):
            raise Invalid(say.not_an_env_name(env), field="env")
        if not os.environ.get(env or "") and not (app and env == token_env):
            raise Invalid(say.set_env_first(env), field="env")
    if app:
        try:
            credentials.check_key(os.environ[str(app_key_env)])
        except (ValueError, TypeError) as e:
            raise Invalid(say.app_key_not_rsa(app_key_env, e), field="github_app_key_env") from e
    return {"forge": forge, "forge_repo": forge_repo, "forge_api_url": api,
            "forge_git_url": git_url or f"{web}/{forge_repo}.git", "webhook_secret_env": secret_env,
            "forge_token_env": token_env, **app}


def github_app(forge: str, app_id: int | None, key_env: str | None, installation_id: int | None) -> dict[str, Any]:
    """The GitHub App columns of a repository (empty for a personal token), checked."""
    if app_id is None and key_env is None and installation_id is None:
        return {}
    if forge != "github":
        raise Invalid(say.APP_ONLY_ON_GITHUB, field="github_app_id")
    if app_id is None or not key_env:
        raise Invalid(say.APP_NEEDS_ID_AND_KEY, field="github_app_id")
    if app_id <= 0 or (installation_id is not None and installation_id <= 0):
        raise Invalid(say.APP_IDS_POSITIVE, field="github_app_id")
    return {"github_app_id": app_id, "github_app_key_env": key_env, "github_installation_id": installation_id}


def repos_root(data_dir: Path) -> Path:
    return (data_dir / "repos").resolve()


async def add_repo(db: Database, root: Path, *, name: str, source: str | None, rules: Rules,
                   forge: dict[str, Any] | None = None) -> Repo:
    """Create (or import from ``source``, a path or URL) the bare repository and record its ``rules`` (checked
    when they were built: ``Rules.of``).

    With ``forge`` (see ``forge_settings``) the repository is a mirror of the forge's, cloned from it.
    """
    if not NAME.fullmatch(name):  # fullmatch: "$" would let a trailing newline through
        raise Invalid(say.REPO_NAME_MALFORMED, field="name")
    path = git.bare_path(root, name)
    if path.exists():
        raise Conflict(say.repo_exists(name, path), field="name")
    extra_env: dict[str, str] = {}
    if forge:
        remote = mirror.remote_of(forge)
        source, extra_env = remote.url, remote.env()
    try:
        bare = await asyncio.to_thread(git.create_bare, path, source=source, branch=rules.target_branch,
                                       extra_env=extra_env, only_branch=forge is not None)
    except (RuntimeError, ValueError) as e:
        raise Invalid(str(e), field="source") from e
    head = git.head_of(bare, f"refs/heads/{rules.target_branch}")
    assert head is not None
    try:
        return await db.repos.create_repo(name=name, rules=rules, root_sha=head, forge=forge)
    except BaseException:
        shutil.rmtree(path, ignore_errors=True)
        raise


async def set_rules(db: Database, name: str, change: RulesChange, *,
                    held_out: list[tuple[str, bytes]] | None = None, actor_id: int | None = None) -> Repo:
    """Change a repository's rules (``mergebot repo set``, the API): only the ones ``change`` gives (checked when
    it was built: ``RulesChange.of``); ``held_out`` replaces its held-out checks (``[]``: none any more). Returns
    the repository as it is now."""
    if held_out is not None:
        await db.repos.get_repo(name)
        await db.repos.set_held_out(name, held_out, actor_id=actor_id)
    if not change.given():
        return await db.repos.get_repo(name)
    repo = await db.repos.update_repo(name, change, actor_id=actor_id)
    if "require_approval" in change.given():  # what waited for an approval is judged by the new rule
        await db.landing.requeue_awaiting(name, say.APPROVAL_RULE_CHANGED)
    return repo


HELD_OUT_MAX_FILES = 500
HELD_OUT_MAX_BYTES = 1 << 20


def read_held_out(folder: Path) -> list[tuple[str, bytes]]:
    """The files of a held-out checks directory (``repo set --held-out DIR``), by path relative to it; caches and
    byte code are left out."""
    if not folder.is_dir():
        raise Invalid(say.held_out_not_a_dir(folder), field="held_out")
    out = []
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        if path.is_dir() or "__pycache__" in rel.split("/") or rel.endswith(".pyc") or rel.startswith("."):
            continue
        data = path.read_bytes()
        if len(data) > HELD_OUT_MAX_BYTES:
            raise Invalid(say.held_out_file_too_big(rel, HELD_OUT_MAX_BYTES >> 20), field="held_out")
        out.append((rel, data))
    if not out or len(out) > HELD_OUT_MAX_FILES:
        raise Invalid(say.held_out_count(folder, len(out), HELD_OUT_MAX_FILES), field="held_out")
    return out


async def hold(db: Database, name: str, action: str, by: Agent, poke: Callable[[], None],
               remend: Callable[[], Awaitable[object]] | None = None, reason: str | None = None) -> Repo:
    """An admin pauses or resumes landing on ``name`` (on a resume the queue is poked: parked candidates go back
    to the queue, a red main whose mend gave up is mended again through ``remend``, the queue's reconcile, and the
    audit's finding of moves of main no landing statement explains is cleared: an admin has looked).
    A pause's ``reason`` is shown with who paused. Returns the repository as it is now."""
    before = await db.repos.get_repo(name)  # NotFound for a repository that does not exist
    if action == "pause":
        await db.repos.set_paused(repo=name, paused=True, reason=say.paused_by(by.name, reason))
    else:
        await db.repos.set_paused(repo=name, paused=False, reason=None)
        await db.subtasks.announce(author_id=by.id, body=say.resumed_by(name, by.name))
        poke()
        if before.mend_given_up and remend is not None:
            await remend()
    return await db.repos.get_repo(name)
