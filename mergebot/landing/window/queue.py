"""The merge queue's loop: one queue per repository (target branch), driven by whichever process leads it.

Each pass: take the leadership of the repositories nobody leads (``leader``), reconcile the ones not reconciled
since this leadership began (``reconcile``: a new leader, a restart, an admin's ``mergebot reconcile``), then
take one step of each led repository's queue: the one landing executor (``window.Speculator``), whose planner
decides every step; the serial queue is its window one wide with batches of one. While idle it sweeps for accepted
pushes whose post-receive step never ran and audits main's newest commits (``main.audit``), and sleeps until
poked (a push, a result, a resume) or the poll interval passes.

Failures stay where they belong: one repository's failure (its directory is gone, its forge is away, a bug) holds
only that repository, backing off up to a minute, and it is reconciled again before it moves; an operational
database error (``psycopg.OperationalError``: a lost connection, but also a cancelled statement, a deadlock or a
serialization failure, which are its subclasses) is everyone's, and the whole pass is retried with the leadership
taken again. The queue never dies.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import psycopg

from mergebot import messages as say
from mergebot.db.database import Database
from mergebot.errors import MergebotError
from mergebot.landing.context import Context
from mergebot.landing.main import postland
from mergebot.landing.main.audit import audit
from mergebot.landing.main.land import fenced
from mergebot.landing.main.orphans import queue_orphans
from mergebot.landing.main.reconcile import Report, reconcile_repo
from mergebot.landing.target import target_for
from mergebot.landing.window.executor import Speculator
from mergebot.landing.window.leader import Leadership
from mergebot.models import Repo
from mergebot.naps import nap
from mergebot.rules import QueueRules, queue_rules

T = TypeVar("T")
log = logging.getLogger(__name__)
SLOT_COUNT_SECONDS = 10.0  # how often an automatic window counts the verifier slots
REMOTE_SEEN_SECONDS = 120.0  # a remote worker counts while it ran a check this recently


class LandingQueue:
    def __init__(self, db: Database, repos_root: Path, *, poll_seconds: float = 1.0,
                 verify_timeout_slack: float = 600.0, speculation: int = 1, batch: int = 1,
                 orphan_sweep: float = 5.0, post_land_rerun: bool = False, retry_failures: bool = True,
                 max_passes: int = 4, slots: int = 1, attest_dir: Path | None = None) -> None:
        self.ctx = Context(db, repos_root, poll=poll_seconds, slack=verify_timeout_slack,
                           retry_failures=retry_failures, post_land_rerun=post_land_rerun, max_passes=max_passes,
                           attest_dir=attest_dir)
        # speculation 0: the window is as wide as the verifier slots the bot knows, its own ``slots`` (workers in
        # this process) and the remote workers seen lately (``_count_slots``)
        self.auto = speculation == 0
        self.slots = slots
        self.speculator = Speculator(self.ctx, width=max(1, slots) if self.auto else speculation, batch=batch,
                                     limits=self.limits)
        self._counted = 0.0
        # the server's queue rules (MERGEBOT_*): a repository's own, where it set them, win (``rules``)
        self.defaults = QueueRules(speculation, batch, retry_failures)
        self.known_slots = max(1, slots)  # the verifier slots counted last (``_count_slots``)
        self.leadership = Leadership(db.url)
        self._backoff: dict[str, tuple[float, float]] = {}  # repository -> (not before, current wait)
        self._reconcile_waiters: list[asyncio.Future[list[Report]]] = []
        self.orphan_sweep = orphan_sweep  # seconds between sweeps for pushes whose post-receive never ran
        self._swept = 0.0

    def rules(self, repo: Repo) -> QueueRules:
        """How ``repo``'s queue lands: its own queue rules where it set them, else the server's."""
        return queue_rules(repo, self.defaults)

    def limits(self, repo: Repo) -> tuple[int, int]:
        """``repo``'s widest window and largest batch (the speculator's ``limits``)."""
        rules = self.rules(repo)
        return rules.width(self.known_slots), rules.batch

    @property
    def window(self) -> int:
        """The widest speculation window now (an automatic one follows the verifier slots counted)."""
        return self.speculator.width

    @property
    def on_job(self) -> list[asyncio.Event]:
        """The in-process workers' wake-up calls, set whenever the queue asks for a run."""
        return self.ctx.on_job

    def poke(self) -> None:
        self.ctx.poke()

    async def on_loop(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """``fn(ctx, *args)``: a request's work on the queue's context (``mergebot.api.landing_thread`` runs it on
        the queue's own loop)."""
        return await fn(self.ctx, *args)

    async def reconcile_now(self) -> list[Report]:
        """Reconcile every repository this process leads, between two candidates (never during one)."""
        fut: asyncio.Future[list[Report]] = asyncio.get_running_loop().create_future()
        self._reconcile_waiters.append(fut)
        self.poke()
        return await fut

    async def run(self) -> None:
        """Process every led repository's queue until cancelled."""
        wake = self.ctx.wake
        while True:
            wake.clear()
            try:
                busy = await self._pass()
            except Exception as e:  # the database or a forge is away, or a bug: never let the queue die
                if isinstance(e, (MergebotError, psycopg.Error)):
                    log.warning("queue pass failed, will retry: %s", e)
                else:
                    log.exception("queue pass failed, will retry")
                await self.leadership.close()
                self.speculator.drop()  # leadership is taken again with a reconcile, which requeues their candidates
                await asyncio.sleep(self.ctx.poll)
                continue
            if not busy:
                await nap(wake, self.ctx.poll)

    async def _count_slots(self) -> None:
        """An automatic window's width, every ``SLOT_COUNT_SECONDS``: this process's workers and the remote ones."""
        now = asyncio.get_running_loop().time()
        if now - self._counted < SLOT_COUNT_SECONDS:
            return
        self._counted = now
        width = self.known_slots = max(1, self.slots + await self.ctx.db.jobs.remote_workers(
            seconds=REMOTE_SEEN_SECONDS))
        if self.auto and width != self.speculator.width:
            log.info("the automatic speculation window is %s wide now (the verifier slots this bot knows; a "
                     "repository's own --window, where set, holds for it)", width)
            self.speculator.width = width

    async def _pass(self) -> bool:
        """One pass over the led repositories; True when something happened (the loop comes straight back)."""
        await self._count_slots()
        led = await self.leadership.lead(await self.ctx.db.repos.list_repos())
        for name in self.leadership.lost:  # another replica may lead it now: this one's window is stale
            log.warning("lost the lead of %s (its lock's session ended); its window is dropped", name)
            self.speculator.drop(name)
        for name in self.leadership.taken:  # who leads a queue, on the record: replicas hand it over on a crash
            process = f"{socket.gethostname()}:{os.getpid()}"
            log.info("leading the queue of %s now (%s)", name, process)
            await self.ctx.db.subtasks.log_event(actor_id=None, kind="queue_leader", detail={
                "repo": name, "process": process})
        reconciled = self.leadership.reconciled
        waiters, self._reconcile_waiters = self._reconcile_waiters, []
        if waiters:
            reconciled.clear()
        now = asyncio.get_running_loop().time()
        led = [r for r in led if self._backoff.get(r.name, (0.0, 0.0))[0] <= now]
        reports = []
        for repo in led:
            if repo.name not in reconciled:
                report = await self._guarded(repo, self._reconcile(repo))
                if report is not None:
                    reports.append(report)
        for fut in waiters:
            if not fut.done():
                fut.set_result(reports)
        busy = False
        for repo in led:
            if repo.paused or repo.name not in reconciled:
                continue
            moved = await self._guarded(repo, self._step(repo))
            if moved is not None:  # a step that did not fail ends the repository's back-off
                self._backoff.pop(repo.name, None)
                busy = busy or moved
        return busy or await self._sweep_orphans(led)

    async def _reconcile(self, repo: Repo) -> Report:
        window = self.speculator.windows.get(repo.name)
        if window is not None:  # the reconciler requeues what is mid-verification
            await self.speculator.cut(window, 0, say.RECONCILING)
            self.speculator.drop(repo.name)
        report = await reconcile_repo(self.ctx, repo)
        self.ctx.published.forget(repo.name)  # sweep the forge's queue branches a dead leader left
        self.leadership.reconciled.add(repo.name)
        await postland.resume(self.ctx, repo)
        return report

    async def _step(self, repo: Repo) -> bool:
        """One step of the repository's queue; True when something happened. A forge repository's step first
        fetches the candidates another replica received, and after it deletes the queue branches whose verdicts are
        in (``target.Forge``)."""
        ctx, target = self.ctx, target_for(self.ctx, repo)
        await target.gather(lambda cand: fenced(ctx.db, cand))
        moved = await self.speculator.step(repo)
        await target.tidy(ctx.published)
        return moved

    async def _guarded(self, repo: Repo, step: Awaitable[T]) -> T | None:
        """Run one repository's ``step``; a failure of its own holds only that repository (``_repo_failed``) and
        gives None. An operational database error (a lost connection, a cancelled statement, a deadlock: every
        ``psycopg.OperationalError``) is everyone's: it propagates and the whole pass retries."""
        try:
            return await step
        except (psycopg.OperationalError, asyncio.CancelledError):
            raise
        except Exception as e:
            self._repo_failed(repo, e)
            return None

    def _repo_failed(self, repo: Repo, e: Exception) -> None:
        """Its window is dropped, it is reconciled again (which requeues what was mid-verification), and it is left
        alone for a while, doubling up to a minute, so the other repositories' queues go on."""
        _, wait = self._backoff.get(repo.name, (0.0, self.ctx.poll))
        wait = min(max(wait * 2, self.ctx.poll), 60.0)
        self._backoff[repo.name] = (asyncio.get_running_loop().time() + wait, wait)
        if isinstance(e, (MergebotError, psycopg.Error, OSError, RuntimeError)):
            log.warning("queue of %s failed, retrying it in %.0f s: %s", repo.name, wait, e)
        else:
            log.exception("queue of %s failed, retrying it in %.0f s", repo.name, wait)
        self.speculator.drop(repo.name)
        self.leadership.reconciled.discard(repo.name)

    async def _sweep_orphans(self, led: list[Repo]) -> bool:
        """While idle, every ``orphan_sweep`` seconds: queue accepted pushes whose post-receive step never ran. The
        start-up reconcile catches most; but git's ``receive-pack`` can still move a branch after the new process
        reconciled (its pre-receive step was answered just before the old process died), and its post-receive then
        reaches no process that knows the push."""
        now = asyncio.get_running_loop().time()
        if now - self._swept < self.orphan_sweep:
            return False
        self._swept = now
        found = False
        for repo in led:
            if repo.name not in self.leadership.reconciled:
                continue
            ids = await self._guarded(repo, queue_orphans(self.ctx.db, self.ctx.path(repo), repo))
            if ids:
                log.warning("queued accepted pushes whose post-receive step never ran: candidates %s", ids)
                found = True
            # the audit of main between two passes of the reconciler: what came after the head it audited last
            await self._guarded(repo, audit(self.ctx, repo, target_for(self.ctx, repo).path))
        return found

    async def close(self) -> None:
        self.speculator.drop()
        for task in list(self.ctx.post_land):
            task.cancel()
        await self.leadership.close()
