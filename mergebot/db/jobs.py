"""Verify jobs in PostgreSQL: the queue's requests for a check on one exact commit, run by verifier workers.

Rules (the subtask claim protocol, again): a worker claims the oldest queued job with one SKIP LOCKED
statement, which bumps ``claim_version`` and sets a lease; heartbeats renew the lease; the result is written
only if the worker still holds that claim (else ``ClaimSuperseded``, 409 over HTTP), so a job finishes at most
once. A worker that goes silent loses the job after its lease plus a grace period, and another worker runs it.
Waiting for a result goes through the waiter (``mergebot_job``) and re-reads the rows, so nothing finished in
between is missed.

Named checks (issue 43) run as a **group**: a parent job no worker claims (``is_group``) and one child job per check,
claimed and run like any job. The transaction that ends a child (finished, given up after lost leases, cancelled as
obsolete) settles its parent: once every child has ended (a failing required check does not cancel its siblings:
each check's outcome is recorded, and the slowest decides when the group ends), the parent is ``done`` with the
children's combined result (``verifier.checks.combine``). A cancelled parent's children are cancelled
(``job_cancel_orphans``). Whoever waits on the parent's id waits as for a single job.
"""

from __future__ import annotations

import asyncio
from typing import Any

from psycopg.types.json import Jsonb

from mergebot import messages as say
from mergebot.db.base import Row, Sql, Tx, storable
from mergebot.db.waiter import JOB, Waiter, read_until
from mergebot.errors import ClaimSuperseded, MergebotError, NotFound
from mergebot.models import Job
from verifier import checks as named
from verifier.result import Result

OVER = frozenset({"done", "cancelled"})  # a job's statuses that end it
POLL = 2.0  # a wait on jobs reads again at least this often, even while the waiter hears (mergebot.db.waiter)


class JobStore:
    def __init__(self, sql: Sql, waiter: Waiter, *, lease_seconds: float = 30.0) -> None:
        self.sql = sql
        self.waiter = waiter
        self.lease_seconds = lease_seconds

    async def enqueue_job(self, *, repo: str, commit_sha: str, command: str, timeout_s: int, purpose: str,
                          candidate_id: int | None = None, landed_id: int | None = None,
                          cache: dict[str, Any] | None = None, window_width: int | None = None,
                          sandbox: dict[str, Any] | None = None, children: list[dict[str, Any]] | None = None,
                          covers: list[int] | None = None) -> Job:
        """A verify job; its spec may name paths of a pushed tree (the candidate's own tests): made storable.
        ``children`` (named checks): the job is a group's parent, and each child (``name``, ``command``,
        ``timeout_s``, ``required``, ``sandbox``, its own ``cache`` when it names one) a job of its own, queued in
        the same transaction; a child ``kept`` (a job's id: a retry re-runs only the checks that failed) is inserted
        done with that job's outcome and result, and never runs (no worker, no start: nothing counts it as a run).
        ``covers``: the candidates the run is started for, when more than ``candidate_id`` (a window's batch)."""
        common = {"repo": repo, "commit_sha": commit_sha, "purpose": purpose, "candidate_id": candidate_id,
                  "landed_id": landed_id, "cache": Jsonb(storable(cache)) if cache is not None else None,
                  "covers": covers}
        async with self.sql.tx() as tx:
            box = Jsonb(storable(sandbox)) if sandbox is not None else None
            row = await tx.one("job_insert", **common, command=command, timeout_s=timeout_s,
                               window_width=window_width, sandbox=box, is_group=children is not None, parent_id=None,
                               check_name=None, required=None)
            assert row is not None
            for child in children or []:
                mine = {**common, "cache": Jsonb(storable(child["cache"])) if child.get("cache") else None} \
                    if "cache" in child else common
                params = {**mine, "command": child["command"], "timeout_s": child["timeout_s"], "window_width": None,
                          "sandbox": Jsonb(storable(child["sandbox"])), "is_group": False, "parent_id": row["id"],
                          "check_name": child["name"], "required": child["required"], "kept": child.get("kept")}
                if not child.get("kept") or await tx.one("job_insert_kept", **params) is None:
                    await tx.one("job_insert", **params)  # run: nothing to keep (or the kept run is gone)
            if any(child.get("kept") for child in children or []):
                await self.settle_group(row["id"], tx)
        return Job.from_row(row)

    async def children(self, job_id: int) -> list[Job]:
        """A group's children, in the order of their checks (none for a single job)."""
        return [Job.from_row(r) for r in await self.sql.all("job_children", id=job_id)]

    async def settle_group(self, parent_id: int, tx: Tx | None = None) -> bool:
        """Finish a group's parent with its children's combined result once every child has ended (see the module's
        rules); whether it finished now."""
        if tx is None:
            async with self.sql.tx() as own:
                return await self.settle_group(parent_id, own)
        parent = await tx.one("job_group_lock", id=parent_id)
        if parent is None or parent["status"] != "queued":
            return False
        kids = [Job.from_row(r) for r in await tx.all("job_children", id=parent_id)]
        if not kids or any(k.status not in OVER for k in kids):
            return False
        ran = [named.Ran(str(k.check_name), bool(k.required), k.id,
                         Result.from_json(k.result) if k.status == "done" and k.result else None) for k in kids]
        got = named.combine(parent["commit_sha"], parent["command"], ran)
        await tx.one("job_settle", id=parent_id, outcome=got.overall, result=Jsonb(storable(got.as_json())))
        return True

    async def remote_workers(self, *, seconds: float = 120.0) -> int:
        """How many workers on other machines ran a check in the last ``seconds`` or run one now."""
        row = await self.sql.one("jobs_remote_workers", seconds=seconds)
        return int(row["n"]) if row else 0

    async def claim_job(self, *, worker_id: int | None, worker_name: str) -> Job | None:
        row = await self.sql.one("job_claim", worker_id=worker_id, worker_name=worker_name,
                                 lease_seconds=self.lease_seconds)
        return Job.from_row(row) if row else None

    async def _superseded(self, job_id: int, claim_version: int) -> ClaimSuperseded | NotFound:
        row = await self.sql.one("job_fence_state", id=job_id)
        if row is None:
            return NotFound(say.no_such_job(job_id))
        return ClaimSuperseded(
            say.job_superseded(job_id, claim_version, status=row["status"], current=row["claim_version"]),
            job_id=job_id, current_version=row["claim_version"])

    async def heartbeat_job(self, *, job_id: int, worker_id: int | None, claim_version: int) -> None:
        if await self.sql.one("job_heartbeat", id=job_id, worker_id=worker_id, claim_version=claim_version,
                              lease_seconds=self.lease_seconds) is None:
            raise await self._superseded(job_id, claim_version)

    async def finish_job(self, *, job_id: int, worker_id: int | None, claim_version: int, outcome: str,
                         result: dict[str, Any]) -> Job:
        """Store a run's result (made storable first: ``db.base.storable``). One that the database still refuses
        (too large, too slow to write) is stored as an ``error`` result saying why: the job ends either way, so one
        candidate's run never keeps its repository's queue waiting."""
        try:
            row = await self._finish(id=job_id, worker_id=worker_id, claim_version=claim_version,
                                     outcome=outcome, result=Jsonb(storable(result)))
        except MergebotError as e:  # Invalid (a value), Unavailable (too slow), a limit of the server's
            why = say.result_not_stored(e.message)
            row = await self._finish(id=job_id, worker_id=worker_id, claim_version=claim_version,
                                     outcome="error", result=Jsonb({
                                         "commit_sha": str(result.get("commit_sha") or ""), "tree_sha": "",
                                         "command": str(storable(result.get("command") or "")), "outcome": "error",
                                         "exit_code": None, "duration_ms": 0, "log_head": why, "log_tail": "",
                                         "log_size": len(why.encode()), "log_digest": "", "sandbox": "none"}))
        if row is None:
            raise await self._superseded(job_id, claim_version)
        return Job.from_row(row)

    async def _finish(self, **params: Any) -> Row | None:
        """``job_finish``, and in the same transaction the settling of the group the job belongs to."""
        async with self.sql.tx() as tx:
            row = await tx.one("job_finish", **params)
            if row is not None and row.get("parent_id") is not None:
                await self.settle_group(row["parent_id"], tx)
            return row

    async def held_out_files(self, *, job_id: int, worker_id: int | None,
                             claim_version: int) -> list[tuple[str, bytes]]:
        """The held-out checks for a held-out job, to the worker that holds it now (fenced): no one else reads
        them."""
        rows = await self.sql.all("job_held_out", id=job_id, worker_id=worker_id, claim_version=claim_version)
        if not rows:
            raise await self._superseded(job_id, claim_version)
        return [(r["path"], bytes(r["content"])) for r in rows]

    async def recover_jobs(self, *, grace_seconds: float) -> list[Row]:
        """Jobs whose worker lost its lease go back to the queue, or end; then every group still queued whose
        children have all ended is settled (``job_groups_unsettled``): those this pass ended, and any whose settling
        a crash cut off, so no group waits for ever."""
        rows = await self.sql.all("job_recover_expired", grace_seconds=grace_seconds)
        for parent in await self.sql.all("job_groups_unsettled"):
            await self.settle_group(parent["id"])
        return rows

    async def open_on(self, *, repo: str, shas: list[str]) -> dict[str, bool]:
        """For each of ``shas`` some job names: whether one of those jobs is still queued or running."""
        return {r["commit_sha"]: r["open"] for r in await self.sql.all("jobs_open_on", repo=repo, shas=shas)}

    async def get_job(self, job_id: int) -> Job:
        row = await self.sql.one("job_get", id=job_id)
        if row is None:
            raise NotFound(say.no_such_job(job_id))
        return Job.from_row(row)

    async def get_jobs(self, ids: list[int]) -> dict[int, Job]:
        return {r["id"]: Job.from_row(r) for r in await self.sql.all("job_many", ids=ids)}

    async def jobs(self, *, status: str | None = None, candidate_id: int | None = None, limit: int = 100) -> list[Row]:
        return await self.sql.all("job_list", status=status, candidate_id=candidate_id, limit=limit)

    async def baseline(self, *, repo: str, tree_sha: str, command: str) -> Job | None:
        """The run of ``command`` on ``tree_sha`` whose outcomes are main's baseline (``job_baseline``)."""
        row = await self.sql.one("job_baseline", repo=repo, tree_sha=tree_sha, command=command)
        return Job.from_row(row) if row else None

    async def newest_on_main(self, *, repo: str, command: str, purposes: list[str]) -> Job | None:
        """The newest finished run of ``command`` with one of ``purposes`` (runs of main's own code) that reported
        its plugins."""
        row = await self.sql.one("job_newest_on_main", repo=repo, command=command, purposes=purposes)
        return Job.from_row(row) if row else None

    async def passed_on(self, *, repo: str, sha: str, tree: str, command: str) -> bool:
        return await self.sql.one("job_passed_on", repo=repo, sha=sha, tree=tree, command=command) is not None

    async def cancel_jobs_for(self, candidate_id: int) -> None:
        await self.sql.all("job_cancel_for_candidate", candidate_id=candidate_id)
        await self.sql.all("job_cancel_orphans")

    async def cancel_older_post_land(self, repo: str, newer_landed: int) -> list[int]:
        """Cancel the post-land checks of ``repo`` still queued for landings before ``newer_landed``."""
        ids = [r["id"] for r in await self.sql.all("job_cancel_older_post_land", repo=repo, newer_landed=newer_landed)]
        if ids:
            await self.sql.all("job_cancel_orphans")
        return ids

    async def wait_job(self, job_id: int, timeout: float) -> Job:
        """Until the job is done or cancelled, or ``timeout`` passes; the job as seen last."""
        job: Job = await read_until(self.waiter, JOB, [job_id], lambda: self.get_job(job_id),
                                    lambda j: j.status in OVER, timeout, poll=POLL)
        return job

    async def wait_any(self, job_ids: list[int], timeout: float, *, stop: asyncio.Event | None = None) -> None:
        """Until one of the jobs is done or cancelled, or ``timeout`` passes, or ``stop`` is set (a speculation
        window waits on all its runs at once, and, with room for another run, on its queue's pokes)."""

        async def one_over() -> bool:
            return any(r["status"] in OVER for r in await self.sql.all("job_statuses", ids=job_ids))

        await self.waiter.until(JOB, job_ids, one_over, timeout, poll=POLL, stop=stop)

    # -- re-verification (``mergebot.landing.main.reverify``) -----------------------------------------------------

    async def reverify_latest(self, landed_id: int) -> Job | None:
        row = await self.sql.one("job_reverify_latest", landed_id=landed_id)
        return Job.from_row(row) if row else None

    async def reverify_held_out(self, landed_id: int, after: int) -> Job | None:
        row = await self.sql.one("job_reverify_held_out", landed_id=landed_id, after=after)
        return Job.from_row(row) if row else None

    async def reverify_unsigned(self) -> list[Job]:
        return [Job.from_row(r) for r in await self.sql.all("job_reverify_unsigned")]

    async def known_flaky(self, repo: str, limit: int = 200) -> list[dict[str, Any] | None]:
        """The tests records of the repository's runs that failed where a retry of the same commit passed."""
        return [r["tests"] for r in await self.sql.all("job_known_flaky", repo=repo, limit=limit)]
