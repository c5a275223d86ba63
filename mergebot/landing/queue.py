"""Where main moves: the merge queue, one per repository (target branch).

A candidate goes through these steps, each its own function below:
  1. take   — the next queued candidate, highest priority then arrival; it must still be what its subtask
              waits on (same owner, claim version and sha), else it is superseded;
  2. merge  — onto the current main, in memory; a conflict rejects it with the paths and the subtask goes
              back to running for the same owner;
  3. verify — a verify job for the repository's check on the exact merged commit, run by a verifier worker
              (sandboxed, time-limited); a failure is retried once on the same commit — a pass on retry is
              "flaky" and lands with both runs as evidence (MERGEBOT_RETRY_FAILED_CHECKS=0 trusts a first
              fail or timeout; an error is always retried) — then checked on the base: if main fails too,
              the failure is "pre-existing", the candidate is parked rather than blamed and landing pauses;
              otherwise the candidate is rejected and the subtask goes back to its owner;
  4. land   — write the intent (with the evidence), move main by compare-and-swap (for a forge repository: push
              to the forge with an expected-old-value guard, then follow it), then in one transaction
              write the landed row, mark the subtask landed, release its dependents and close the intent.
After landing, a post-land job checks main's new head and records the team status on the landed row; a red
main raises an announcement and pauses the repository: while paused only a candidate that passes (a fix)
lands, and the others are parked until main is green again or an admin resumes.
A crash between any two steps leaves state the reconciler repairs (``mergebot.landing.reconcile``).

With a speculation window (MERGEBOT_SPECULATION_WINDOW > 1) or batches (MERGEBOT_BATCH_SIZE > 1) the queue
keeps a window instead (``process_window``; ``mergebot.landing.planner`` decides, this module does the I/O):
a chain of merges main + c1 + ... + ck, with runs in flight on up to W of them, each covering the batch of
slots ahead of it. A passing run lands every slot it covers by one move of main to exactly the commit it
passed on; a failing batch is bisected; a candidate failing alone is judged apart (retry, main's status)
while the window refills without it — only candidates touching the same paths wait for that verdict, and a
candidate that does not apply on top of the slots ahead is re-planned after them (lanes).

One process leads each repository's queue, chosen by a PostgreSQL advisory lock, so replicas never land
into the same branch at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Awaitable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import psycopg

from mergebot.errors import ClaimSuperseded, MergebotError, Unavailable
from mergebot.git import mirror
from mergebot.git import repo as git
from mergebot.landing import planner
from mergebot.landing.reconcile import Report, enqueue_orphans, reconcile_repo
from mergebot.landing.store import Candidate, Intent, Repo
from mergebot.models import Handle, Landed
from mergebot.verify.jobs import Job, JobStore
from mergebot.verify.worker import result_from_json
from verifier.runner import Result

T = TypeVar("T")
log = logging.getLogger(__name__)
QUEUE_LOCK_CLASS = 7243502


@dataclass
class Speculation:
    """One slot of the window: a candidate merged onto ``base`` (main, or the slot ahead's merge)."""
    cand: Candidate
    base: str
    merge: git.Merge
    job_id: int | None = None  # this slot's own run (a checkpoint); None while a later checkpoint covers it
    result: Result | None = None
    valid: bool = True
    started: float = 0.0  # when its run was queued (event-loop time)
    paths: frozenset[str] = frozenset()  # what the candidate changes on top of its base

    @property
    def checkpoint(self) -> bool:
        return self.job_id is not None

    def plan(self) -> planner.Slot:
        return planner.Slot(self.cand.id, self.result.outcome if self.result else None, self.valid, self.checkpoint)


@dataclass
class Window:
    width: int  # verifier runs in flight at most (Zuul's window)
    slots: list[Speculation] = field(default_factory=list)
    fail_rate: float = 0.1  # measured share of candidates that fail their check (sets the batch size)
    deferred: set[int] = field(default_factory=set)  # re-planned after the slots ahead of them (lanes)
    aside: dict[int, tuple[asyncio.Task[None], frozenset[str]]] = field(default_factory=dict)  # judged apart
    # The next candidate, taken and merged onto the chain's tail while the runs were busy, so that the run a
    # result frees starts without waiting for that merge (``_stage``); it has no run until ``_fill`` adds it.
    staged: Speculation | None = None

    def failing(self) -> bool:
        return any(s.plan().failed for s in self.slots)

    def tail(self, start: str) -> str:
        """Where the next slot is merged: on the last slot's merge, or on ``start`` when the chain is empty."""
        tip = self.slots[-1].merge.sha if self.slots else start
        assert tip is not None
        return tip

    def drop(self) -> None:
        """Forget the window (reconcile, lost leadership): its candidates are requeued by the reconciler."""
        for task, _ in self.aside.values():
            task.cancel()
        self.aside.clear()
        self.slots.clear()
        self.deferred.clear()
        self.staged = None


def _remote(repo: Repo) -> mirror.Remote:
    return mirror.remote_for(repo.forge_git_url or "", repo.forge_token_env)


def crash_point(name: str) -> None:
    """Test hook for crash drills: SIGKILL this process at the named step when MERGEBOT_CRASH_AT says so."""
    if os.environ.get("MERGEBOT_CRASH_AT") == name:
        os.kill(os.getpid(), signal.SIGKILL)


class LandingQueue:
    def __init__(self, store: JobStore, repos_root: Path, *, poll_seconds: float = 1.0,
                 verify_timeout_slack: float = 600.0, speculation: int = 1, batch: int = 1,
                 orphan_sweep: float = 5.0, post_land_rerun: bool = False, retry_failures: bool = True) -> None:
        self.store = store
        self.retry_failures = retry_failures  # a failing check runs once more on the same commit (flakiness)
        self.post_land_rerun = post_land_rerun  # run the post-land check even on a commit a run passed on
        self.speculation = speculation  # the widest window; 1 (with batch 1) is the serial queue
        self.batch = batch  # the largest batch one run may cover
        self._windows: dict[str, Window] = {}
        self.slack = verify_timeout_slack
        self._post_land: set[asyncio.Task[None]] = set()
        self._backoff: dict[str, tuple[float, float]] = {}  # repository -> (not before, current wait)
        self.on_job: list[asyncio.Event] = []  # in-process workers' wake-up calls
        self.root = repos_root
        self.poll = poll_seconds
        self._wake = asyncio.Event()
        self._lock_conn: psycopg.AsyncConnection[Any] | None = None
        self._leading: set[str] = set()
        self._reconciled: set[str] = set()
        self._reconcile_waiters: list[asyncio.Future[list[Report]]] = []
        self.orphan_sweep = orphan_sweep  # seconds between sweeps for pushes whose post-receive never ran
        self._swept = 0.0

    def poke(self) -> None:
        self._wake.set()

    async def reconcile_now(self) -> list[Report]:
        """Reconcile every repository this process leads, between two candidates (never during one)."""
        fut: asyncio.Future[list[Report]] = asyncio.get_running_loop().create_future()
        self._reconcile_waiters.append(fut)
        self.poke()
        return await fut

    # -- leadership ------------------------------------------------------------------------------------------

    async def _lead(self, repos: list[Repo]) -> list[Repo]:
        """The repositories this process leads (advisory locks held on one dedicated connection)."""
        if self._lock_conn is None or self._lock_conn.closed:
            self._leading.clear()
            self._reconciled.clear()  # a new leadership starts by reconciling
            self._lock_conn = await psycopg.AsyncConnection.connect(self.store.url, autocommit=True)
        for r in repos:
            if r.name not in self._leading:
                cur = await self._lock_conn.execute(
                    "SELECT pg_try_advisory_lock(%s, hashtext(%s))", (QUEUE_LOCK_CLASS, r.name))
                row = await cur.fetchone()
                if row and row[0]:
                    self._leading.add(r.name)
        return [r for r in repos if r.name in self._leading]

    async def run(self) -> None:
        """Process every led repository's queue until cancelled."""
        while True:
            self._wake.clear()
            busy = False
            try:
                led = await self._lead(await self.store.list_repos())
                waiters, self._reconcile_waiters = self._reconcile_waiters, []
                if waiters:
                    self._reconciled.clear()
                reports = []
                now = asyncio.get_running_loop().time()
                led = [r for r in led if self._backoff.get(r.name, (0.0, 0.0))[0] <= now]
                for repo in led:
                    if repo.name not in self._reconciled:
                        report = await self._guarded(repo, self._reconcile(repo))
                        if report is not None:
                            reports.append(report)
                for fut in waiters:
                    if not fut.done():
                        fut.set_result(reports)
                for repo in led:
                    if repo.paused or repo.name not in self._reconciled:
                        continue
                    moved = await self._guarded(repo, self._step(repo))
                    if moved is not None:  # a step that did not fail ends the repository's back-off
                        self._backoff.pop(repo.name, None)
                        busy = busy or moved
                if not busy:
                    busy = await self._sweep_orphans(led)
            except Exception as e:  # the database or a forge is away, or a bug: never let the queue die
                if isinstance(e, (MergebotError, psycopg.Error)):
                    log.warning("queue pass failed, will retry: %s", e)
                else:
                    log.exception("queue pass failed, will retry")
                with contextlib.suppress(Exception):
                    if self._lock_conn is not None:
                        await self._lock_conn.close()
                self._lock_conn = None
                for window in self._windows.values():
                    window.drop()
                self._windows.clear()  # leadership is taken again with a reconcile, which requeues their candidates
                await asyncio.sleep(self.poll)
                continue
            if not busy:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout=self.poll)

    async def _reconcile(self, repo: Repo) -> Report:
        if repo.name in self._windows:  # the reconciler requeues what is mid-verification
            window = self._windows.pop(repo.name)
            await self._cut(window, 0, "reconciling; verifying again")
            window.drop()
        report = await reconcile_repo(self.store, self.root, repo)
        self._reconciled.add(repo.name)
        await self._resume_post_land(repo)
        return report

    async def _step(self, repo: Repo) -> bool:
        """One step of the repository's queue; True when something happened."""
        if self.speculation > 1 or self.batch > 1:
            return await self.process_window(repo)
        return await self.process_next(repo) is not None

    async def _guarded(self, repo: Repo, step: Awaitable[T]) -> T | None:
        """Run one repository's ``step``; a failure of its own holds only that repository (``_repo_failed``) and
        gives None. A lost database connection is everyone's: it propagates and the whole pass retries."""
        try:
            return await step
        except (psycopg.OperationalError, asyncio.CancelledError):
            raise
        except Exception as e:
            self._repo_failed(repo, e)
            return None

    def _repo_failed(self, repo: Repo, e: Exception) -> None:
        """One repository's failure (its directory is gone, its forge is away, a bug) holds only that repository:
        its window is dropped, it is reconciled again (which requeues what was mid-verification), and it is left
        alone for a while, doubling up to a minute, so the other repositories' queues go on."""
        _, wait = self._backoff.get(repo.name, (0.0, self.poll))
        wait = min(max(wait * 2, self.poll), 60.0)
        self._backoff[repo.name] = (asyncio.get_running_loop().time() + wait, wait)
        if isinstance(e, (MergebotError, psycopg.Error, OSError, RuntimeError)):
            log.warning("queue of %s failed, retrying it in %.0f s: %s", repo.name, wait, e)
        else:
            log.exception("queue of %s failed, retrying it in %.0f s", repo.name, wait)
        window = self._windows.pop(repo.name, None)
        if window is not None:
            window.drop()
        self._reconciled.discard(repo.name)

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
            if repo.name not in self._reconciled:
                continue
            ids = await self._guarded(repo, enqueue_orphans(self.store, git.bare_path(self.root, repo.name), repo))
            if ids:
                log.warning("queued accepted pushes whose post-receive step never ran: candidates %s", ids)
                found = True
        return found

    async def close(self) -> None:
        for window in self._windows.values():
            window.drop()
        for task in list(self._post_land):
            task.cancel()
        if self._lock_conn is not None:
            await self._lock_conn.close()

    # -- one candidate -----------------------------------------------------------------------------------

    async def process_next(self, repo: Repo) -> Candidate | None:
        cand = await self.take(repo)
        if cand is None:
            return None
        path = git.bare_path(self.root, repo.name)
        if repo.forge:  # someone may have pushed to the forge's main directly: merge onto what is there
            main = await asyncio.to_thread(mirror.sync_target, path, _remote(repo), repo.target_branch)
        else:
            main = await asyncio.to_thread(self._main_head, path, repo.target_ref)
        merge = await self.merge(repo, cand, path, main)
        if merge is None:
            return cand
        verdict = await self.verify(repo, cand, path, merge, main)
        if verdict is None:
            return cand
        crash_point("after_verify")
        await self.land(repo, cand, path, main, merge, *verdict)
        return cand

    # -- speculation (mergebot.landing.planner decides; this does the I/O) -------------------------------

    async def process_window(self, repo: Repo) -> bool:
        """One step of speculative (and batched) landing for ``repo``: fill the window, then land, cut,
        bisect, judge or wait. True when something happened (the caller comes straight back)."""
        window = self._windows.setdefault(repo.name, Window(width=self.speculation))
        if repo.red_since:  # while main is red only a fix lands, one at a time, judged against main itself
            if window.slots or window.staged is not None:
                await self._cut(window, 0, f"{repo.target_branch} is red; verifying against it alone")
            return await self.process_next(repo) is not None
        path = git.bare_path(self.root, repo.name)
        if repo.forge:
            main = await asyncio.to_thread(mirror.sync_target, path, _remote(repo), repo.target_branch)
        else:
            main = await asyncio.to_thread(self._main_head, path, repo.target_ref)
        if window.slots and window.slots[0].base != main:  # main moved under the speculation
            await self._cut(window, 0, f"{repo.target_branch} moved under the speculation; verifying again")
        await self._fill(repo, window, path, main)
        if not window.slots:
            return False
        await self._collect(repo, window)
        decision = planner.decide([s.plan() for s in window.slots])
        if decision.action == "wait":
            pending = [s.job_id for s in window.slots if s.job_id is not None and s.result is None]
            if not pending:
                return False
            await self._stage(repo, window, path, main)
            await self.store.wait_any(pending, timeout=self.poll)
            return True
        if decision.action == "checkpoint":  # a tail left uncovered by a cut, or bisecting a failed batch
            await self._checkpoint(repo, window.slots[decision.index])
            return True
        if decision.action == "cut":
            failed = decision.index > 0 and window.slots[decision.index - 1].plan().failed
            if failed:
                window.width = self._next_width(window, passed=False)
            await self._cut(window, decision.index, "a candidate ahead of it failed or was withdrawn; re-planned")
            return True
        if decision.action == "land":
            unit, window.slots = window.slots[:decision.index + 1], window.slots[decision.index + 1:]
            await self._drop_covered(unit)
            if not window.deferred:
                # The runs this landing frees go to the next candidates before main moves: they are built on
                # the chain's tail, or on the unit's merge, which is where main is about to be. A landing that
                # does not happen cuts them with the rest below.
                try:
                    await self._fill(repo, window, path, main, tail=unit[-1].merge.sha)
                except Exception:  # the unit's run passed: land it first, re-plan the rest afterwards
                    log.exception("filling the window of %s before a landing failed", repo.name)
                    await self._cut(window, 0, "re-planned after an error")
            landed = await self._land_unit(repo, unit, path, main)
            window.deferred.clear()
            window.width = self._next_width(window, passed=landed)
            if landed:
                for _ in unit:
                    window.fail_rate = planner.observe_failure(window.fail_rate, False)
            else:  # superseded at the fence, or main moved: everything behind was built on it
                await self._cut(window, 0, "the candidate ahead of it did not land; re-planned")
            return True
        # judge_head: the head failed alone; everything behind it was built on it. It is judged apart (lanes):
        # the window refills at once without it, and only candidates touching the same paths wait for the verdict.
        head = window.slots[0]
        await self._cut(window, 1, "a candidate ahead of it failed; re-planned")
        window.slots.pop(0)
        window.width = self._next_width(window, passed=False)
        task = asyncio.create_task(self._judge_aside(repo, window, head, path, main))
        window.aside[head.cand.id] = (task, head.paths)
        return True

    def _next_width(self, window: Window, *, passed: bool) -> int:
        return planner.next_width(window.width, passed=passed, ceiling=self.speculation,
                                  floor=planner.window_floor(window.fail_rate, self.speculation))

    async def _judge_aside(self, repo: Repo, window: Window, slot: Speculation, path: Path, main: str) -> None:
        """A failed candidate judged on its own commit (retry, then main's status) while the window goes on.

        Rejected when the failure is its own; parked when main itself is red; put back in the queue when the
        retry passed (flaky): main has moved on since, so it is merged and verified again before it lands.
        """
        try:
            verdict = await self.verify(repo, slot.cand, path, slot.merge, main, first=slot.result)
            window.fail_rate = planner.observe_failure(window.fail_rate, verdict is None)
            if verdict is not None:
                ok, why = await self.store.candidate_fence(slot.cand)
                await self.store.finish_candidate(
                    slot.cand.id, "queued" if ok else "superseded",
                    "failed once and passed on a retry of the same commit; verified again on the current "
                    f"{repo.target_branch}" if ok else why)
        except Exception:  # never lost: the reconciler requeues a candidate left mid-verification
            log.exception("judging candidate %s apart failed", slot.cand.id)
        finally:
            window.aside.pop(slot.cand.id, None)
            window.deferred.clear()
            self.poke()

    async def _checkpoint(self, repo: Repo, slot: Speculation) -> None:
        """Queue a run on ``slot``'s merge; it covers every unchecked slot ahead of it."""
        assert slot.merge.sha is not None
        slot.job_id = await self.start_check(repo, slot.merge.sha, "candidate", candidate_id=slot.cand.id)
        slot.result = None
        slot.started = asyncio.get_running_loop().time()

    async def _fill(self, repo: Repo, window: Window, path: Path, main: str, tail: str | None = None) -> None:
        """Take queued candidates onto the window's chain until it holds ``width`` runs. A candidate that does
        not apply on top of the slots ahead, or that touches what a candidate being judged apart touches, is
        re-planned after them instead (lanes: the ones behind it go on).

        ``tail``: where an empty chain starts instead of ``main`` (the merge of a unit about to land). What does
        not apply there waits too: it is judged against main once main has moved, never before."""
        size = planner.batch_size(window.fail_rate, self.batch)
        skip = set(window.deferred) | set(window.aside)
        blocked = frozenset().union(*(paths for _, paths in window.aside.values()))
        while not window.failing() and sum(s.checkpoint for s in window.slots) < window.width:
            staged, window.staged = window.staged, None
            cand = staged.cand if staged is not None else await self.take(repo, exclude=sorted(skip))
            if cand is None:
                break
            if staged is not None:  # taken a while ago: it may have been superseded since
                ok, why = await self.store.candidate_fence(cand)
                if not ok:
                    await self.store.finish_candidate(cand.id, "superseded", why)
                    continue
            base = window.tail(tail or main)
            if staged is not None and staged.base == base:
                merge, paths = staged.merge, staged.paths
            else:
                merge, paths = await self._merge_with_paths(cand, path, base)
            wait = None
            if paths & blocked:
                wait = "waits for the verdict on a failed candidate that touches the same paths"
            elif merge.kind in ("conflict", "up-to-date") and (window.slots or base != main):
                wait = "waits for the candidates ahead of it"  # judged against main once they are through
            if wait:
                await self.store.finish_candidate(cand.id, "queued", wait)
                window.deferred.add(cand.id)
                skip.add(cand.id)
                continue
            if merge.kind == "conflict":
                await self._reject_conflict(repo, cand, merge, main)
                continue
            if merge.kind == "up-to-date":
                await self.reject(cand, f"nothing to land: {cand.sha[:12]} is already on {repo.target_branch}.",
                                  base_sha=main)
                continue
            slot = Speculation(cand, base, merge, paths=paths)
            window.slots.append(slot)
            unchecked = len(window.slots) - max((i + 1 for i, s in enumerate(window.slots) if s.checkpoint), default=0)
            if unchecked >= size:
                await self._checkpoint(repo, slot)
        if window.slots and not window.slots[-1].checkpoint and not window.failing():
            await self._checkpoint(repo, window.slots[-1])  # the queue ran dry: cover the batch as it is

    async def _stage(self, repo: Repo, window: Window, path: Path, main: str) -> None:
        """While the window's runs are busy: take the next candidate and merge it onto the chain's tail, so the
        next free run starts on it without waiting for the merge. It stays out of the window (no run, nothing
        lands on it) until ``_fill`` adds it, merged again if the tail has changed by then."""
        if window.staged is not None or window.failing() or window.deferred:
            return
        cand = await self.take(repo, exclude=sorted(window.aside))
        if cand is None:
            return
        base = window.tail(main)
        merge, paths = await self._merge_with_paths(cand, path, base)
        window.staged = Speculation(cand, base, merge, paths=paths)

    async def _merge_with_paths(self, cand: Candidate, path: Path, base: str) -> tuple[git.Merge, frozenset[str]]:
        merge = await self._merge_onto(cand, path, base)
        if merge.kind not in ("merge", "fast-forward") or merge.tree is None:
            return merge, frozenset()

        tree = merge.tree
        return merge, frozenset(await asyncio.to_thread(lambda: git.paths_since(git.open_repo(path), base, tree)))

    async def _collect(self, repo: Repo, window: Window) -> None:
        """Results that are in, runs that overran, and whether each slot is still wanted."""
        now = asyncio.get_running_loop().time()
        limit = repo.verifier_timeout_s * 3 + self.slack
        jobs = await self.store.get_jobs([s.job_id for s in window.slots if s.job_id is not None and s.result is None])
        fences = await self.store.candidate_fences([s.cand for s in window.slots if s.valid])
        for slot in window.slots:
            if slot.job_id is not None and slot.result is None:
                job = jobs[slot.job_id]
                if job.status == "done" and job.result:
                    slot.result = await self._tree_checked(result_from_json(job.result), slot.merge)
                elif job.status == "cancelled":
                    slot.valid = False
                elif now - slot.started > limit:
                    slot.result = Result(slot.merge.sha or "", "", repo.verifier_command, "error", None, 0,
                                         f"verify job {slot.job_id} did not finish", "", 0, "", "none")
            if slot.valid:
                slot.valid, _ = fences[slot.cand.id]

    @staticmethod
    async def _tree_checked(result: Result, merge: git.Merge) -> Result:
        if result.tree_sha and result.tree_sha != merge.tree:
            result.outcome = "error"
        return result

    async def _cut(self, window: Window, index: int, reason: str) -> None:
        """Cancel the runs of slots ``index`` and after and put their candidates back in the queue."""
        cut, window.slots = window.slots[index:], window.slots[:index]
        window.deferred.clear()
        if index == 0 and window.staged is not None:  # everything is re-planned: the staged one goes back too
            cut.append(window.staged)
            window.staged = None
        for slot in cut:
            await self.store.cancel_jobs_for(slot.cand.id)
            ok, why = await self.store.candidate_fence(slot.cand)
            if ok:
                await self.store.finish_candidate(slot.cand.id, "queued", reason)
            else:
                await self.store.finish_candidate(slot.cand.id, "superseded", why)

    async def _drop_covered(self, unit: list[Speculation]) -> None:
        """Cancel the runs of a unit's slots that its last slot's pass covers: they are no longer needed."""
        for slot in unit[:-1]:
            if slot.job_id is not None and slot.result is None:
                await self.store.cancel_jobs_for(slot.cand.id)

    async def _land_unit(self, repo: Repo, unit: list[Speculation], path: Path, main: str) -> bool:
        """Land the slots of ``unit`` by one move of main to the last one's merge, which its run passed on."""
        last = unit[-1]
        assert last.result is not None
        if len(unit) == 1:
            await self.land(repo, last.cand, path, main, last.merge, last.result, {})
        else:
            await self.land_batch(repo, unit, path, main, last.result)
        return (await self.store.get_candidate(last.cand.id)).status == "landed"

    async def take(self, repo: Repo, exclude: list[int] | None = None) -> Candidate | None:
        while True:
            cand = await self.store.next_candidate(repo.name, exclude)
            if cand is None:
                return None
            ok, why = await self.store.candidate_fence(cand)
            if ok:
                return cand
            await self.store.finish_candidate(cand.id, "superseded", why)

    @staticmethod
    def _main_head(path: Path, target_ref: str) -> str:
        head = git.head_of(git.open_repo(path), target_ref)
        if head is None:
            raise MergebotError(f"{path} has no {target_ref}")
        return head

    async def _merge_onto(self, cand: Candidate, path: Path, base: str) -> git.Merge:
        title = (await self.store.get_subtask(cand.subtask_id)).title
        message = (f"Land subtask {cand.subtask_id} v{cand.claim_version}: {title}\n\n"
                   f"Candidate: {cand.sha}\nMergebot-Candidate: {cand.id}\n")
        return await asyncio.to_thread(lambda: git.merge_onto(git.open_repo(path), base, cand.sha, message))

    async def _reject_conflict(self, repo: Repo, cand: Candidate, merge: git.Merge, main: str) -> None:
        shown = ", ".join(merge.conflicts[:10]) + (" ..." if len(merge.conflicts) > 10 else "")
        await self.reject(cand, f"conflicts with {repo.target_branch} in: {shown}. Fetch {repo.target_branch}, "
                          "merge or rebase onto it, resolve, and push again.", base_sha=main)

    async def merge(self, repo: Repo, cand: Candidate, path: Path, main: str) -> git.Merge | None:
        merge = await self._merge_onto(cand, path, main)
        if merge.kind == "conflict":
            await self._reject_conflict(repo, cand, merge, main)
            return None
        if merge.kind == "up-to-date":
            await self.reject(cand, f"nothing to land: {cand.sha[:12]} is already on {repo.target_branch}.",
                              base_sha=main)
            return None
        return merge

    async def check(self, repo: Repo, sha: str, purpose: str, *, candidate_id: int | None = None,
                    landed_id: int | None = None) -> Result:
        """Run the repository's check on ``sha`` through a verify job and wait for a worker's result."""
        job_id = await self.start_check(repo, sha, purpose, candidate_id=candidate_id, landed_id=landed_id)
        return await self.result_of(repo, sha, job_id)

    async def start_check(self, repo: Repo, sha: str, purpose: str, *, candidate_id: int | None = None,
                          landed_id: int | None = None) -> int:
        job = await self.store.enqueue_job(repo=repo.name, commit_sha=sha, command=repo.verifier_command,
                                           timeout_s=repo.verifier_timeout_s, purpose=purpose,
                                           candidate_id=candidate_id, landed_id=landed_id)
        for wake in self.on_job:
            wake.set()
        return job.id

    async def result_of(self, repo: Repo, sha: str, job_id: int) -> Result:
        done = await self.store.wait_job(job_id, timeout=repo.verifier_timeout_s * 3 + self.slack)
        return self._result(repo, sha, done)

    @staticmethod
    def _result(repo: Repo, sha: str, done: Job) -> Result:
        if done.status != "done" or not done.result:
            return Result(sha, "", repo.verifier_command, "error", None, 0,
                          f"verify job {done.id} did not finish ({done.status})", "", 0, "", "none")
        return result_from_json(done.result)

    async def verify(self, repo: Repo, cand: Candidate, path: Path, merge: git.Merge,
                     main: str, first: Result | None = None) -> tuple[Result, dict[str, Any]] | None:
        """The passing result on the merged commit and the evidence of every run it took; None when the
        candidate was rejected or parked. ``first``: a run already made on this commit (speculation)."""
        assert merge.sha is not None
        if first is None:
            first = await self.check(repo, merge.sha, "candidate", candidate_id=cand.id)
        if first.tree_sha and first.tree_sha != merge.tree:
            first.outcome = "error"
        if first.passed:
            return first, {}
        runs = {"first": first.as_json()}
        if first.outcome == "error" or (self.retry_failures and first.outcome in ("fail", "timeout")):
            retry = await self.check(repo, merge.sha, "retry", candidate_id=cand.id)
            runs["retry"] = retry.as_json()
            if retry.passed:
                retry.outcome = "flaky"  # failed once, passed on the same commit: not the candidate's fault
                return retry, runs
            if retry.outcome == "error":
                await self.reject(cand, f"the verifier could not run the check on {merge.sha[:12]} (twice): "
                                  f"{retry.excerpt(5)}\nThis is not a verdict on your change; push again, or ask "
                                  "an operator to look at the verifier.", base_sha=main, merged_sha=merge.sha,
                                  verifier={**retry.as_json(), "runs": runs})
                return None
        # A failure stands (with or without its retry): the candidate's, or main's own?
        if repo.red_since:  # main is known to be red: do not blame the candidate, do not re-prove it
            base = Result(main, "", repo.verifier_command, "fail", None, 0, repo.paused_reason or "", "", 0, "")
        elif main == merge.sha:
            base = first
        elif await self.store.passed_on(repo=repo.name, sha=main, command=repo.verifier_command):
            # main is known green (this check passed on this very commit): the failure is the candidate's
            base = Result(main, "", repo.verifier_command, "pass", 0, 0,
                          "not run again: this check already passed on this commit", "", 0, "", "none")
        else:
            base = await self.check(repo, main, "base", candidate_id=cand.id)
        runs["base"] = base.as_json()
        if base.outcome in ("fail", "timeout"):  # an error on main proves nothing about main
            await self.red_main(repo, main, f"the check fails on {repo.target_branch} itself ({main[:12]})")
            await self.store.finish_candidate(
                cand.id, "parked", f"{repo.target_branch} is red: the check fails on {main[:12]} too, so this "
                "failure is pre-existing, not the candidate's. Parked until main is green again.",
                base_sha=main, merged_sha=merge.sha, verifier={**first.as_json(), "runs": runs})
            return None
        once = "" if "retry" in runs else (" (judged on this one run: this server does not retry failed checks, "
                                           "MERGEBOT_RETRY_FAILED_CHECKS=0)")
        await self.reject(cand, f"the check `{repo.verifier_command}` gave {first.outcome} "
                          f"(exit {first.exit_code}) on the merged commit {merge.sha[:12]}{once}:\n{first.excerpt()}",
                          base_sha=main, merged_sha=merge.sha, verifier={**first.as_json(), "runs": runs})
        return None

    async def red_main(self, repo: Repo, sha: str, why: str) -> None:
        if repo.red_since:
            return
        reason = f"{repo.target_branch} is red at {sha[:12]}: {why}. Landing is paused: only a fix lands."
        await self.store.set_red(repo=repo.name, sha=sha, reason=reason)
        repo.red_since, repo.paused_reason = sha, reason
        await self.store.announce(author_id=None, body=f"[{repo.name}] {reason} An admin can resume with "
                                  f"`mergebot repo resume {repo.name}`.")

    async def _resume_post_land(self, repo: Repo) -> None:
        """A post-land check cut short by a restart is run again for main's newest landed row."""
        newest = await self.store.landed(repo=repo.name, limit=1)
        if newest and newest[0].main_status == "pending":
            self._start_post_land(repo, newest[0])

    def _start_post_land(self, repo: Repo, landed: Landed) -> None:
        task = asyncio.create_task(self.post_land(repo, landed))
        self._post_land.add(task)
        task.add_done_callback(self._post_land.discard)

    async def post_land(self, repo: Repo, landed: Landed) -> None:
        """The team check on main's new head (the seeds' "grader on main"), recorded on the landed row.

        When main moved to exactly the commit whose passing run landed it (same command), that run is the
        check: it is recorded without running it again, which could only measure flakiness (``post_land_rerun``
        runs it anyway). A flaky landing, or a command changed since, gets its own run.

        Checks are coalesced: a newer head's check cancels the older ones that have not started yet (their rows
        say ``superseded``: main moved on, and its newer head's row carries the status). The database going away
        meanwhile is waited out: the check is asked for again once it is back (found by the outage drill, where
        the task died with its row left ``pending``)."""
        while True:
            try:
                await self._post_land_once(repo, landed)
                return
            except Unavailable as e:
                log.warning("post-land check of %s at %s interrupted, will retry: %s", repo.name,
                            self._head_of(landed)[:12], e.message)
                await asyncio.sleep(self.poll)

    @staticmethod
    def _head_of(landed: Landed) -> str:
        return landed.main_sha or landed.merged_sha

    def _covered(self, repo: Repo, landed: Landed) -> Result | None:
        """The landing's own passing run on main's new head, when it is the post-land check's answer already."""
        if self.post_land_rerun or landed.verifier_result != "pass" or landed.verifier_command != repo.verifier_command:
            return None
        return Result(self._head_of(landed), landed.tree_sha if landed.batch_size == 1 else "",
                      landed.verifier_command, "pass", 0, landed.duration_ms,
                      "the run that landed this commit passed on it", "", 0, landed.log_digest)

    async def _post_land_once(self, repo: Repo, landed: Landed) -> None:
        sha = self._head_of(landed)
        await self.store.cancel_older_post_land(repo.name, landed.id)  # main's newer head answers for them
        result = self._covered(repo, landed)
        if result is None:
            job_id = await self.start_check(repo, sha, "post_land", landed_id=landed.id)
            done = await self.store.wait_job(job_id, timeout=repo.verifier_timeout_s * 3 + self.slack)
            if done.status == "cancelled":
                await self.store.set_main_status(landed_id=landed.id, status="superseded")
                return
            result = self._result(repo, sha, done)
        await self.store.set_main_status(landed_id=landed.id, status=result.outcome)
        current = await self.store.get_repo(repo.name)
        if result.passed and current.red_since:
            await self.store.set_red(repo=repo.name, sha=None, reason=None)
            await self.store.announce(author_id=None, body=f"[{repo.name}] {repo.target_branch} is green again at "
                                      f"{sha[:12]}; landing resumed.")
            self.poke()
        elif not result.passed:
            await self.red_main(current, sha, f"the post-land check gave {result.outcome}")

    async def land(self, repo: Repo, cand: Candidate, path: Path, main: str, merge: git.Merge,
                   result: Result, runs: dict[str, Any]) -> None:
        assert merge.sha is not None and merge.tree is not None
        ok, why = await self.store.candidate_fence(cand)  # a newer push during verification wins
        if ok:
            moved, why = await self._moved_branch(repo, path, [cand])
            ok = moved is None
        if not ok:
            await self.store.finish_candidate(cand.id, "superseded", why, base_sha=main, merged_sha=merge.sha,
                                              verifier=result.as_json())
            return
        evidence = {"subtask_id": cand.subtask_id, "claim_version": cand.claim_version, "owner_id": cand.owner_id,
                    "candidate_sha": cand.sha, "merge_kind": merge.kind,
                    "verifier": {**result.as_json(), **({"runs": runs} if runs else {})}}
        intent = await self.store.begin_landing(cand=cand, target_ref=repo.target_ref, old_sha=main,
                                                new_sha=merge.sha, tree_sha=merge.tree, evidence=evidence)
        why = f"mergebot: land subtask {cand.subtask_id} v{cand.claim_version} (candidate {cand.id})"
        landed = await self._move_and_record(repo, path, intent, why)
        if landed is None:
            return
        log.info("landed subtask %s at %s", cand.subtask_id, landed.merged_sha)
        self._after_landing(repo, landed)

    async def _moved_branch(self, repo: Repo, path: Path, cands: list[Candidate]) -> tuple[Candidate | None, str]:
        """The first candidate whose branch no longer points at its commit, and why; (None, "") if none.

        A push whose post-receive step never reached a bot (its git process finished after the bot was killed,
        and after the new one reconciled) moves the branch with no candidate. The idle sweep would queue it, but
        only after this older candidate had landed and the subtask had moved on, losing the push. Found here,
        the sweep queues it now (superseding this candidate, as an announced newer push would). Our own remote
        only: a forge repository's branches are the forge's, and its mirror follows them lazily."""
        if repo.forge:
            return None, ""
        bare = await asyncio.to_thread(git.open_repo, path)
        moved = [(c, tip) for c in cands if (tip := git.head_of(bare, c.ref)) is not None and tip != c.sha]
        if not moved:
            return None, ""
        await enqueue_orphans(self.store, path, repo, refs={c.ref for c, _ in moved})
        cand, tip = moved[0]
        return cand, (f"a newer push of subtask {cand.subtask_id} ({tip[:12]}) reached {cand.ref} without being "
                      "announced to the queue (the bot restarted during it); it is queued instead")

    async def land_batch(self, repo: Repo, unit: list[Speculation], path: Path, main: str, result: Result) -> None:
        """Land several candidates verified together: one intent, one move of main to the last one's merge
        (the commit the run passed on), and one landed row per candidate naming its own merge commit on main's
        first-parent chain, the commit main moved to and the run that covered it."""
        moved, moved_why = await self._moved_branch(repo, path, [s.cand for s in unit])
        for slot in unit:  # all of them or none: the verified commit carries every one of them
            ok, why = await self.store.candidate_fence(slot.cand)
            if ok and slot.cand is moved:
                ok, why = False, moved_why
            if not ok:
                await self.store.finish_candidate(slot.cand.id, "superseded", why)
                for other in unit:
                    if other is not slot:
                        await self.store.finish_candidate(other.cand.id, "queued", "a candidate landing with it "
                                                          "was withdrawn; verified again without it")
                return
        last = unit[-1]
        assert last.merge.sha is not None and last.merge.tree is not None
        members = [{"candidate_id": s.cand.id, "subtask_id": s.cand.subtask_id, "claim_version": s.cand.claim_version,
                    "owner_id": s.cand.owner_id, "candidate_sha": s.cand.sha, "base_sha": s.base,
                    "merged_sha": s.merge.sha, "tree_sha": s.merge.tree, "merge_kind": s.merge.kind} for s in unit]
        evidence = {"subtask_id": last.cand.subtask_id, "claim_version": last.cand.claim_version,
                    "owner_id": last.cand.owner_id, "candidate_sha": last.cand.sha, "merge_kind": last.merge.kind,
                    "verifier": result.as_json()}
        intent = await self.store.begin_landing(cand=last.cand, target_ref=repo.target_ref, old_sha=main,
                                                new_sha=last.merge.sha, tree_sha=last.merge.tree, evidence=evidence,
                                                batch=members)
        ids = ", ".join(str(s.cand.subtask_id) for s in unit)
        landed = await self._move_and_record(repo, path, intent, f"mergebot: land subtasks {ids} (one verified run)")
        if landed is None:
            return
        log.info("landed subtasks %s together at %s", ids, last.merge.sha)
        self._after_landing(repo, landed)

    async def _move_and_record(self, repo: Repo, path: Path, intent: Intent, why: str) -> Landed | None:
        """Move main from the intent's old commit to its new one, then record the landing; None if main moved
        under it (the intent is rolled back) or no subtask could take the landing (recorded as a finding)."""
        crash_point("after_intent")
        if repo.forge:
            moved = await self._move_forge(repo, path, intent.old_sha, intent.new_sha)
        else:
            moved = await asyncio.to_thread(
                lambda: git.cas(git.open_repo(path), repo.target_ref, intent.old_sha, intent.new_sha, why))
        if not moved:
            await self.store.roll_back(intent, f"{repo.target_branch} moved during landing; retrying")
            return None
        crash_point("after_cas")
        try:
            landed, released = await self.store.finish_landing(intent)
        except ClaimSuperseded as e:
            # Fenced at every step before this; reaching here means the subtask changed under a moving main.
            await self.store.abandon_intent(intent, e.message)
            await self.store.add_finding(repo=repo.name, kind="landed_without_claim",
                                         detail={"sha": intent.new_sha, "why": e.message})
            return None
        if released:
            log.info("released %s", released)
        return landed

    def _after_landing(self, repo: Repo, landed: Landed) -> None:
        crash_point("after_commit")
        self._start_post_land(repo, landed)

    async def _move_forge(self, repo: Repo, path: Path, main: str, new: str) -> bool:
        """Move the forge's branch from ``main`` to ``new`` (expected-old-value guard), then follow it.

        Once the forge took the push, the landing stands whatever the forge's branch does next. When the push's
        outcome is unknown (the connection broke), the forge is asked; if it cannot say, the error propagates,
        the intent stays pending, and the reconciler decides from the forge's branch once it answers. A push the
        forge refuses for good (branch protection) pauses the repository for an operator.
        """
        remote = _remote(repo)
        try:
            pushed = await asyncio.to_thread(mirror.push_lease, path, remote, repo.target_branch, main, new)
        except mirror.ForgeRefused as e:
            await self.store.set_paused(repo=repo.name, paused=True, reason=e.message)
            await self.store.announce(author_id=None, body=f"[{repo.name}] landing paused: {e.message}. Let the "
                                      f"bot push to {repo.target_branch}, then `mergebot repo resume {repo.name}`.")
            return False
        except mirror.ForgeUnavailable as e:
            log.warning("push to the forge for %s ended unclear (%s); asking the forge", repo.name, e)
            head = await asyncio.to_thread(mirror.sync_target, path, remote, repo.target_branch)
            pushed = head == new or await asyncio.to_thread(
                lambda: git.is_ancestor(git.open_repo(path), new, head))
        if not pushed:
            return False
        crash_point("after_forge_push")
        with contextlib.suppress(MergebotError):  # the mirror follows on the next pass if not now
            await asyncio.to_thread(mirror.sync_target, path, remote, repo.target_branch)
        return True

    async def reject(self, cand: Candidate, reason: str, *, base_sha: str | None, merged_sha: str | None = None,
                     verifier: dict[str, Any] | None = None) -> None:
        # The subtask goes back to its owner first: whoever sees the candidate rejected finds it running again
        # (a crash in between leaves the candidate mid-flight; the reconciler requeues it and the fence drops it).
        with contextlib.suppress(ClaimSuperseded):  # the subtask moved on (reclaimed, newer push): nothing to hand
            await self.store.reject(handle=Handle(cand.subtask_id, cand.claim_version), reason=reason, sha=cand.sha)
        await self.store.finish_candidate(cand.id, "rejected", reason, base_sha=base_sha, merged_sha=merged_sha,
                                          verifier=verifier)
        await self.store.log_event(actor_id=None, kind="candidate_rejected", subtask_id=cand.subtask_id,
                                   claim_version=cand.claim_version,
                                   detail={"candidate": cand.id, "sha": cand.sha, "reason": reason[:2000]})
