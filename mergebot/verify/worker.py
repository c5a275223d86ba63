"""Verifier workers: claim a verify job, get the exact commit, run the check, report the result — fenced.

A worker runs inside ``mergebot serve`` (reading the bot's repositories directly) or as ``mergebot verifier
worker`` on any machine, talking to the bot over HTTP with a verifier token: the jobs API for claims,
heartbeats and results, and git over HTTP to fetch the commit into a local mirror (``verify.remote``). Either
way the rules are the same: heartbeat while the check runs; if the claim was lost (the lease ran out and another
worker took the job) the result is refused and thrown away; each worker slot reuses one checkout.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import socket
import subprocess
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Protocol

import httpx
import psycopg

from mergebot.client import ApiError
from mergebot.db.jobs import JobStore
from mergebot.errors import ClaimSuperseded, MergebotError
from mergebot.git import mirror
from mergebot.git import repo as git
from mergebot.models import Job, Repo
from mergebot.naps import nap
from verifier import disk
from verifier.limits import pid_alive
from verifier.runner import CheckSpec, Result, run_check
from verifier.sandbox import BWRAP
from verifier.supervise import Stop

log = logging.getLogger(__name__)


def private_paths(data_dir: Path, *database_urls: str, attest: Path | None = None) -> list[Path]:
    """What a check must never see, wherever it falls inside the sandbox's view: the bot's data directory (the
    embedded database, the repositories, the other slots and caches), the signing key's folder where it lies outside
    it (``attest``: ``MERGEBOT_ATTEST_DIR``) and the database's socket directories (the pooler's and the server's)."""
    paths = [data_dir]
    if attest is not None and not attest.resolve().is_relative_to(data_dir.resolve()):
        paths.append(attest)
    for host in (h for url in database_urls for h in psycopg_hosts(url)):
        if host.startswith("/"):
            paths.append(Path(host))
    return [p.resolve() for p in paths]


def psycopg_hosts(url: str) -> list[str]:
    """The hosts of a libpq URL or keyword string (several in a multi-host one: ``host=a,b``)."""
    from psycopg.conninfo import conninfo_to_dict

    try:
        host = conninfo_to_dict(url).get("host")
    except Exception:
        return []
    return [h for h in str(host).split(",") if h] if host else []


def psycopg_host(url: str) -> str | None:
    hosts = psycopg_hosts(url)
    return hosts[0] if hosts else None


def sweep_slots(slots: Path) -> None:
    """Unmount the run filesystems that slots of dead processes on this machine left mounted (a slot is named
    ``<pid>-<n>``; a mount is always this machine's, so a live pid elsewhere on shared storage is never touched)."""
    if not slots.is_dir():
        return
    for slot in slots.iterdir():
        try:
            pid = int(slot.name.split("-", 1)[0])
        except ValueError:
            continue
        if pid != os.getpid() and not pid_alive(pid):
            disk.sweep(slot)


def worker_name(slot: int = 0) -> str:
    return f"{socket.gethostname()}/{os.getpid()}/{slot}"


class JobSource(Protocol):
    async def claim(self) -> Job | None: ...
    async def heartbeat(self, job: Job) -> None: ...
    async def finish(self, job: Job, result: Result) -> None: ...
    async def cancelled(self, job: Job) -> None:
        """Returns once the job is cancelled (main moved on, a newer push) or no longer this claim's: its run
        should stop at once."""

    async def held_out(self, job: Job) -> list[tuple[str, bytes]]:
        """A held-out run's checks (path, content): only for a job of purpose ``held_out`` this worker holds."""


class RepoAccess(Protocol):
    async def ready(self, job: Job) -> None:
        """Make sure the job's commit can be read here (a forge repository's, from its queue branch)."""

    def path_for(self, repo: str, sha: str) -> Path: ...


class LocalSource:
    """Jobs straight from the database (the worker inside ``mergebot serve``)."""

    def __init__(self, jobs: JobStore, name: str, worker_id: int | None = None) -> None:
        self.jobs, self.name, self.worker_id = jobs, name, worker_id

    async def claim(self) -> Job | None:
        return await self.jobs.claim_job(worker_id=self.worker_id, worker_name=self.name)

    async def heartbeat(self, job: Job) -> None:
        await self.jobs.heartbeat_job(job_id=job.id, worker_id=self.worker_id,
                                      claim_version=job.claim_version)

    async def finish(self, job: Job, result: Result) -> None:
        await self.jobs.finish_job(job_id=job.id, worker_id=self.worker_id,
                                   claim_version=job.claim_version, outcome=result.overall,
                                   result=result.as_json())

    async def held_out(self, job: Job) -> list[tuple[str, bytes]]:
        return await self.jobs.held_out_files(job_id=job.id, worker_id=self.worker_id,
                                              claim_version=job.claim_version)

    async def cancelled(self, job: Job) -> None:
        # The job's row announces its cancellation (the verify_jobs_notify trigger); in `mergebot serve` the
        # wait shares the server's one listening connection. A job no longer running under this claim (its
        # lease ran out and it went to another worker) is just as lost.
        while True:
            now = await self.jobs.wait_job(job.id, timeout=float(job.timeout_s) * 3 + 60)
            if now.status != "running" or now.claim_version != job.claim_version:
                return


class LocalRepos:
    """The bot's own repositories. A forge repository's mirror is this replica's: a commit another replica made
    (and pushed to its queue branch) is fetched from the forge first (``lookup`` reads the repository)."""

    def __init__(self, root: Path, lookup: Callable[[str], Awaitable[Repo]] | None = None) -> None:
        self.root, self.lookup = root, lookup

    async def ready(self, job: Job) -> None:
        path = git.bare_path(self.root, job.repo)
        if self.lookup is None or await asyncio.to_thread(lambda: path.exists()
                                                          and job.commit_sha in git.open_repo(path)):
            return  # the commit is here (always, for a hosted repository): no need to read the repository
        await have_commit(self.root, await self.lookup(job.repo), job.commit_sha)

    def path_for(self, repo: str, sha: str) -> Path:
        return git.bare_path(self.root, repo)


async def have_commit(root: Path, repo: Repo, sha: str) -> None:
    """The job's commit in this machine's copy of the repository (``mirror.commit_here``)."""
    await asyncio.to_thread(mirror.commit_here, root, repo, sha)


def cache_root(slots: Path, repo: str) -> Path:
    """Where a machine's verifier slots keep a repository's cache generations: shared by its slots, kept across
    restarts (``slots``: the directory of the slots, e.g. ``<data>/slots`` inside ``mergebot serve``)."""
    return slots / "caches" / repo


Secrets = Callable[[], Awaitable[Sequence[str]]]


class Worker:
    def __init__(self, source: JobSource, repos: RepoAccess, slot: Path, *, sandbox: str = "bwrap",
                 poll: float = 0.5, heartbeat_every: float = 10.0, hide: Sequence[Path] = (),
                 secrets: Secrets | None = None, bwrap: str = BWRAP) -> None:
        self.source, self.repos, self.slot = source, repos, slot
        self.sandbox, self.poll, self.heartbeat_every = sandbox, poll, heartbeat_every
        self.bwrap = bwrap
        self.hide = list(hide)  # never visible to a check: the data directory, the database's socket
        self.secrets = secrets  # what a run's log must never show (mergebot.secrets), asked for before each run
        self.wake = asyncio.Event()  # set when a job is queued in this process: no need to wait for the poll
        # A check holds its thread for its whole run: its own thread, so that inside `mergebot serve` the
        # default pool (6 threads on 2 cores) stays free for the queue's merges and the pushes' inspections.
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="verifier-check")

    async def run_one(self) -> Job | None:
        """Claim and run one job. Returns it (or None when the queue was empty)."""
        job = await self.source.claim()
        if job is None:
            return None
        secrets: Sequence[str] = ()
        if self.secrets is not None:
            try:
                secrets = await self.secrets()
            except (MergebotError, psycopg.Error, OSError) as e:  # the server masks the result again anyway
                log.warning("cannot read the secrets to mask for job %s: %s", job.id, e)
        held: list[tuple[str, bytes]] | None = None
        if job.purpose == "held_out":
            try:
                held = await self.source.held_out(job)
            except (MergebotError, psycopg.Error, ApiError, httpx.HTTPError) as e:
                log.warning("cannot read the held-out checks for job %s: %s", job.id, e)
                held = []
        fetch_error = None
        try:
            await self.repos.ready(job)
        except (MergebotError, psycopg.Error, OSError) as e:
            fetch_error = str(e)
        stop = Stop()
        # The run stops at once when its job is cancelled (a speculation cut, a newer push) or its claim is lost
        # (a refused heartbeat): the worker is free for a run that can still land.
        beat = asyncio.create_task(self._heartbeat(job, stop))
        watch = asyncio.create_task(self._watch(job, stop))
        try:
            result = await asyncio.get_running_loop().run_in_executor(self._thread, self._run, job, stop, secrets, held,
                                                                      fetch_error)
        finally:
            for task in (beat, watch):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            stop.close()  # the thread has returned: nothing polls it any more
        if stop.is_set():
            log.info("run of job %s stopped: it was cancelled or its claim was lost", job.id)
        try:
            await self.source.finish(job, result)
        except ClaimSuperseded as e:
            log.info("result of job %s discarded: %s", job.id, e.message)
        return job

    def _run(self, job: Job, stop: Stop, secrets: Sequence[str] = (),
             held: list[tuple[str, bytes]] | None = None, fetch_error: str | None = None) -> Result:
        try:
            if fetch_error is not None:
                raise OSError(fetch_error)
            path = self.repos.path_for(job.repo, job.commit_sha)
        except (subprocess.SubprocessError, OSError) as e:
            return Result(job.commit_sha, "", job.command, "error", None, 0, f"could not fetch the commit: {e}", "",
                          0, "", "none")
        if held is None:
            return self._check(job, path, stop, secrets, None)
        where = self.slot.parent / f"{self.slot.name}.held-out"  # beside the slot, never inside its checkout
        shutil.rmtree(where, ignore_errors=True)
        try:
            if not held:
                return Result(job.commit_sha, "", job.command, "error", None, 0, "no held-out checks could be read",
                              "", 0, "", "none")
            for rel, content in held:
                target = where / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(content)
            return self._check(job, path, stop, secrets, where)
        finally:
            shutil.rmtree(where, ignore_errors=True)

    def _check(self, job: Job, path: Path, stop: Stop, secrets: Sequence[str], held_out: Path | None) -> Result:
        """The job's run (its spec decoded here, once); its caches on this worker's disk: one line of generations
        per repository, shared by this machine's slots."""
        spec = CheckSpec.from_json({"command": job.command, "timeout_s": job.timeout_s, "sandbox": job.sandbox,
                                    "cache": job.cache})
        return run_check(path, job.commit_sha, spec, slot=self.slot, sandbox=self.sandbox, hide=self.hide, stop=stop,
                         cache=spec.cache_request(cache_root(self.slot.parent, job.repo)), secrets=secrets,
                         held_out=held_out, bwrap=self.bwrap)

    async def _heartbeat(self, job: Job, stop: Stop) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_every)
            try:
                await self.source.heartbeat(job)
            except ClaimSuperseded:
                stop.set()
                return
            except MergebotError as e:
                log.warning("heartbeat for job %s failed: %s", job.id, e.message)

    async def _watch(self, job: Job, stop: Stop) -> None:
        try:
            await self.source.cancelled(job)
        except (MergebotError, psycopg.Error) as e:  # the heartbeat still notices a lost claim
            log.warning("cannot watch job %s for cancellation: %s", job.id, e)
            return
        stop.set()

    async def run(self) -> None:
        while True:
            try:
                job = await self.run_one()
            except (MergebotError, OSError) as e:
                log.warning("verifier worker: %s", e)
                job = None
            if job is None:
                await nap(self.wake, self.poll)
                self.wake.clear()


def local_workers(jobs: JobStore, root: Path, data_dir: Path, database_urls: list[str], *, count: int, sandbox: str,
                  heartbeat_every: float, wake_on: list[asyncio.Event], secrets: Secrets | None = None,
                  bwrap: str = BWRAP, lookup: Callable[[str], Awaitable[Repo]] | None = None,
                  attest: Path | None = None) -> list[Worker]:
    """The verifier workers that run inside ``mergebot serve``: the bot's repositories read directly, one
    reused checkout slot each, the private paths hidden, woken by the queue (``wake_on``) when it enqueues."""
    workers = []
    slots = data_dir.resolve() / "slots"
    sweep_slots(slots)
    for i in range(count):
        worker = Worker(LocalSource(jobs, worker_name(i)), LocalRepos(root, lookup), slots / f"{os.getpid()}-{i}",
                        sandbox=sandbox, heartbeat_every=heartbeat_every, secrets=secrets, bwrap=bwrap,
                        hide=private_paths(data_dir, *database_urls, attest=attest))
        wake_on.append(worker.wake)
        workers.append(worker)
    return workers
