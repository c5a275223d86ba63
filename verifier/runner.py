"""Run a repository's check on one exact commit and return the evidence.

``run_check(repo_path, commit_sha, command, timeout, *, slot=None, sandbox="bwrap", ...)`` is the whole
verifier step, in this order:

1. **Materialize** the commit's tree in a checkout the verifier owns: the caller's ``slot`` directory (reused
   between runs, one per worker slot) or, with ``slot=None``, a temporary one made fresh and deleted after.
   ``repo_path`` is any git repository that contains the commit; the slot borrows its objects
   (``verifier.checkout`` has the layout and the rules).
2. **Check the tree before the run**: the checkout must be exactly the commit's tree (and nothing else) or
   the result is an ``error`` and the command never runs.
3. **Run** ``/bin/sh -c command`` in the checkout, sandboxed by bubblewrap (``sandbox="bwrap"``: when it is not
   usable here the run is refused as an ``error`` that says how to install it; ``"auto"`` falls back to no
   sandbox, for tools and benchmarks) or plainly (``"none"``, only when the operator says so), always with a
   wall-clock ``timeout``, a process limit ``max_procs``, memory limits ``memory_mb``, a disk limit
   ``disk_limit_mb`` on everything it writes, a CPU weight below the server's and a scrubbed environment: only
   ``PASS_ENV`` passes (with the interpreter's own directory first on ``PATH``, so ``python`` is the verifier's),
   plus ``HOME`` and ``TMPDIR`` in the run's private temporary directory and ``CI=true``; the bot's own settings
   (``MERGEBOT_*``), tokens and database URLs never reach a check (``verifier.sandbox`` has what each sandbox
   enforces, ``verifier.view`` what a sandboxed check sees, ``verifier.limits`` and ``verifier.disk`` how the
   limits are enforced).
4. **Check the tree after the run**: if the check changed a tracked file (content, type, executable bit,
   deletion), the outcome is ``error`` with "the check modified tracked files: ..." at the top of the log,
   never a pass, and the slot is recreated before its next use. Files the check creates are normal (build
   output, ``__pycache__``, ``.pytest_cache``) and are thrown away before the next run.
5. **Record**: the outcome (``pass`` for exit 0, ``fail`` otherwise — 128+N for death by signal N —,
   ``timeout``, ``disk_limit`` or ``memory_limit`` when the run reached that limit and was ended for it, or
   ``error`` when the verifier could not vouch for the run), the log's head (16 KiB) and tail (48 KiB) with its
   full size and SHA-256 (the size and digest cover the check's own output, even when the verifier puts a note
   in front of the head), the duration of the whole step, the sandbox used and how each limit was enforced
   (``limits``). Every secret named in ``secrets`` is masked in all of it (``verifier.mask``), the digest taken
   over the masked output.

The result is about the tree it names and no other: ``tree_sha`` is the tree the checkout was proven to be.

**How pytest starts** (``plugins``; ``verifier.outcomes.start_env``): never with the checkout on ``sys.path``
(``PYTHONSAFEPATH``; our plugin puts back what ``python -m pytest`` would have put first, after the standard
library), and, when the caller names the entry-point plugins main's own run loaded, with auto-loading off and those
plugins named. A check that does not report through our plugin (``report="junit:PATH"``) starts as its command says,
under ``PYTHONSAFEPATH`` too.

**The candidate's own tests** (``own``): after a run that passed (or found no test at all), the same slot moves to
``own.commit`` and the command runs again, its pytest sessions limited to ``own.files`` (every file of a check
reported by JUnit: the whole command). That run is ``own`` on the result, a result of its own; ``overall`` is the
job's outcome: the first run's, unless it passed and the second did not.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pygit2

from verifier import cache as caches
from verifier import limits as limits_
from verifier import outcomes as outcomes_
from verifier import reports
from verifier import sandbox as sb
from verifier import supervise as sup
from verifier import view as views
from verifier.checkout import CheckoutError, Slot
from verifier.disk import RunFs
from verifier.mask import Masker
from verifier.result import Result as Result  # where every caller has imported it from
from verifier.spec import DISK_LIMIT_MB as DISK_LIMIT_MB
from verifier.spec import MEMORY_MB as MEMORY_MB
from verifier.spec import CheckSpec as CheckSpec
from verifier.spec import Own as Own
from verifier.spec import Setup as Setup

LOG_HEAD = sup.LOG_HEAD
LOG_TAIL = sup.LOG_TAIL
# Only these variables reach the check; tokens, database URLs and the bot's own settings never do.
PASS_ENV = ("PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TZ", "PYTHONHASHSEED")
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
SANDBOXES = ("auto", "bwrap", "none")
OUTCOMES = ("pass", "fail", "timeout", "error", "disk_limit", "memory_limit")
HELD_OUT_ENV = "VERIFIER_HELD_OUT"  # where a held-out run's checks are, for its command


@dataclass(frozen=True)
class Box:
    """How one run is confined: the sandbox, what its view adds or hides, its limits and the secrets its log
    must never show."""

    mode: str  # bwrap or none
    limits: sup.Limits
    hide: tuple[Path | str, ...] = ()
    paths: tuple[str, ...] = ()  # the repository's sandbox paths (read-only in the view)
    disk_limit_mb: int | None = DISK_LIMIT_MB
    mask: Masker | None = None
    bwrap: str = sb.BWRAP
    report: str = "pytest"  # where its tests' outcomes come from: our pytest plugin, or "junit:PATH"
    held_out: Path | None = None  # held-out checks, read-only at /held-out ($VERIFIER_HELD_OUT)
    plugins: tuple[str, ...] | None = None  # the entry-point plugins pytest loads, by name (None: as it finds them)
    only: tuple[str, ...] | None = None  # the files its pytest sessions collect (None: what the command says)


def run_check(repo_path: Path, commit_sha: str, spec: CheckSpec, *, slot: Path | None = None, sandbox: str = "bwrap",
              hide: Sequence[Path | str] = (), stop: sup.Stop | None = None, cache: caches.Request | None = None,
              secrets: Sequence[str] = (), bwrap: str = sb.BWRAP, held_out: Path | None = None) -> Result:
    """Materialize ``commit_sha``, run ``spec``'s command on exactly its tree under limits, and return the evidence.

    ``spec`` (``verifier.spec.CheckSpec``) is the run's own part: the command, its timeout and limits, the sandbox
    paths, the report, the setup, the plugins and the own tests. The rest is where it runs:

    ``sandbox``: ``bwrap`` (the default; if it is not usable here, the result is an ``error`` saying how to
    install it: the verifier fails closed), ``none`` (no isolation, only limits) or ``auto`` (bwrap when usable,
    else none: for benchmarks and tools, never for candidates). ``hide``: directories covered with an empty
    read-only tmpfs wherever they fall inside the sandbox's view (e.g. the bot's data directory). ``secrets``: values
    masked in everything the result holds (``verifier.mask``). ``stop``: set from another thread to kill the check
    (its outcome is then ``error``, saying so: a stopped run is no verdict). ``cache``: the repository's caches on
    this disk (``spec.cache_request``), read-only (and, for a commit on main that passes, written as the next
    generation): ``verifier.cache``. The spec's ``sandbox_paths``: more paths the check may read
    (``verifier.view``); ``disk_limit_mb``: what the run may write in all (``verifier.disk``; None: unbounded);
    ``setup``: a command run first in the same checkout (installing dependencies, building), with the network only
    when the caller allows it (a commit on main); if it fails, the check does not run and the run fails, saying so;
    ``plugins``: the entry-point plugins pytest loads (see the module's rules); ``own``: the candidate's own tests,
    run after a pass.
    """
    command, setup, own = spec.command, spec.setup, spec.own
    start = time.monotonic()
    if sandbox not in SANDBOXES:
        raise ValueError(f"sandbox must be one of {', '.join(SANDBOXES)}, not {sandbox!r}")
    mask = Masker(secrets) if secrets else None
    mode = "none" if sandbox == "none" else "bwrap"
    if mode == "bwrap":
        problem = sb.bwrap_problem(bwrap)
        if problem is not None:
            if sandbox == "bwrap":
                return _error(commit_sha, "", command, start, say_unsandboxed(problem), "bwrap")
            mode = "none"
    box = Box(mode, sup.Limits(timeout=spec.timeout_s, memory_mb=spec.memory_mb, max_procs=spec.max_procs),
              tuple(hide), spec.sandbox_paths, spec.disk_limit_mb, mask, bwrap, spec.report, held_out, spec.plugins)
    temp = Path(tempfile.mkdtemp(prefix="mb-verify-")) if slot is None else None
    try:
        owned = Slot(temp / "slot" if temp is not None else Path(slot or "."))
        with owned.locked():
            try:
                prepared = owned.prepare(repo_path, commit_sha)
            except (CheckoutError, pygit2.GitError, KeyError, ValueError, OSError) as e:
                return _error(commit_sha, "", command, start, f"could not prepare the check: {e}", mode)
            if stop is not None and stop.is_set():
                return _error(commit_sha, prepared.tree_sha, command, start, STOPPED, mode)
            use = caches.use_for(repo_path, commit_sha, cache, mode)
            result = _check(owned, prepared.tree_sha, commit_sha, command, box, start, stop,
                            cache if use is not None and use.generation != -1 else None, use, setup)
            if own is not None and (result.passed or result.found_no_tests) and not (stop and stop.is_set()):
                result = dataclasses.replace(result, own=_own(owned, repo_path, own, command, box, stop, cache,
                                                              setup).as_json())
            return (result.masked(mask) if mask else result).storable()
    finally:
        if temp is not None:
            shutil.rmtree(temp, ignore_errors=True)


def _own(slot: Slot, repo_path: Path, own: Own, command: str, box: Box, stop: sup.Stop | None,
         cache: caches.Request | None, setup: Setup | None) -> Result:
    """The candidate's own tests on the merged commit, in the same slot (moved there: only the test files differ).
    A pytest run that found none of them to run (exit 5) passes: there was nothing of its own to run."""
    start = time.monotonic()
    try:
        prepared = slot.prepare(repo_path, own.commit)
    except (CheckoutError, pygit2.GitError, KeyError, ValueError, OSError) as e:
        return _error(own.commit, "", command, start, f"could not prepare the run of the change's own tests: {e}",
                      box.mode)
    only = tuple(str(slot.tree_dir / f) for f in own.files) if box.report == "pytest" and not own.whole else None
    req = dataclasses.replace(cache, write=False) if cache is not None else None  # a candidate's: it writes none
    use = caches.use_for(repo_path, own.commit, req, box.mode)
    got = _check(slot, prepared.tree_sha, own.commit, command, dataclasses.replace(box, only=only), start, stop,
                 req if use is not None and use.generation != -1 else None, use, setup)
    return dataclasses.replace(got, outcome="pass") if got.found_no_tests else got


def say_unsandboxed(problem: str) -> str:
    """Why a check was refused without its sandbox, and what the operator does about it."""
    return (f"refused: checks run only in the bubblewrap sandbox, and it is not usable on this verifier: {problem}. "
            f"The operator can {sb.INSTALL}, or set MERGEBOT_SANDBOX=none to run checks with the whole machine "
            "in view (not for code an agent wrote)")


def _check(slot: Slot, tree_sha: str, commit_sha: str, command: str, box: Box, start: float,
           stop: sup.Stop | None = None, cache: caches.Request | None = None, use: caches.Use | None = None,
           setup: Setup | None = None) -> Result:
    clean = False  # until the after-run check says otherwise, the slot is not trusted
    lower = None
    if cache is not None and use is not None and use.generation is not None:
        found = caches.newest(cache.root, use.key, use.generation)
        lower = found[1] if found is not None and found[0] == use.generation else None
    fs = None
    mode = box.mode
    try:
        dirs = slot.run_dirs(overlay=mode == "bwrap",
                             disk_limit=box.disk_limit_mb << 20 if box.disk_limit_mb is not None else None)
        tmp, overlay, fs = dirs.tmp, dirs.overlay, dirs.fs
        uid = run_as(slot, mode)
        if uid is not None:
            slot.give_to(uid, dirs)
        if overlay is not None and lower is not None:
            overlay = dataclasses.replace(overlay, lower=lower)
        env = check_env(Path(sb.SANDBOX_TMP) if overlay is not None else tmp)
        if box.report == "pytest":
            env.update(outcomes_.start_env(box.plugins, box.only))
        if box.held_out is not None:
            env[HELD_OUT_ENV] = views.HELD_OUT if overlay is not None else str(box.held_out)
        began = time.time()
        setup_info, failed_setup = None, None
        run = functools.partial(_run, checkout=slot.tree_dir, tmp=tmp, env=env, box=box, overlay=overlay,
                                stop=stop, shm=dirs.shm, runfs=fs, uid=uid)
        if setup is not None:
            s0 = time.monotonic()
            network = setup.network and overlay is not None
            s_out = run(setup.command, network=network)
            setup_info = {"command": setup.command, "exit_code": s_out.exit_code, "timed_out": s_out.timed_out,
                          "duration_ms": _ms(s0), "network": network}
            if not s_out.started or s_out.stopped or s_out.timed_out or s_out.limit or s_out.exit_code != 0:
                failed_setup = s_out
            elif overlay is not None:  # the check mounts the same upper layer again: a fresh work dir for it
                shutil.rmtree(overlay.work)  # (a "volatile" overlay's work dir refuses a second mount)
                overlay.work.mkdir()
        collected = outcomes_.Collector()
        out = failed_setup or run(command, collect=collected if box.report == "pytest" else None)
        tests = _tests(box, collected, overlay, slot) if failed_setup is None and out.started else None
        junit = None
        if failed_setup is None and out.started and out.exit_code not in (0, None):  # the reports die with the run
            written = reports.candidate_reports(overlay.upper) if overlay is not None else [
                p for p in reports.candidate_reports(slot.tree_dir) if p.stat().st_mtime >= began]
            junit = reports.failing_in_junit(written)
        if not out.started:
            clean = overlay is not None  # nothing ran; with the overlay, tree/ was never even writable
            return _error(commit_sha, tree_sha, command, start, out.setup_error, mode)
        changed = (slot.changed_in_overlay(tree_sha, overlay.upper) if overlay is not None
                   else slot.changed_in_place(tree_sha))
        clean = not changed
        if (cache is not None and use is not None and cache.write and overlay is not None and not changed
                and not out.stopped and not out.timed_out and not out.limit and out.exit_code == 0):
            try:  # a commit on main that passed: what it left at the cache paths is the next generation
                wrote = caches.harvest(overlay.upper, lower, cache.paths, cache.root, use.key, commit_sha)
                use = dataclasses.replace(use, wrote=wrote)
            except OSError as e:  # never a failure of the check: the next run is a miss
                use = dataclasses.replace(use, note=f"{use.note}; writing the next generation failed: {e}")
    except (CheckoutError, pygit2.GitError, KeyError, ValueError, OSError) as e:
        return _error(commit_sha, tree_sha, command, start, f"the check could not be run or verified: {e}", mode)
    finally:
        try:
            slot.end_run(clean=clean, fs=fs)
        except OSError:
            slot.mark(clean=False)
    head = bytes(out.log.head).decode("utf-8", "replace")
    if changed:
        outcome = "error"
        head = (f"the check modified tracked files: {_listing(changed)}\n"
                "(a run that changes the tree it was asked about cannot pass; the slot is recreated before its "
                "next use)\n--- the check's output ---\n" + head)
    elif out.stopped:
        outcome = "error"
        head = f"{STOPPED}\n--- the check's output until then ---\n" + head
    elif out.limit:
        outcome = out.limit
        head = f"{_say_limit(out.limit, box, fs)}\n--- the check's output until then ---\n" + head
    elif failed_setup is not None:
        outcome = "timeout" if out.timed_out else "fail"
        how = "timed out" if out.timed_out else f"exit {out.exit_code}"
        head = (f"the setup step `{setup.command if setup else ''}` failed ({how}): the check did not run\n"
                "--- the setup's output ---\n" + head)
    elif out.timed_out:
        outcome = "timeout"
    else:
        outcome = "pass" if out.exit_code == 0 else "fail"
    tail = out.log.tail.decode("utf-8", "replace")
    # A log shorter than its head has no tail: pytest's summary is then at the head's end.
    failing, source = (junit, "junit") if junit is not None else (reports.failing_in_log(tail or head), "log")
    return Result(commit_sha, tree_sha, command, outcome, out.exit_code, _ms(start), head, tail, out.log.size,
                  out.log.digest, mode, failing if outcome == "fail" else [],
                  source if outcome == "fail" and failing else "", use.as_json() if use is not None else None,
                  setup_info, _limits_record(out, box, fs), tests)


def run_as(slot: Slot, mode: str) -> int | None:
    """The unprivileged uid a sandboxed check runs as where this machine gives no pids control group (so that
    ``RLIMIT_NPROC`` holds), else None (root without capabilities, inside its groups)."""
    if mode != "bwrap" or os.geteuid() != 0 or limits_.machine().has("pids") or not os.path.exists(sb.SETPRIV):
        return None
    return limits_.run_uid(str(slot.root))


def _say_limit(limit: str, box: Box, fs: RunFs | None) -> str:
    if limit == "disk_limit":
        return (f"the check reached its disk limit: it wrote {box.disk_limit_mb} MiB (its checkout's changes, /tmp "
                "and /dev/shm together) and was ended")
    return (f"the check reached its memory limit: the kernel killed a process of it for using more than "
            f"{box.limits.memory_mb} MiB resident, and the run was ended")


def _tests(box: Box, collected: outcomes_.Collector, overlay: sb.Overlay | None, slot: Slot) -> dict[str, Any]:
    """The run's per-test outcomes: what the plugin streamed, or the JUnit report the check left (in the overlay's
    upper layer: what it wrote; without the sandbox, in the checkout)."""
    if box.report == "pytest":
        return collected.outcomes(slot.tree_dir).record()
    path = outcomes_.junit_path(box.report)
    if path is None:
        return outcomes_.Outcomes(problem=f"the report {box.report!r} is not junit:PATH inside the checkout").record()
    where = (overlay.upper if overlay is not None else slot.tree_dir) / path
    if not where.exists():
        return outcomes_.Outcomes(problem=f"the check left no report at {path}").record()
    return outcomes_.from_junit(where).record()


def _limits_record(out: sup.Outcome, box: Box, fs: RunFs | None) -> dict[str, Any]:
    """How the run was limited (``limits`` on the result): what was enforced and how, the bounds and the peaks."""
    record: dict[str, Any] = {"enforced": str(out.enforced), "timeout_s": box.limits.timeout,
                              "memory_mb": box.limits.memory_mb, "max_procs": box.limits.max_procs,
                              "disk_limit_mb": box.disk_limit_mb}
    if fs is not None:
        record["disk_peak_bytes"] = fs.peak
        if fs.kind != "tmpfs":
            record["disk_note"] = fs.note
    if out.memory_peak is not None:
        record["memory_peak_bytes"] = out.memory_peak
    return record


def _run(command: str, *, checkout: Path, tmp: Path, env: dict[str, str], box: Box, overlay: sb.Overlay | None,
         stop: sup.Stop | None = None, network: bool = False, shm: Path | None = None,
         runfs: RunFs | None = None, uid: int | None = None,
         collect: outcomes_.Collector | None = None) -> sup.Outcome:
    """The command itself (its own function so that benchmarks can time it). The plugin's directory is part of the
    view, read-only, so that a pytest inside the sandbox can load it."""
    return sb.run_command(command, checkout=checkout, tmp=tmp, env=env, limits=box.limits, overlay=overlay,
                          hide=box.hide, stop=stop, network=network, extra=(*box.paths, str(outcomes_.PLUGIN_DIR)),
                          shm=shm, runfs=runfs, mask=box.mask, bwrap=box.bwrap, uid=uid, collect=collect,
                          held_out=box.held_out)


STOPPED = "stopped: the run was cancelled (its result is no longer wanted), so this is no verdict"


def check_env(tmp: Path) -> dict[str, str]:
    """The whole environment of a check: ``PASS_ENV`` (``PATH`` with the interpreter's directory first), a home and
    temporary directory of its own, and how Python starts: no checkout directory on ``sys.path`` at start
    (``PYTHONSAFEPATH``), no byte code written."""
    env = {k: os.environ[k] for k in PASS_ENV if k in os.environ}
    env.setdefault("PATH", DEFAULT_PATH)
    own = os.path.dirname(sys.executable)  # `python` in a check is the verifier's own interpreter
    if own:
        env["PATH"] = os.pathsep.join([own, *(p for p in env["PATH"].split(os.pathsep) if p != own)])
    # Byte code in the checkout (a committed __pycache__ would run instead of its source, and pytest keeps its
    # rewritten tests there) is refused at push (``verifier.startup``); PYTHONPYCACHEPREFIX would keep the checkout's
    # out too, but also every installed package's, and the interpreter would compile them all again on every run
    # (0.3 s -> 0.95 s a run of a small suite).
    env.update(HOME=str(tmp / "home"), TMPDIR=str(tmp), CI="true", PYTHONDONTWRITEBYTECODE="1", PYTHONSAFEPATH="1")
    return env


def _listing(paths: list[str], limit: int = 20) -> str:
    shown = ", ".join(paths[:limit])
    return shown + (f" (and {len(paths) - limit} more)" if len(paths) > limit else "")


def _ms(start: float) -> int:
    return int((time.monotonic() - start) * 1000)


def _error(commit_sha: str, tree_sha: str, command: str, start: float, message: str, sandbox: str = "none") -> Result:
    digest = hashlib.sha256(message.encode()).hexdigest()
    return Result(commit_sha, tree_sha, command, "error", None, _ms(start), message, "", len(message.encode()),
                  digest, sandbox)
