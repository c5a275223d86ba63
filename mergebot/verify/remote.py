"""A verifier worker on another machine: jobs through the bot's API with a verifier token, and each job's commit
fetched over git's HTTP protocol into a local bare mirror. ``--server A,B`` names several replicas: a call that
cannot reach one goes on to the next."""

from __future__ import annotations

import asyncio
import base64
import os
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import httpx

from mergebot import messages as say
from mergebot.client import ApiError, Client
from mergebot.errors import ClaimSuperseded, MergebotError
from mergebot.git import repo as git
from mergebot.models import Job
from verifier.runner import Result

T = TypeVar("T")


class Servers:
    """The replicas a remote worker may reach (``--server A,B``): a call that cannot reach the current one tries
    the next, so a worker outlives any one replica's restart or death."""

    def __init__(self, urls: Sequence[str], token: str) -> None:
        self.urls = [u.rstrip("/") for u in urls if u.strip()]
        self.clients = [Client(u, token) for u in self.urls]
        self.current = 0

    def call(self, fn: Callable[[Client], T]) -> T:
        last: Exception | None = None
        for _ in self.clients:
            try:
                return fn(self.clients[self.current])
            except httpx.TransportError as e:
                last = e
                self.current = (self.current + 1) % len(self.clients)
        raise MergebotError(say.servers_unreachable(self.urls, last))

    def order(self) -> list[str]:
        """Every server, the current one first."""
        return self.urls[self.current:] + self.urls[:self.current]


class HttpSource:
    """Jobs through the bot's API, with a verifier token (a worker on another machine)."""

    def __init__(self, servers: Servers, name: str) -> None:
        self.servers, self.name = servers, name

    async def _post(self, path: str, body: dict[str, Any]) -> Any:
        try:
            return await asyncio.to_thread(self.servers.call, lambda c: c.post(path, body))
        except ApiError as e:
            if e.status == 409:
                raise ClaimSuperseded(e.message) from e
            raise MergebotError(e.message) from e

    async def claim(self) -> Job | None:
        out = await self._post("/api/v1/verify-jobs/claim", {"worker": self.name})
        return Job.from_row(out["job"]) if out else None

    async def heartbeat(self, job: Job) -> None:
        await self._post(f"/api/v1/verify-jobs/{job.id}/heartbeat", {"claim_version": job.claim_version})

    async def finish(self, job: Job, result: Result) -> None:
        await self._post(f"/api/v1/verify-jobs/{job.id}/result",
                         {"claim_version": job.claim_version, "result": result.as_json()})

    async def held_out(self, job: Job) -> list[tuple[str, bytes]]:
        got = await asyncio.to_thread(self.servers.call, lambda c: c.get(
            f"/api/v1/verify-jobs/{job.id}/held-out", claim_version=job.claim_version))
        return [(f["path"], base64.b64decode(f["content"])) for f in got["files"]]

    async def cancelled(self, job: Job) -> None:
        # Over HTTP a cancellation shows as a refused heartbeat (409), which stops the run too.
        await asyncio.Event().wait()


class HttpRepos:
    """A bare mirror per repository, fetched from the bot over HTTP: only the commits jobs ask for (the replica that
    answered the claim made sure it has the job's commit; it is asked first)."""

    async def ready(self, job: Job) -> None:
        return None

    def __init__(self, server: str | Servers, token: str, cache: Path) -> None:
        self.servers, self.cache = server if isinstance(server, Servers) else Servers([server], token), cache
        self.header = "Authorization: Basic " + base64.b64encode(f"verifier:{token}".encode()).decode()

    def path_for(self, repo: str, sha: str) -> Path:
        path = self.cache / f"{repo}.git"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            subprocess.run(["git", "init", "-q", "--bare", str(path)], check=True)
        bare = git.open_repo(path)
        if sha not in bare:
            env = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}
            for server in self.servers.order():  # the first replica that answers
                got = subprocess.run(["git", "-c", f"http.extraHeader={self.header}", "--git-dir", str(path), "fetch",
                                      "-q", "--no-tags", f"{server}/git/{repo}.git", sha], check=False, env=env,
                                     capture_output=True, text=True, timeout=600)
                if got.returncode == 0:
                    break
            else:
                raise MergebotError(say.servers_fetch_failed(sha, repo, self.servers.urls, got.stderr))
        return path
