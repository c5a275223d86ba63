"""The landing executor: the one engine of every queue, up to W candidates verified at once, each on top of the
ones ahead of it. The serial queue is this window one wide with batches of one (MERGEBOT_SPECULATION_WINDOW=1,
MERGEBOT_BATCH_SIZE=1): one candidate at a time.

Per repository it keeps a chain of merges main + c1 + ... + ck, with runs in flight on up to W of them, each
covering the batch of slots ahead of it. ``mergebot.landing.window.planner`` decides from the slots' state; this module
does what it says:
  * land  — a passing run lands every slot it covers by one move of main to exactly the commit it passed on;
  * cut   — a failing or withdrawn slot cuts everything built on it (their runs are cancelled, their candidates
            go back to the queue); a failing batch is bisected with checkpoints, on every free worker at once;
  * judge — a candidate failing alone is judged apart (retry, main's status: ``alone.verify``) while the window
            refills without it — only candidates touching the same paths wait for that verdict, and a candidate
            that does not apply on top of the slots ahead is re-planned after them (lanes); in a serial window it
            is judged in its place (``alone``), and landed on its passing run;
  * alone — while main is red (planner rule 0) only a fix lands: whatever the window holds is re-planned, and the
            next candidate is merged onto main and judged against main itself, one at a time (``alone``);
  * leave out — in a risk-aware queue, a failed batch's likeliest culprit leaves the chain (a ``Suspect``) and the
            rest gets a run of its own while the window fills on behind it; the suspect is judged on its failed run
            once the rest lands (it then sits on that very tree), or re-planned when the rest fails too. With no
            clear culprit the whole failed batch leaves the chain and each candidate is judged on main alone
            (``mergebot.landing.window.apart``), while the window fills on with the queue. Batches
            grow while they stay likely to pass (``planner.pass_threshold``), and a likely failure runs alone;
  * wait  — for any run of the window (``checkpoints`` reads results), or with room for a run, a push (``_wait``);
            meanwhile the next candidate is merged onto the chain's tail (staged, so a freed run starts without that
            merge) and the queue is tried on main (``sweep``: one that conflicts with main is rejected now).
A candidate that does not apply on the chain's tail is tried on main: rejected if it does not apply there either,
else re-planned after the slots ahead. A newer push, a reclaim or a moved main cuts the window from there. The
width (``planner``) grows by one per landing, halves on a failure, never below the deepest slot likelier to land.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from mergebot import messages as say
from mergebot.git import repo as git
from mergebot.landing.context import Context, crash_point
from mergebot.landing.judge import evidence
from mergebot.landing.judge import step as judging
from mergebot.landing.main import land as landing
from mergebot.landing.main import postland
from mergebot.landing.main.land import Slot
from mergebot.landing.target import Target, target_for
from mergebot.landing.window import alone, apart, checkpoints, planner, sweep
from mergebot.landing.window.chain import Speculation, Suspect, Window, policy
from mergebot.models import Candidate, Repo

log = logging.getLogger(__name__)


class Speculator:
    def __init__(self, ctx: Context, *, width: int, batch: int = 1,
                 limits: Callable[[Repo], tuple[int, int]] | None = None) -> None:
        self.ctx = ctx
        self.width = width  # the widest window (the server's)
        self.batch = batch  # the largest batch one run may cover (the server's)
        # a repository's widest window and largest batch: its queue rules (``LandingQueue.rules``), else the server's
        self.limits = limits or (lambda _: (self.width, self.batch))
        self.windows: dict[str, Window] = {}

    def drop(self, repo: str | None = None) -> None:
        """Forget one repository's window, or every window (None)."""
        for name in [repo] if repo is not None else list(self.windows):
            window = self.windows.pop(name, None)
            if window is not None:
                window.drop()

    def serial(self, repo: Repo) -> bool:
        """One wide with batches of one (the repository's queue rules, else the server's): the serial queue, one
        candidate at a time (a failed head is judged in its place, not apart while the window refills)."""
        return self.limits(repo) == (1, 1)

    def window_of(self, repo: Repo) -> Window:
        """The repository's window, its ceiling the widest its queue rules allow now (they may have changed)."""
        window = self.windows.setdefault(repo.name, Window(width=(ceiling := self.limits(repo)[0])))
        window.ceiling, window.width = ceiling, min(window.width, ceiling)
        return window

    async def step(self, repo: Repo) -> bool:
        """Fill the window, then land, cut, bisect, judge or wait, as the planner decides (while main is red: one
        candidate judged alone). True when something happened."""
        window = self.window_of(repo)
        if planner.decide(window.plan(repo.risk_aware), red=bool(repo.red_since)).action == "alone":
            return await self.alone(repo) is not None  # rule 0: main is red, only a fix lands, judged against main
        target = target_for(self.ctx, repo)
        main = await target.head()
        if window.slots and window.slots[0].base != main:  # main moved under the speculation
            await self.cut(window, 0, say.on_branch(say.MOVED_UNDER_SPECULATION, repo.target_branch))
        await self.fill(repo, window, target, main)
        if not window.slots:
            return False
        await checkpoints.collect(self.ctx, repo, window)
        if window.suspects:  # a suspect whose rest failed, or was cut, goes back to the queue
            await self._suspects_after(repo, window, target, set(), main)
        pending = [s.held_job_id or s.job_id for s in window.slots if s.job_id is not None and s.result is None]
        free = max(0 if pending else 1, window.width - len(pending))  # runs to spare for a bisection
        sizing = planner.Sizing(window.width, window.ceiling, window.fail_rate)
        decision = planner.decide(window.plan(repo.risk_aware), free=free, serial=self.serial(repo), sizing=sizing)
        if decision.width is not None and decision.action != "land":  # a landing resizes once it is done
            window.width = decision.width
        if decision.action == "alone":  # a serial window's failed head, judged in its place
            return await self.alone(repo, main) is not None
        if decision.action == "wait":
            if not pending:
                return False
            await self.stage(repo, window, target, main)
            await sweep.sweep(self.ctx.db, repo, window, target, main)
            await self._wait(window, pending)
            return True
        if decision.action == "checkpoint":  # a tail left uncovered by a cut, or bisecting a failed batch
            for index in (decision.index, *decision.more):
                await checkpoints.start(self.ctx, repo, window, window.slots[index])
            return True
        if decision.action == "cut":
            await self.cut(window, decision.index, say.AHEAD_FAILED_OR_WITHDRAWN)
            return True
        if decision.action == "land":
            await self._land(repo, window, target, main, decision, sizing)
            return True
        if decision.action == "leave_out":
            await self._leave_out(repo, window, target, main, decision)
            return True
        if decision.action == "apart":  # no clear culprit: each candidate of the failed stretch judged on main alone
            stretch, window.slots = window.slots[decision.index:], window.slots[:decision.index]
            await apart.stretch(self.ctx, repo, window, target, stretch, main)
            return True
        # judge_head: the head failed alone; everything behind it was built on it. It is judged apart (lanes): the
        # window refills at once without it, and only candidates touching the same paths wait for the verdict.
        head = window.slots[0]
        await self.cut(window, 1, say.AHEAD_FAILED)
        window.slots.pop(0)
        apart.start(self.ctx, repo, window, head, main)
        return True

    async def _wait(self, window: Window, pending: list[int]) -> None:
        """Until one of the window's runs ends, or, with room for another run (the queue ran dry), a poke (a push,
        a verdict apart, a resume): a push is taken now, not when a run ends while verifiers stand idle."""
        room = not window.failing() and sum(s.checkpoint for s in window.slots) < window.width
        wake = self.ctx.wake if room else None
        await self.ctx.db.jobs.wait_any(pending, timeout=self.ctx.poll, stop=wake)
        if wake is not None:  # heard (the step says it did something, so the next pass follows at once)
            wake.clear()

    async def alone(self, repo: Repo, main: str | None = None) -> Candidate | None:
        """Planner: ``alone``. One candidate judged against main itself, as the whole step
        (``mergebot.landing.window.alone``: retried, compared with main, then landed, rejected or parked): a serial
        window's failed head in its place, or, while main is red, the next queued candidate, merged onto ``main``
        (whatever the window held is re-planned). The candidate judged; None when none was queued."""
        window = self.window_of(repo)
        target = target_for(self.ctx, repo)
        main = main if main is not None else await target.head()
        ctx = self.ctx
        head = window.slots[0] if window.slots and window.slots[0].plan().failed and not repo.red_since else None
        if head is not None:
            await self.cut(window, 1, say.AHEAD_FAILED)
            window.slots.pop(0)
            cand, merge, first, judged = head.cand, head.merge, head.result, head.judging
        else:
            if window.slots or window.staged is not None:
                await self.cut(window, 0, say.on_branch(say.RED_ALONE, repo.target_branch))
            taken = await landing.take(ctx, repo)
            if taken is None:
                return None
            cand, first, judged = taken, None, None
            merged = await alone.merge(ctx, repo, target, cand, main)
            if merged is None:
                return cand
            merge = merged
            await judging.prefetch(ctx, repo, main)
        passed = await alone.verify(ctx, repo, cand, merge, main, first=first, judging=judged)
        window.fail_rate = planner.observe_failure(window.fail_rate, passed is None)
        if passed is not None:
            crash_point("after_verify")
            landed = await landing.land(ctx, target, cand, main, merge, *passed)
            if landed is not None:
                postland.start(ctx, repo, landed)
        return cand

    async def _land(self, repo: Repo, window: Window, target: Target, main: str, decision: planner.Decision,
                    sizing: planner.Sizing) -> None:
        index = decision.index
        crash_point("after_verify")  # a drill's: the unit's run passed, nothing moved yet
        unit, window.slots = window.slots[:index + 1], window.slots[index + 1:]
        for slot in unit[:-1]:  # the last slot's pass covers them: their own runs are no longer needed
            if slot.job_id is not None and slot.result is None:
                await self.ctx.db.jobs.cancel_jobs_for(slot.cand.id)
        if not window.deferred:
            # The runs this landing frees go to the next candidates before main moves: they are built on the
            # chain's tail, or on the unit's merge, which is where main is about to be. A landing that does not
            # happen cuts them with the rest below.
            try:
                await self.fill(repo, window, target, main, tail=unit[-1].merge.sha)
            except Exception:  # the unit's run passed: land it first, re-plan the rest afterwards
                log.exception("filling the window of %s before a landing failed", repo.name)
                await self.cut(window, 0, say.REPLANNED_AFTER_ERROR)
        last = unit[-1]
        assert last.result is not None
        how = policy(repo, unit, serial=self.serial(repo))
        if len(unit) == 1:
            flaky = evidence.flaky_runs(last.cand)  # it failed once and passed a retry before main moved on
            landed = await landing.land(self.ctx, target, last.cand, main, last.merge, last.result,
                                        "pass" if flaky is None else "flaky", flaky or {}, how)
        else:
            landed = await landing.land_batch(self.ctx, target, [Slot(s.cand, s.base, s.merge) for s in unit], main,
                                              last.result, how)
        window.deferred.clear()
        # the planner's width once the unit landed; a landing that did not happen counts as a failure
        window.width = decision.width if landed is not None and decision.width else planner.resize(sizing, passed=False)
        if landed is not None:
            postland.start(self.ctx, repo, landed)
            window.proven.difference_update(s.cand.id for s in unit)
            for _ in unit:
                window.fail_rate = planner.observe_failure(window.fail_rate, False)
            assert last.merge.sha is not None
            await self._suspects_after(repo, window, target, {s.cand.id for s in unit}, last.merge.sha)
        else:  # superseded at the fence, or main moved: everything behind was built on it
            await self.cut(window, 0, say.AHEAD_DID_NOT_LAND)

    async def _leave_out(self, repo: Repo, window: Window, target: Target, main: str,
                         decision: planner.Decision) -> None:
        """Planner rule 4a: the failed stretch's suspect leaves the chain (a ``Suspect``), the slots built on it are
        merged again without it (one that needed it or touches its paths waits: deferred) and the rest gets a run of
        its own (and a bisection, when ``decision.more`` asks); the window fills on behind it."""
        failing, at = window.slots[-1], decision.index
        suspect, behind, window.slots = window.slots[at], window.slots[at + 1:], window.slots[:at]
        assert failing.result is not None
        for slot in behind:
            if slot.paths & suspect.paths:  # its lane: it may not pass the suspect before the suspect's verdict
                await self._defer(window, slot.cand, say.WAITS_FOR_SAME_PATHS)
                continue
            base = window.tail(main)
            merge, paths = await self.merge(target, slot.cand, base)
            if merge.kind in ("conflict", "up-to-date"):
                await self._defer(window, slot.cand, say.WAITS_FOR_AHEAD)
                continue
            window.slots.append(Speculation(slot.cand, base, merge, paths=paths, proven=slot.proven))
        if not window.slots:  # nothing is left ahead of it: it is judged alone, in its turn
            await self._defer(window, suspect.cand, say.WAITS_FOR_AHEAD)
            return
        rest = window.slots[-1]
        if not rest.checkpoint:  # the rest of its batch, verified without it (else: the run ahead of it, as it is)
            rest.without_suspect = True
            await checkpoints.start(self.ctx, repo, window, rest)
        suspect.result, suspect.job_id = failing.result, failing.job_id
        window.suspects[suspect.cand.id] = Suspect(suspect, rest.cand.id)
        log.info("left candidate %s of subtask %s out of its failed batch (estimated failure %.2f)", suspect.cand.id,
                 suspect.cand.subtask_id, suspect.risk(window.fail_rate),
                 extra={"candidate": suspect.cand.id, "subtask": suspect.cand.subtask_id, "kind": "left_out"})

    async def _suspects_after(self, repo: Repo, window: Window, target: Target, landed: set[int],
                              main: str) -> None:
        """Each suspect whose rest landed (``landed``: candidate ids) is judged now: on its failed run when its merge
        on the new main is the tree that failed, else verified again; one whose rest failed or was cut goes back."""
        live = {s.cand.id for s in window.slots}
        for cid, sus in list(window.suspects.items()):
            if sus.rest in landed:
                window.suspects.pop(cid)
                merge, paths = await self.merge(target, sus.slot.cand, main)
                first = sus.slot.result
                judged = None
                if merge.kind not in ("conflict", "up-to-date") and first is not None and merge.sha is not None:
                    judged = await judging.prepare(self.ctx, repo, main,
                                                   [judging.Member(sus.slot.cand, main, merge.sha)])
                if judged is None or first is None or judged.tree != first.run.tree_sha:  # not the tree that failed
                    await self._defer(window, sus.slot.cand, say.WAITS_FOR_AHEAD)
                    continue
                head = Speculation(sus.slot.cand, main, merge, job_id=sus.slot.job_id, result=first, paths=paths,
                                   judging=judged)
                apart.start(self.ctx, repo, window, head, main)
            elif sus.rest not in live or any(s.cand.id == sus.rest and s.plan().failed for s in window.slots):
                window.suspects.pop(cid)
                await self.ctx.db.landing.finish_candidate(cid, "queued", say.REPLANNED_AFTER_FAILURE)
                window.deferred.discard(cid)

    async def merge(self, target: Target, cand: Candidate, base: str) -> tuple[git.Merge, frozenset[str]]:
        return await landing.merge_with_paths(self.ctx.db, target, cand, base)

    async def fill(self, repo: Repo, window: Window, target: Target, main: str, tail: str | None = None) -> None:
        """Take queued candidates onto the window's chain until it holds ``width`` runs. A candidate that does not
        apply on top of the slots ahead, or that touches what a candidate being judged apart touches, is
        re-planned after them instead (lanes: the ones behind it go on).

        ``tail``: where an empty chain starts instead of ``main`` (the merge of a unit about to land). What does
        not apply there waits too: it is judged against main once main has moved, never before."""
        db = self.ctx.db
        width, batch = self.limits(repo)  # the repository's queue rules, else the server's
        rule = planner.batching(window.fail_rate, batch, width, repo.risk_aware)
        if not window.slots and not window.aside:  # nothing ahead to wait for: a deferral has nothing to end it
            window.deferred.clear()
        skip = set(window.deferred) | set(window.aside) | set(window.suspects)
        while not window.failing() and sum(s.checkpoint for s in window.slots) < window.width:
            staged, window.staged = window.staged, None
            cand = staged.cand if staged is not None else await landing.take(self.ctx, repo, exclude=sorted(skip))
            if cand is None:
                break
            if staged is not None:  # taken a while ago: it may have been superseded since
                why = await landing.fenced(db, cand)
                if why is not None:
                    await db.landing.finish_candidate(cand.id, "superseded", why)
                    continue
            base = window.tail(tail or main)
            if staged is not None and staged.base == base:
                merge, paths = staged.merge, staged.paths
            else:
                merge, paths = await self.merge(target, cand, base)
            # read now, not before the awaits above: a verdict reached meanwhile has already ended its wait
            if paths & window.busy_paths():
                await self._defer(window, cand, say.WAITS_FOR_SAME_PATHS)
                skip.add(cand.id)
                continue
            if merge.kind in ("conflict", "up-to-date"):
                await self._unplaceable(repo, window, target, cand, merge, base, main)
                skip.add(cand.id)
                continue
            slot = Speculation(cand, base, merge, paths=paths, proven=cand.id in window.proven)
            if not window.slots:
                await judging.prefetch(self.ctx, repo, base)
            if not await self._batch_with(repo, window, slot, rule):
                window.staged = slot  # the batch ahead took the last run: this one starts the next batch
                break
            window.slots.append(slot)
            if planner.closes([s.risk(window.fail_rate) for s in window.unchecked()], rule):
                await checkpoints.start(self.ctx, repo, window, slot)
        if window.slots and not window.slots[-1].checkpoint and not window.failing():
            # the queue ran dry: cover the batch as it is
            await checkpoints.start(self.ctx, repo, window, window.slots[-1])

    async def _batch_with(self, repo: Repo, window: Window, slot: Speculation, rule: planner.Batching) -> bool:
        """Whether ``slot`` may join the batch of unchecked slots at the chain's tail (``planner.joins``). If not, the
        batch is closed with a run on its last slot first; False when that run was the window's last (``slot`` then
        waits for the next fill)."""
        batch = window.unchecked()
        if planner.joins([s.risk(window.fail_rate) for s in batch], slot.risk(window.fail_rate), rule):
            return True
        await checkpoints.start(self.ctx, repo, window, batch[-1])
        return sum(s.checkpoint for s in window.slots) < window.width

    async def stage(self, repo: Repo, window: Window, target: Target, main: str) -> None:
        """While the window's runs are busy: take the next candidate and merge it onto the chain's tail, so the
        next free run starts on it without waiting for the merge. It stays out of the window (no run, nothing
        lands on it) until ``fill`` adds it, merged again if the tail has changed by then. One that does not apply
        on the tail is judged on main at once (``_unplaceable``), and the next one is taken instead."""
        if window.staged is not None or window.failing():
            return
        while True:
            cand = await landing.take(self.ctx, repo,
                                      exclude=sorted(set(window.aside) | window.deferred | set(window.suspects)))
            if cand is None:
                return
            base = window.tail(main)
            merge, paths = await self.merge(target, cand, base)
            if merge.kind not in ("conflict", "up-to-date"):
                window.staged = Speculation(cand, base, merge, paths=paths)
                return
            await self._unplaceable(repo, window, target, cand, merge, base, main)

    async def _unplaceable(self, repo: Repo, window: Window, target: Target, cand: Candidate, merge: git.Merge,
                           base: str, main: str) -> None:
        """A taken candidate that conflicts with ``base`` (or is already in it). On the chain's tail, it is tried on
        main at once: rejected if it does not apply there either, else it waits for the slots ahead of it. A failure
        on the way puts it back in the queue before it propagates (it is in no slot a cut would requeue)."""
        try:
            if base != main:
                on_main = await asyncio.to_thread(lambda: git.merge_onto(git.open_repo(target.path), main, cand.sha,
                                                                         "", commit=False,
                                                                         union=landing.union_of(repo)))
                if on_main.kind not in ("conflict", "up-to-date"):
                    await self._defer(window, cand, say.WAITS_FOR_AHEAD)
                    return
                merge = on_main
            await landing.reject_unmergeable(self.ctx.db, target, repo, cand, merge, main)
        except Exception:
            with contextlib.suppress(Exception):
                await self.ctx.db.landing.finish_candidate(cand.id, "queued", say.REPLANNED_AFTER_ERROR)
            raise

    async def _defer(self, window: Window, cand: Candidate, why: str) -> None:
        """Back to the queue, re-planned after the slots ahead (``deferred`` clears when one lands or is cut). Added
        before the write: a clear during it must clear this one too, or nothing would ever take it again."""
        window.deferred.add(cand.id)
        await self.ctx.db.landing.finish_candidate(cand.id, "queued", why)
        log.info("deferred candidate %s of subtask %s: %s", cand.id, cand.subtask_id, why,
                 extra={"candidate": cand.id, "subtask": cand.subtask_id, "kind": "deferred"})

    async def cut(self, window: Window, index: int, reason: str) -> None:
        """Cancel the runs of slots ``index`` and after and put their candidates back in the queue."""
        db = self.ctx.db
        cut, window.slots = window.slots[index:], window.slots[:index]
        window.deferred.clear()
        if index == 0 and window.staged is not None:  # everything is re-planned: the staged one goes back too
            cut.append(window.staged)
            window.staged = None
        for slot in cut:
            await db.jobs.cancel_jobs_for(slot.cand.id)
            why = await landing.fenced(db, slot.cand)
            await db.landing.finish_candidate(slot.cand.id, "queued" if why is None else "superseded",
                                              reason if why is None else why)
