"""The bot's side of the landing benchmark (``python -m bench.landing``): the landing queue instrumented stage by stage
on real candidates, and its table.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pygit2

from bench.common import harness
from bench.common.measure import Steps
from bench.landing.repo import NOOP, T, fmt, header, make_commit, row, stats, touched_file
from mergebot.db.database import Database
from mergebot.db.settle import Settle
from mergebot.git import repo as gitrepo
from mergebot.landing import target as landing_target
from mergebot.landing.context import Context
from mergebot.landing.judge import runs as landing_runs
from mergebot.landing.main import land as landing_land
from mergebot.landing.main import postland
from mergebot.landing.window import alone
from mergebot.landing.window.executor import Speculator
from mergebot.models import Candidate, Repo
from mergebot.settings import Settings
from mergebot.verify import worker as worker_mod

# -- 1. the bot, in process ---------------------------------------------------------------------------------


# The stages of the serial queue, timed where they are looked up: (module, attribute, step). Each is a module
# function (or a method of the hosted target) that the executor's one-candidate step (``Speculator.alone``: take,
# merge onto main, judge alone, land) calls through its module.
STAGES = (
    (landing_land, "take", "stage.take"),
    (landing_target.Hosted, "head", "stage.read_main"),
    (alone, "merge", "stage.merge"),
    (alone, "verify", "stage.verify"),
    (landing_land, "land", "stage.land"),
    (landing_runs, "check", "job.check"),
)


class Timed:
    """The real serial queue on one repository; each stage's wall time is recorded (the stages themselves are
    not changed), and the post-land checks a landing starts can be waited for off the clock."""

    def __init__(self, store: Database, root: Path, steps: Steps) -> None:
        self.ctx = Context(store, root)
        self.executor = Speculator(self.ctx, width=1, batch=1)
        self.steps = steps
        self.post_land_ms: list[float] = []

    async def process_next(self, repo: Repo) -> Candidate | None:
        return await self.executor.alone(repo)

    def patches(self) -> Iterator[tuple[Any, str, Any]]:
        for owner, name, key in STAGES:
            yield owner, name, self.steps.coro(key, getattr(owner, name))
        check = postland.check

        async def post_land(*args: Any, **kwargs: Any) -> Any:  # off the critical path: timed apart
            t0 = time.perf_counter()
            try:
                return await check(*args, **kwargs)
            finally:
                self.post_land_ms.append((time.perf_counter() - t0) * 1000)

        yield postland, "check", post_land

    async def settle(self) -> None:
        """Wait for the post-land checks a landing started, so they never overlap the next landing."""
        for _ in range(3):
            await asyncio.sleep(0)  # let tasks created by the landing start
        if self.ctx.post_land:
            await asyncio.wait(set(self.ctx.post_land))

    async def close(self) -> None:
        for task in list(self.ctx.post_land):
            task.cancel()


DB_METHODS = (("landing", "next_candidate"), ("landing", "fences"), ("subtasks", "get_subtask"),
              ("landing", "begin_landing"), ("jobs", "enqueue_job"), ("landing", "finish_candidate"),
              ("subtasks", "reject"), ("subtasks", "log_event"))
# An intent is settled under its row's lock (``LandingStore.settling``): what the landing path does with it there,
# timed under the names the landing's own write and its roll-back had before.
SETTLE_METHODS = (("finish", "db.finish_landing"), ("roll_back", "db.roll_back"))
# Where the verify step spends its time, for whichever runner is installed: (module, attribute, step). The
# older runner checks out fresh and re-hashes the checkout into a scratch repository (materialize,
# tree_of_directory); the slot runner moves a reused checkout (Slot.prepare) and checks it after the run.
RUNNER_PARTS = (
    ("verifier.runner", "materialize", "verify.checkout"),
    ("verifier.runner", "tree_of_directory", "verify.tree_check"),
    ("verifier.checkout", "Slot.prepare", "verify.prepare"),
    ("verifier.checkout", "Slot._fresh_checkout", "verify.prepare.fresh"),
    ("verifier.checkout", "Slot._move", "verify.prepare.move"),
    ("verifier.runner", "_run", "verify.command"),
    ("verifier.checkout", "Slot.changed_in_place", "verify.after_check"),
    ("verifier.checkout", "Slot.changed_in_overlay", "verify.after_check"),
    ("verifier.checkout", "Slot.run_dirs", "verify.scratch"),
    ("verifier.checkout", "Slot.end_run", "verify.scratch"),
)
TOP_PARTS = ("verify.checkout", "verify.tree_check", "verify.prepare", "verify.command", "verify.after_check",
             "verify.scratch")  # not nested in one another: their sum is the part of run_check accounted for


def patch_points() -> Iterator[tuple[Any, str, str]]:
    """(owner, name, step) for each RUNNER_PARTS entry this installation has."""
    import importlib

    for module, attr, key in RUNNER_PARTS:
        try:
            owner: Any = importlib.import_module(module)
        except ImportError:
            continue
        *path, name = attr.split(".")
        for part in path:
            owner = getattr(owner, part, None)
        if owner is not None and callable(getattr(owner, name, None)):
            yield owner, name, key


@contextlib.contextmanager
def instrumented(queue: Timed, steps: Steps) -> Iterator[None]:
    """Time the stages, and the git, runner and database calls the queue makes, by wrapping them where they are
    looked up."""

    def merge_onto(*args: Any, **kwargs: Any) -> gitrepo.Merge:
        m = steps.sync("git.merge_onto", orig_merge)(*args, **kwargs)
        steps.facts["kind"] = m.kind
        return m

    orig_merge = gitrepo.merge_onto
    db = queue.ctx.db
    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(gitrepo, "merge_onto", merge_onto))
        stack.enter_context(mock.patch.object(gitrepo, "cas", steps.sync("git.cas", gitrepo.cas)))
        for owner, name, key in patch_points():
            stack.enter_context(mock.patch.object(owner, name, steps.sync(key, getattr(owner, name))))
        # the worker's own reference to the runner
        stack.enter_context(mock.patch.object(worker_mod, "run_check",
                                              steps.sync("verify.run_check", worker_mod.run_check)))
        for owner, name, wrapped in queue.patches():
            stack.enter_context(mock.patch.object(owner, name, wrapped))
        for part, name in DB_METHODS:
            store = getattr(db, part)
            stack.enter_context(mock.patch.object(store, name, steps.coro(f"db.{name}", getattr(store, name))))
        for name, key in SETTLE_METHODS:
            stack.enter_context(mock.patch.object(Settle, name, steps.coro(key, getattr(Settle, name))))
        yield


def start_worker(store: Database, root: Path, data_dir: Path, url: str, queue: Timed) -> asyncio.Task[Any]:
    """One verifier worker in this process, built by the same function ``mergebot serve`` uses."""
    settings = Settings()
    [worker] = worker_mod.local_workers(store.jobs, root, data_dir, url, count=1, sandbox=settings.sandbox_mode,
                                        heartbeat_every=settings.job_lease_seconds / 3, wake_on=queue.ctx.on_job)
    return asyncio.create_task(worker.run(), name="bench-verifier-worker")


async def until_done(aw: Awaitable[T], watch: asyncio.Task[Any] | None, timeout: float) -> T:
    """``aw``, unless the worker task ``watch`` dies first (then its error) or ``timeout`` passes."""
    task = asyncio.ensure_future(aw)
    waiting: set[asyncio.Future[Any]] = {task} if watch is None else {task, watch}
    done, _ = await asyncio.wait(waiting, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    if task in done:
        return task.result()
    task.cancel()
    if watch is not None and watch in done:
        raise RuntimeError(f"the verifier worker stopped: {watch.exception()!r}")
    raise RuntimeError(f"a landing took over {timeout:.0f} s")


async def bench_bot(server: harness.PgServer, tmp: Path, source: Path, files: int, landings: int,
                    after: Callable[[int], None]) -> dict[str, Any]:
    url = server.create_db("bot")
    steps = Steps()
    root = tmp / "bot-repos"
    post_rows: list[dict[str, float]] = []
    worker: asyncio.Task[Any] | None = None
    async with harness.store_on(url) as store:
        try:
            agent = await harness.add_agent(store, "bench-bot-agent")
            repo = await harness.add_bench_repo(store, root, name="bench", source=source, command=NOOP, timeout_s=60)
            path = gitrepo.bare_path(root, repo.name)
            bare = pygit2.Repository(str(path))
            mains = [gitrepo.head_of(bare, repo.target_ref) or ""]
            queue = Timed(store, root, steps)
            landed = 0
            with instrumented(queue, steps):
                worker = start_worker(store, root, tmp, url, queue)
                for i in range(landings):
                    sid = await harness.add_subtask(store, f"bench landing {i}")
                    got = await harness.claim(store, agent.id)
                    assert got is not None and got[0] == sid, "another subtask was ready"
                    base = mains[-1] if i % 2 == 0 or len(mains) < 2 else mains[-2]
                    sha = make_commit(bare, base, touched_file(i, files), f"landing {i}")
                    ref = f"refs/heads/subtasks/{sid}/v{got[1]}"
                    bare.references.create(ref, pygit2.Oid(hex=sha))
                    cand = await harness.enqueue(store, repo=repo.name, subtask_id=sid, claim_version=got[1],
                                                 owner_id=agent.id, sha=sha, ref=ref)
                    steps.current.clear()  # only process_next is measured
                    steps.facts.clear()
                    t0 = time.perf_counter()
                    taken = await until_done(queue.process_next(repo), worker, 600.0)
                    total = (time.perf_counter() - t0) * 1000
                    status, reason = await harness.candidate_outcome(store, cand)
                    head = gitrepo.head_of(pygit2.Repository(str(path)), repo.target_ref) or ""
                    ok = taken is not None and taken.id == cand and status == "landed" and head != mains[-1]
                    landed += ok
                    steps.close(total=total, landed=ok, status=status, reason=reason[:300])
                    mains.append(head)
                    await until_done(queue.settle(), worker, 600.0)  # the post-land check, if any, off the clock
                    if steps.current:
                        post_rows.append(dict(steps.current))
                    after(i)  # the naive landings due by now (not timed here)
            await queue.close()
        finally:
            if worker is not None:
                worker.cancel()
                await asyncio.gather(worker, return_exceptions=True)

    def col(name: str, kind: str | None = None) -> list[float]:
        return steps.column(name, kind)

    for r in steps.rows:
        db = sum(v for k, v in r.items() if k.startswith("db."))
        stages = sum(r.get(k, 0.0) for k in ("stage.take", "stage.read_main", "stage.merge", "stage.verify",
                                             "stage.land"))
        parts = sum(r.get(key, 0.0) for key in TOP_PARTS)
        run_check = r.get("verify.run_check", parts)
        r.update({
            "derived.db": db,
            "derived.without_verify": r["total"] - r.get("stage.verify", 0.0),
            "derived.merge_cas": r.get("git.merge_onto", 0.0) + r.get("git.cas", 0.0),
            "derived.merge_rest": r.get("stage.merge", 0.0) - r.get("git.merge_onto", 0.0),
            "derived.run_check_rest": run_check - parts,
            "derived.job_overhead": r.get("job.check", 0.0) - run_check if "job.check" in r else 0.0,
            "derived.verify_rest": r.get("stage.verify", 0.0) - r.get("job.check", run_check),
            "derived.land_rest": r.get("stage.land", 0.0) - r.get("git.cas", 0.0),
            "derived.glue": r["total"] - stages,
        })
    return {"rows": steps.rows, "landed": landed, "landings": landings, "col": col, "jobs": True,
            "post_land_ms": queue.post_land_ms, "post_rows": post_rows}


def print_bot(bot: dict[str, Any], files: int) -> None:
    col = bot["col"]
    total = col("total")
    med = statistics.median(total) if total else None
    n_ff = len(col("total", "fast-forward"))
    n_merge = len(col("total", "merge"))

    def show(label: str, name: str) -> None:
        xs = col(name)
        if any(xs):  # the share of the total only for a step every landing took
            print(row(label, xs, med if len(xs) == len(total) else None))

    how = "through a verify job and an in-process verifier worker" if bot["jobs"] else "in process"
    print(f"\n1. bot: the executor's one-candidate step (Speculator.alone), no-op check `{NOOP}` run {how} "
          f"({bot['landings']} landings: {n_ff} fast-forward, {n_merge} merge; {bot['landed']} landed)")
    if bot["landed"] < bot["landings"]:
        missed = [r for r in bot["rows"] if not r["landed"]]
        print(f"  WARNING: {len(missed)} candidate(s) did not land; the figures below are not a landing's. First: "
              f"{missed[0]['status']}: {missed[0]['reason']}")
    print(header("ms per landing"))
    print(row("total (process_next, end to end)", total, med))
    show("take: next candidate + fence (database)", "stage.take")
    show("read main (git)", "stage.read_main")
    show("merge stage", "stage.merge")
    show("  merge_onto: in-memory merge + commit (git)", "git.merge_onto")
    show("  subtask title (database) + thread hop", "derived.merge_rest")
    if bot["jobs"]:
        show("verify stage (queue.verify)", "stage.verify")
        show("  verify job, enqueue to result (queue.check)", "job.check")
        show("    run_check in the worker", "verify.run_check")
        indent = "      "
    else:
        show("verify stage: verifier.runner.run_check", "stage.verify")
        indent = "  "
    show(f"{indent}checkout of {files:,} files (materialize)", "verify.checkout")
    show(f"{indent}tree check of the checkout (tree_of_directory)", "verify.tree_check")
    show(f"{indent}prepare the slot, tree check before the run (Slot.prepare)", "verify.prepare")
    show(f"{indent}  new slot: checkout + hash every file, {len(col('verify.prepare.fresh'))} landing(s)",
         "verify.prepare.fresh")
    show(f"{indent}  reused slot: apply the diff, {len(col('verify.prepare.move'))} landing(s)",
         "verify.prepare.move")
    show(f"{indent}the command `{NOOP}` (+ log, sandbox)", "verify.command")
    show(f"{indent}tree check after the run (Slot.changed_in_*)", "verify.after_check")
    show(f"{indent}run scratch directories (Slot.run_dirs, end_run)", "verify.scratch")
    if bot["jobs"]:
        show(f"{indent}rest of run_check", "derived.run_check_rest")
        show("    job overhead: enqueue, worker poll + claim, result, notify", "derived.job_overhead")
        show("  rest of the verify stage", "derived.verify_rest")
    else:
        show("  temp dir create + delete, thread hop", "derived.verify_rest")
    show("land stage", "stage.land")
    show("  compare-and-swap of main (git)", "git.cas")
    show("  fence + intent + landed transaction (database), thread hop", "derived.land_rest")
    show("event loop glue between stages", "derived.glue")
    print("  " + "-" * 104)
    show("total without the verify stage (merge, CAS, database)", "derived.without_verify")
    show("  of which database (all queries on the landing path)", "derived.db")
    for part, name in DB_METHODS:
        show(f"    db.{part}.{name}", f"db.{name}")
    show("  of which merge_onto + compare-and-swap", "derived.merge_cas")
    for kind in ("fast-forward", "merge"):
        print(f"  {kind:<13} total median {fmt(stats(col('total', kind))['median'], 1):>7} ms, merge_onto "
              f"{fmt(stats(col('git.merge_onto', kind))['median'], 2):>6} ms, without verify "
              f"{fmt(stats(col('derived.without_verify', kind))['median'], 1):>6} ms")
    if bot["post_land_ms"]:
        runs = [r.get("verify.run_check", 0.0) for r in bot["post_rows"]]
        print(f"  post-land check of main's new head (after each landing, off its critical path; waited for "
              f"before the next):\n    median {fmt(stats(bot['post_land_ms'])['median'], 1)} ms, of which "
              f"run_check {fmt(stats(runs)['median'], 1)} ms")
