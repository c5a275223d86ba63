"""Repositories as the database keeps them: their landing rules, their held-out checks, and their state (an
operator's pause, a red main).

Rules:
  * Once created (``create_repo``, an event ``repo_added``), a repository's rules change only through
    ``update_repo``: a rule not given stays as it is, and each change is an event (``repo_updated``) naming the
    rules it set.
  * Held-out checks are replaced whole, in one transaction (``set_held_out``), and read only for a verifier
    worker's run: no agent ever sees their content.
  * A red main parks candidates (the landing path, ``mergebot.db.landing``); main green again (``set_red`` with
    no sha) or an operator's resume (``set_paused``) puts the parked ones back in the queue, in the same
    transaction as the repository's new state.
"""

from __future__ import annotations

from typing import Any

from psycopg.types.json import Jsonb

from mergebot.db.base import Row, Sql, insert_event
from mergebot.errors import NotFound
from mergebot.models import Repo
from mergebot.rules import Rules, RulesChange

FORGE_COLUMNS = ("forge", "forge_repo", "forge_api_url", "forge_git_url", "webhook_secret_env", "forge_token_env",
                 "github_app_id", "github_app_key_env", "github_installation_id")


def _jsonb(params: dict[str, Any]) -> dict[str, Any]:
    """The rules' parameters with the named checks (a list of records) as one jsonb value, not an array."""
    checks = params.get("checks")
    return {**params, "checks": Jsonb(checks) if checks is not None else None}


class RepoStore:
    def __init__(self, sql: Sql) -> None:
        self.sql = sql

    async def create_repo(self, *, name: str, rules: Rules, root_sha: str,
                          forge: dict[str, Any] | None = None) -> Repo:
        """Record a repository with its ``rules`` (``mergebot.rules.Rules``, checked) and its forge columns."""
        f = forge or {}
        row = await self.sql.one("repo_create", name=name, root_sha=root_sha,
                                 **{k: f.get(k) for k in FORGE_COLUMNS}, **_jsonb(rules.model_dump()))
        assert row is not None
        await insert_event(self.sql, actor_id=None, kind="repo_added", detail={"repo": name})
        return Repo.from_row(row)

    async def update_repo(self, name: str, change: RulesChange, *, actor_id: int | None = None) -> Repo:
        """Change the rules ``change`` gives (``repo_update``; a rule not given stays)."""
        row = await self.sql.found("repo_update", NotFound(f"no repository named {name!r}", field="name"), name=name,
                                   **_jsonb(change.params()))
        await insert_event(self.sql, actor_id=actor_id, kind="repo_updated",
                           detail={"repo": name, "rules": change.given()})
        return Repo.from_row(row)

    async def set_held_out(self, repo: str, files: list[tuple[str, bytes]], *, actor_id: int | None = None) -> None:
        """Replace a repository's held-out checks (never shown to an agent: only verifier workers read them)."""
        async with self.sql.tx() as tx:
            await tx.all("held_out_clear", repo=repo)
            for path, content in files:
                await tx.all("held_out_insert", repo=repo, path=path, content=content)
            await insert_event(tx, actor_id=actor_id, kind="held_out_set", detail={"repo": repo, "files": len(files)})

    async def held_out(self, repo: str) -> list[tuple[str, bytes]]:
        """The held-out checks' files, for a verifier worker's run (never for an agent)."""
        return [(r["path"], bytes(r["content"])) for r in await self.sql.all("held_out_get", repo=repo)]

    async def held_out_count(self, repo: str) -> int:
        row = await self.sql.one("held_out_count", repo=repo)
        return int(row["n"]) if row else 0

    async def get_repo(self, name: str) -> Repo:
        row = await self.sql.found("repo_get", NotFound(f"no repository named {name!r}", field="repo"), name=name)
        return Repo.from_row(row)

    async def list_repos(self) -> list[Repo]:
        return [Repo.from_row(r) for r in await self.sql.all("repo_list")]

    async def forge_repos(self, forges: tuple[str, ...]) -> list[Repo]:
        return [Repo.from_row(r) for r in await self.sql.all("forge_repos", forges=list(forges))]

    async def set_paused(self, *, repo: str, paused: bool, reason: str | None) -> None:
        """An operator's hold (the queue skips the repository). Resuming also clears a red main's parking."""
        async with self.sql.tx() as tx:
            await tx.all("repo_set_paused", name=repo, paused=paused, reason=reason)
            if not paused:
                await tx.all("repo_set_red", name=repo, sha=None, reason=None)
                await tx.all("candidates_unpark", repo=repo)

    async def audited(self, *, repo: str, head: str, unattested: dict[str, Any] | None) -> None:
        """The audit of main walked to ``head``; ``unattested``: what it found without a statement so far (None:
        unchanged)."""
        await self.sql.all("repo_audited", name=repo, head=head,
                           unattested=Jsonb(unattested) if unattested is not None else None)

    async def unattested(self) -> list[Row]:
        """The repositories whose main holds commits no statement explains, not yet seen by an admin."""
        return await self.sql.all("repos_unattested")

    async def set_red(self, *, repo: str, sha: str | None, reason: str | None) -> None:
        """Main is red at ``sha`` (only fixes land), or green again (None: parked candidates are requeued)."""
        async with self.sql.tx() as tx:
            await tx.all("repo_set_red", name=repo, sha=sha, reason=reason)
            if sha is None:
                await tx.all("candidates_unpark", repo=repo)
