"""Commit statuses out: the server sends the forge status outbox, newest status per commit, with retries.

Each status is sent through the forge's client (``mergebot.forge.client``) with a short in-place retry; if that
fails it goes back to the outbox with an exponential backoff (durable across restarts) and is given up after
``MAX_ATTEMPTS``, or at once when the forge says the request itself is wrong. Posting a status is idempotent on
every forge (the latest status per context wins), so a repeat after a crash is harmless. Every text sent is
masked first (``masker``: the server's secrets, ``mergebot.secrets``), whatever made it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable

from mergebot.db.database import Database
from mergebot.forge.client import ForgeCallError, ForgeClient, Renewing, StatusPost, client_for, post_with_retry
from mergebot.git import credentials
from mergebot.models import Repo, StatusRow
from verifier.mask import Masker

log = logging.getLogger(__name__)
MAX_ATTEMPTS = 12
MAX_DELAY_S = 600.0


def backoff(attempts: int) -> float:
    return float(min(MAX_DELAY_S, 2 ** min(attempts, 20)))


def target_url(public_url: str, row: StatusRow) -> str | None:
    if not public_url or row.candidate_id is None:
        return None
    return f"{public_url.rstrip('/')}/ui/candidates/{row.candidate_id}"


class StatusSender:
    def __init__(self, db: Database, *, public_url: str = "", poll_seconds: float = 0.5,
                 make_client: Callable[[Repo], ForgeClient] | None = None,
                 masker: Callable[[], Awaitable[Masker]] | None = None) -> None:
        self.db = db
        self.masker = masker
        self._mask = Masker()
        self.public_url = public_url
        self.poll = poll_seconds
        self.make_client = make_client or _client
        self._wake = asyncio.Event()

    def poke(self) -> None:
        self._wake.set()

    async def run(self) -> None:
        while True:
            self._wake.clear()
            try:
                sent = await self.send_due()
            except Exception as e:  # the database is away: try again shortly
                log.warning("status outbox pass failed, will retry: %s", e)
                sent = 0
            if not sent:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout=self.poll)

    async def send_due(self) -> int:
        rows = await self.db.forge.take_statuses()
        if not rows:
            return 0
        repos = {r.name: r for r in await self.db.landing.forge_repos(("github", "gitea", "forgejo"))}
        if self.masker is not None:
            self._mask = await self.masker()
        for row in rows:
            await self.send(repos.get(row.repo), row)
        return len(rows)

    async def send(self, repo: Repo | None, row: StatusRow) -> None:
        if repo is None or not repo.forge_repo:
            await self.db.forge.status_failed(row.id, error="not a forge repository", delay_s=0, give_up=True)
            return
        post = StatusPost(sha=row.sha, state=row.state, description=self._mask.text(row.description),
                          target_url=target_url(self.public_url, row))
        forge_repo = repo.forge_repo

        def deliver() -> None:  # in a thread: a GitHub App's token may be minted first, over HTTP
            post_with_retry(self.make_client(repo), forge_repo, post, attempts=3)

        try:
            await asyncio.to_thread(deliver)
        except ForgeCallError as e:
            give_up = not e.retryable or row.attempts >= MAX_ATTEMPTS
            await self.db.forge.status_failed(row.id, error=str(e), delay_s=backoff(row.attempts), give_up=give_up)
            log.warning("status %s for %s on %s failed (%s): %s", row.state, row.sha[:12], repo.name,
                        "given up" if give_up else "will retry", e)
            return
        except Exception as e:  # a missing token, a bad URL: an operator must act; keep retrying slowly
            await self.db.forge.status_failed(row.id, error=f"{type(e).__name__}: {e}", delay_s=backoff(row.attempts),
                                              give_up=row.attempts >= MAX_ATTEMPTS)
            log.warning("status for %s on %s could not be sent: %s", row.sha[:12], repo.name, e)
            return
        await self.db.forge.status_sent(row.id)


def _client(repo: Repo) -> ForgeClient:
    """The repository's forge client, with its credentials (``git.credentials``): a GitHub App's installation
    token, renewed on a 401, or the personal token of its variable."""
    assert repo.forge is not None
    forge, api = repo.forge, repo.forge_api_url
    creds = credentials.for_repo(repo)
    if creds.kind == "app":
        return Renewing(lambda token: client_for(forge, token=token, base_url=api), creds.token, creds.renew)
    token = os.environ.get(repo.forge_token_env or "")
    if not token:
        raise RuntimeError(f"the environment variable {repo.forge_token_env} (the forge token) is not set")
    return client_for(forge, token=token, base_url=api)
