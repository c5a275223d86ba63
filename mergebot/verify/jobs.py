"""Verify jobs in PostgreSQL: the queue's requests for a check on one exact commit, run by verifier workers.

Rules (the subtask claim protocol, again): a worker claims the oldest queued job with one SKIP LOCKED
statement, which bumps ``claim_version`` and sets a lease; heartbeats renew the lease; the result is written
only if the worker still holds that claim (else ``ClaimSuperseded``, 409 over HTTP), so a job finishes at most
once. A worker that goes silent loses the job after its lease plus a grace period, and another worker runs it.
Waiting for a result listens on ``mergebot_job`` and re-reads the row, so nothing finished in between is missed.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.types.json import Jsonb

from mergebot.errors import ClaimSuperseded, NotFound
from mergebot.landing.store import LandingStore
from mergebot.models import _FromRow

if TYPE_CHECKING:
    from mergebot.store import Waiter

JOB_CHANNEL = "mergebot_job"


@dataclass
class Job(_FromRow):
    id: int
    repo: str
    commit_sha: str
    command: str
    timeout_s: int
    purpose: str
    status: str
    claim_version: int
    attempts: int
    candidate_id: int | None = None
    landed_id: int | None = None
    worker_id: int | None = None
    worker_name: str | None = None
    lease_expires_at: datetime | None = None
    outcome: str | None = None
    result: dict[str, Any] | None = None
    created_at: datetime | None = None
    finished_at: datetime | None = None


class JobStore(LandingStore):
    job_lease_seconds = 30.0
    waiter: Waiter | None = None  # the process's shared listener, when it has one (mergebot serve)

    async def enqueue_job(self, *, repo: str, commit_sha: str, command: str, timeout_s: int, purpose: str,
                          candidate_id: int | None = None, landed_id: int | None = None) -> Job:
        row = await self._one("job_insert", repo=repo, commit_sha=commit_sha, command=command, timeout_s=timeout_s,
                              purpose=purpose, candidate_id=candidate_id, landed_id=landed_id)
        assert row is not None
        return Job.from_row(row)

    async def claim_job(self, *, worker_id: int | None, worker_name: str) -> Job | None:
        row = await self._one("job_claim", worker_id=worker_id, worker_name=worker_name,
                              lease_seconds=self.job_lease_seconds)
        return Job.from_row(row) if row else None

    async def _job_superseded(self, job_id: int, claim_version: int) -> ClaimSuperseded | NotFound:
        row = await self._one("job_fence_state", id=job_id)
        if row is None:
            return NotFound(f"verify job {job_id} does not exist")
        return ClaimSuperseded(
            f"job superseded: verify job {job_id} is {row['status']} at claim version {row['claim_version']}; "
            f"your claim version {claim_version} no longer holds it, so your result is refused.",
            job_id=job_id, current_version=row["claim_version"])

    async def heartbeat_job(self, *, job_id: int, worker_id: int | None, claim_version: int) -> None:
        if await self._one("job_heartbeat", id=job_id, worker_id=worker_id, claim_version=claim_version,
                           lease_seconds=self.job_lease_seconds) is None:
            raise await self._job_superseded(job_id, claim_version)

    async def finish_job(self, *, job_id: int, worker_id: int | None, claim_version: int, outcome: str,
                         result: dict[str, Any]) -> Job:
        row = await self._one("job_finish", id=job_id, worker_id=worker_id, claim_version=claim_version,
                              outcome=outcome, result=Jsonb(result))
        if row is None:
            raise await self._job_superseded(job_id, claim_version)
        return Job.from_row(row)

    async def recover_jobs(self, *, grace_seconds: float) -> list[dict[str, Any]]:
        return await self._all("job_recover_expired", grace_seconds=grace_seconds)

    async def get_job(self, job_id: int) -> Job:
        row = await self._one("job_get", id=job_id)
        if row is None:
            raise NotFound(f"verify job {job_id} does not exist")
        return Job.from_row(row)

    async def jobs(self, *, status: str | None = None, candidate_id: int | None = None,
                   limit: int = 100) -> list[dict[str, Any]]:
        return await self._all("job_list", status=status, candidate_id=candidate_id, limit=limit)

    async def passed_on(self, *, repo: str, sha: str, command: str) -> bool:
        return await self._one("job_passed_on", repo=repo, sha=sha, command=command) is not None

    async def get_jobs(self, ids: list[int]) -> dict[int, Job]:
        return {r["id"]: Job.from_row(r) for r in await self._all("job_many", ids=ids)}

    async def cancel_jobs_for(self, candidate_id: int) -> None:
        await self._all("job_cancel_for_candidate", candidate_id=candidate_id)

    async def cancel_older_post_land(self, repo: str, newer_landed: int) -> list[int]:
        """Cancel the post-land checks of ``repo`` still queued for landings before ``newer_landed``."""
        return [r["id"] for r in await self._all("job_cancel_older_post_land", repo=repo, newer_landed=newer_landed)]

    async def wait_job(self, job_id: int, timeout: float) -> Job:
        """Until the job is done or cancelled (listen, then read, then wait for a notification).

        With a ``waiter`` (``mergebot serve`` gives its own) the wait shares the process's one listening
        connection; without, it opens its own. If listening fails, keep going by polling: a lost notification
        costs latency, never the result, because the job row is what counts.
        """
        if self.waiter is not None:
            seen: list[Job] = []

            async def finished() -> bool:
                seen[:] = [await self.get_job(job_id)]
                return seen[0].status in ("done", "cancelled")

            await self.waiter.wait_until(JOB_CHANNEL, [job_id], finished, timeout)
            return seen[0]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        try:
            async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as conn:
                await conn.execute(f"LISTEN {JOB_CHANNEL}")
                while True:
                    job = await self.get_job(job_id)
                    if job.status in ("done", "cancelled") or loop.time() >= deadline:
                        return job
                    gen = conn.notifies(timeout=min(1.0, max(0.0, deadline - loop.time())))
                    try:
                        async for note in gen:
                            if note.payload == str(job_id):
                                break
                    finally:
                        await gen.aclose()
        except psycopg.OperationalError:
            while True:
                job = await self.get_job(job_id)
                if job.status in ("done", "cancelled") or loop.time() >= deadline:
                    return job
                await asyncio.sleep(0.2)

    async def wait_any(self, job_ids: list[int], timeout: float) -> None:
        """Until one of the jobs is done or cancelled, or ``timeout`` passes (a speculation window waits on all
        its runs at once). Polls if the listening connection fails."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        wanted = {str(i) for i in job_ids}

        async def finished() -> bool:
            rows = await self._all("job_statuses", ids=job_ids)
            return any(r["status"] in ("done", "cancelled") for r in rows) or loop.time() >= deadline

        if self.waiter is not None:
            await self.waiter.wait_until(JOB_CHANNEL, job_ids, finished, timeout)
            return
        try:
            async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as conn:
                await conn.execute(f"LISTEN {JOB_CHANNEL}")
                while not await finished():
                    gen = conn.notifies(timeout=min(1.0, max(0.0, deadline - loop.time())))
                    try:
                        async for note in gen:
                            if note.payload in wanted:
                                break
                    finally:
                        await gen.aclose()
        except psycopg.OperationalError:
            while not await finished():
                await asyncio.sleep(0.2)

    # -- main's status --------------------------------------------------------------------------------------

    async def set_main_status(self, *, landed_id: int, status: str) -> None:
        await self._all("landed_set_main_status", id=landed_id, main_status=status)

    async def set_paused(self, *, repo: str, paused: bool, reason: str | None) -> None:
        """An operator's hold (the queue skips the repository). Resuming also clears a red main's parking."""
        async with self._tx() as cur:
            await self._q(cur, "repo_set_paused", name=repo, paused=paused, reason=reason)
            if not paused:
                await self._q(cur, "repo_set_red", name=repo, sha=None, reason=None)
                await self._q(cur, "candidates_unpark", repo=repo)

    async def set_red(self, *, repo: str, sha: str | None, reason: str | None) -> None:
        """Main is red at ``sha`` (only fixes land), or green again (None: parked candidates are requeued)."""
        async with self._tx() as cur:
            await self._q(cur, "repo_set_red", name=repo, sha=sha, reason=reason)
            if sha is None:
                await self._q(cur, "candidates_unpark", repo=repo)
