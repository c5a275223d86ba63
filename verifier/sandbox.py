"""Run one shell command under limits and capture a bounded, masked log: bubblewrap, or plainly when told.

Two ways to run, chosen by the caller (``verifier.runner`` records which one as the result's ``sandbox``):

``bwrap``
    The command runs in a bubblewrap sandbox that bwrap sets up as root, with every capability dropped and
    ``no_new_privs`` set, so the check is uid 0 without any privilege. It sees an allow-list view of the machine
    (``verifier.view``: the system and toolchain read-only, a minimal ``/etc`` and ``/dev``, its own ``/proc``
    and ``/tmp``, the repository's sandbox paths, its checkout) and nothing else. The checkout is writable
    through an overlay whose upper layer is a per-run directory: the check writes into the overlay, never into
    the slot's checkout itself, and the runner reads the upper layer afterwards to see exactly what the check
    changed (``verifier.checkout``). A cache generation (``verifier.cache``) is a second, read-only lower layer
    under the checkout's tree. The overlay is mounted in a private mount namespace (``unshare --mount``) just
    before bwrap starts, so it vanishes with the sandbox and never shows on the host. Also:

    - no network: a network namespace with only its own loopback, so neither the host's ``127.0.0.1`` nor DNS
      is reachable, nor abstract Unix sockets; a path-bound socket under a bound directory is covered;
    - its own PID, IPC and UTS namespaces, a new session (no terminal to inject into), ``--die-with-parent``.

    All of this needs root (which the verifier runs as); ``bwrap_problem()`` probes the full chain once per
    process and bubblewrap binary.

``none``
    A plain ``/bin/sh -c`` in the checkout, with the same limits, the same scrubbed environment and the same
    bounded log, but no isolation: the check can read what the verifier can, reach the network and write
    wherever the verifier can. Only an operator's explicit ``MERGEBOT_SANDBOX=none`` runs checks this way.

Limits, the same in both ways (``verifier.limits`` finds what the machine allows; each run records how each
limit was enforced, ``Enforced``):

- **time**: a wall-clock limit; at the deadline every process of the run is killed and the outcome is
  ``timeout``;
- **processes**: ``max_procs`` (the check's own shell included, plus bwrap's two processes when sandboxed) in a
  pids control group, which counts threads too and binds uid 0; where none can be made, the sandboxed check runs
  as an unprivileged uid of its own (``uid``) under ``RLIMIT_NPROC``;
- **memory**: ``RLIMIT_AS`` of ``memory_mb`` (address space) always, plus no core dumps; and, with a memory
  control group, resident memory: when the kernel kills a process of the run for it, the run ends at once as
  ``memory_limit``;
- **disk**: everything the check writes (overlay, ``/tmp``, ``/dev/shm``) is on the run's own filesystem
  (``verifier.disk``); when it is full the run ends at once as ``disk_limit``;
- **CPU**: a control group's least weight, else ``SCHED_IDLE``, else ``nice 19``: the server and PostgreSQL go
  first.

Limits are put on the child by the parent (``prlimit``, the groups' ``cgroup.procs``, its scheduling policy)
while the child waits on a gate (its stdin) before it execs anything, so no Python code runs between fork and
exec (``preexec_fn`` is not safe in a threaded process, and the runner is called from worker threads). Every
process of the run is killed when it ends (the process group, and every member of its control groups, even one
that left the group).

The log is stdout and stderr merged into one pipe and streamed into ``LogCapture``: every secret the caller
names is masked as it streams (``verifier.mask``), then the first ``LOG_HEAD`` and last ``LOG_TAIL`` bytes are
kept, the full size is counted and the SHA-256 taken over every (masked) byte; nothing is written to disk, so a
check that prints gigabytes costs time, not space.

What the sandbox does not do:

- cover Unix sockets bound after the run started under a bound directory, or bound in another network
  namespace;
- stop the check from creating user namespaces of its own (still without any way back to the host's mounts,
  network or processes, but a larger kernel surface);
- limit processes where no pids control group can be made and the check is not sandboxed (``none``), or resident
  memory without a memory group (``RLIMIT_AS`` counts reservations, so a runtime that reserves a large heap up
  front needs a larger ``memory_mb``);
- let a check that runs as its own uid write into files of a cache generation (they stay root's): it reads them;
- any of the isolation in ``none`` mode, where only the limits, the environment and the log apply.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import resource
import select
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from verifier import limits as cg
from verifier import view as views
from verifier.disk import RunFs
from verifier.mask import Masker
from verifier.outcomes import FD_ENV, Collector

log = logging.getLogger(__name__)

LOG_HEAD = 16 * 1024
LOG_TAIL = 48 * 1024
SANDBOX_TASKS = 2  # bwrap outside the PID namespace and its PID-1 reaper inside
SANDBOX_TMP = views.SANDBOX_TMP
DRAIN_SECONDS = 2.0  # how long to keep reading once every process is dead
WATCH_SECONDS = 0.2  # how often a running check's disk and memory are looked at
BWRAP = "bwrap"
SETPRIV = "/usr/bin/setpriv"  # util-linux's: switches a sandboxed check to its own uid (no pids control group)

# The child waits here until the parent has put its limits on it, then runs the rest with stdin closed.
GATE = 'read -r go && [ "$go" = go ] || exit 125; exec "$@" </dev/null'
# The same, in the private mount namespace, mounting the overlay on the checkout before it execs bwrap.
GATE_MOUNT = ('read -r go && [ "$go" = go ] || exit 125; exec </dev/null; '
              'mount -n -t overlay overlay -o "$1" "$2" || exit 126; shift 2; exec "$@"')


@dataclass(frozen=True)
class Limits:
    timeout: float
    memory_mb: int = 4096
    max_procs: int = 512


@dataclass(frozen=True)
class Overlay:
    """The upper layer and overlay work directory of one run (both empty, on the run's filesystem)."""

    upper: Path
    work: Path
    lower: Path | None = None  # a read-only layer under the checkout's tree (a cache generation, verifier.cache)


class LogCapture:
    """Head and tail of a stream of any size, its full size and SHA-256, with the given secrets masked first."""

    def __init__(self, mask: Masker | None = None) -> None:
        self.head = bytearray()
        self._tail = bytearray()
        self.size = 0
        self._digest = hashlib.sha256()
        self._mask = mask.stream() if mask else None

    def feed(self, chunk: bytes) -> None:
        self._take(self._mask.feed(chunk) if self._mask is not None else chunk)

    def end(self) -> None:
        """The stream is over: what the masking held back goes in."""
        if self._mask is not None:
            self._take(self._mask.end())

    def _take(self, chunk: bytes) -> None:
        if not chunk:
            return
        self._digest.update(chunk)
        self.size += len(chunk)
        if len(self.head) < LOG_HEAD:
            self.head += chunk[: LOG_HEAD - len(self.head)]
        self._tail += chunk[-LOG_TAIL:]
        if len(self._tail) > 2 * LOG_TAIL:
            del self._tail[:-LOG_TAIL]

    @property
    def tail(self) -> bytes:
        return bytes(self._tail[-LOG_TAIL:]) if self.size > LOG_HEAD else b""

    @property
    def digest(self) -> str:
        return self._digest.hexdigest()


@dataclass
class Outcome:
    exit_code: int | None  # None when it timed out, was stopped or never started; 128+N for death by signal N
    timed_out: bool
    started: bool  # False: the sandbox could not be set up (see setup_error and the log)
    log: LogCapture = field(default_factory=LogCapture)
    setup_error: str = ""
    stopped: bool = False  # ended by its Stop: the run is no longer wanted
    limit: str = ""  # "disk_limit" or "memory_limit": the run reached that limit (and was ended for it)
    enforced: cg.Enforced = field(default_factory=cg.Enforced)
    memory_peak: int | None = None  # bytes, from the memory group


class Stop:
    """Ends a running check from another thread (its result is no longer wanted: the run was cancelled).

    An eventfd, polled together with the check's output, so the kill comes at once, not at the next wake-up.
    Open it before the run, ``close()`` it once the run has returned (never while a thread still polls it).
    """

    def __init__(self) -> None:
        self.fd = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        self._set = False

    def set(self) -> None:
        if not self._set:
            self._set = True
            os.eventfd_write(self.fd, 1)

    def is_set(self) -> bool:
        return self._set

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def process_limit_available() -> bool:
    """Whether checks get a process limit here (a writable pids control group)."""
    return cg.machine().has("pids")


# -- bubblewrap ----------------------------------------------------------------------------------------------

_bwrap_lock = threading.Lock()
_bwrap_problems: dict[str, str | None] = {}
# Overlay options: no redirects, metacopy or index, so that the upper layer says plainly what changed;
# "volatile" (Linux 5.10+) skips syncing the upper layer, which is thrown away anyway. Dropped if refused.
_OVERLAY_OPTIONS = ["redirect_dir=off", "metacopy=off", "index=off", "xino=off", "volatile"]
INSTALL = "install bubblewrap (Debian and Ubuntu: apt-get install -y bubblewrap; Fedora: dnf install bubblewrap)"


def bwrap_problem(bwrap: str = BWRAP) -> str | None:
    """Why the bwrap sandbox cannot be used here with that binary, or None when it can (probed once per process)."""
    with _bwrap_lock:
        if bwrap not in _bwrap_problems:
            problem = _probe_bwrap(bwrap)
            if problem is not None and "volatile" in _OVERLAY_OPTIONS:
                _OVERLAY_OPTIONS.remove("volatile")  # an older kernel: try once more without it
                problem = _probe_bwrap(bwrap)
            _bwrap_problems[bwrap] = problem
            if problem is not None:
                log.warning("the bwrap sandbox is not usable here: %s", problem)
        return _bwrap_problems[bwrap]


def bwrap_usable(bwrap: str = BWRAP) -> bool:
    return bwrap_problem(bwrap) is None


def _probe_bwrap(bwrap: str) -> str | None:
    missing = [tool for tool in (bwrap, "unshare", "mount") if shutil.which(tool) is None]
    if missing:
        return f"not installed: {', '.join(missing)} ({INSTALL})"
    if os.geteuid() != 0:
        return "the bwrap sandbox needs root (it mounts the checkout's overlay and sets up bwrap as root)"
    work = Path(tempfile.mkdtemp(prefix="mb-bwrap-probe-"))
    try:
        checkout, tmp = work / "checkout", work / "tmp"
        for d in (checkout, tmp, work / "upper", work / "work"):
            d.mkdir()
        (checkout / "probe").write_text("probe\n")
        out = run_command("cat probe && echo ok > probe.out && cat probe.out", checkout=checkout, tmp=tmp,
                          env={"PATH": "/usr/bin:/bin"}, limits=Limits(timeout=30),
                          overlay=Overlay(work / "upper", work / "work"), bwrap=bwrap, toolchain=())
        text = bytes(out.log.head).decode("utf-8", "replace")
        if not out.started or out.exit_code != 0 or text != "probe\nok\n":
            return f"the probe sandbox failed: {out.setup_error or text.strip() or out.exit_code}"
        if (checkout / "probe.out").exists() or not (work / "upper" / "probe.out").exists():
            return "the probe's overlay did not keep the checkout read-only"
        return None
    except OSError as e:
        return f"the probe sandbox failed: {e}"
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _overlay_option(path: Path) -> str:
    return str(path).replace("\\", "\\\\").replace(",", "\\,").replace(":", "\\:")


def bwrap_argv(command: str, *, view: views.View, overlay: Overlay, status_fd: int, network: bool = False,
               bwrap: str = BWRAP, uid: int | None = None) -> list[str]:
    """The argv that waits on the gate, mounts the overlay in a private mount namespace and runs ``command``
    under bwrap, in ``view``; with ``uid``, as that unprivileged uid (``setpriv`` switches to it inside, with the
    only capabilities bwrap kept for that, and then drops every capability, the bounding set included)."""
    co = view.checkout
    caps = ["--cap-drop", "ALL"]
    run = ["/bin/sh", "-c", command]
    if uid is not None:
        caps += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP"]
        run = [SETPRIV, "--reuid", str(uid), "--regid", str(uid), "--clear-groups", "--inh-caps=-all",
               "--bounding-set=-all", "--", *run]
    args = [bwrap, *view.argv(),
            *([] if network else ["--unshare-net"]), "--unshare-pid", "--unshare-ipc", "--unshare-uts",
            "--unshare-cgroup-try", "--hostname", "verifier", "--die-with-parent", "--new-session",
            *caps, "--json-status-fd", str(status_fd), "--", *run]
    lowers = _overlay_option(Path(co)) + (f":{_overlay_option(overlay.lower)}" if overlay.lower else "")
    options = ",".join([f"lowerdir={lowers}", f"upperdir={_overlay_option(overlay.upper)}",
                        f"workdir={_overlay_option(overlay.work)}", *_OVERLAY_OPTIONS])
    return ["unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", GATE_MOUNT, "verifier-sandbox",
            options, co, *args]


# -- running -------------------------------------------------------------------------------------------------

def run_command(command: str, *, checkout: Path, tmp: Path, env: dict[str, str], limits: Limits,
                overlay: Overlay | None, hide: Sequence[Path | str] = (), stop: Stop | None = None,
                network: bool = False, extra: Sequence[str] = (), shm: Path | None = None, runfs: RunFs | None = None,
                mask: Masker | None = None, toolchain: Sequence[str] | None = None, bwrap: str = BWRAP,
                uid: int | None = None, collect: Collector | None = None, held_out: Path | None = None) -> Outcome:
    """Run ``command`` in ``checkout``: under bwrap when ``overlay`` is given, else plainly. ``stop``, once set,
    kills it (the outcome says ``stopped``). ``network``: keep the host's network (only a repository's setup
    step, on a commit already on main, is ever given it). ``extra``: the repository's sandbox paths; ``hide``:
    private paths, covered wherever they fall inside the view; ``toolchain``: the directories to bind (default
    ``verifier.view.toolchain_dirs()``). ``shm``: the run's ``/dev/shm``; ``runfs``: the run's filesystem,
    watched for its limit; ``mask``: the secrets to mask in the log; ``uid``: the unprivileged uid the sandboxed
    check runs as (``verifier.limits.run_uid``, where no pids group can be made): its processes are limited by
    ``RLIMIT_NPROC`` and killed by uid at the end. ``collect``: what our pytest plugin streams on its own pipe
    (``verifier.outcomes``) is fed to it while the check runs."""
    status_r, status_w = os.pipe() if overlay is not None else (-1, -1)
    report_r, report_w = os.pipe() if collect is not None else (-1, -1)
    if collect is not None:  # how its pytest starts is in ``env`` already (``verifier.outcomes.start_env``)
        env = {**env, FD_ENV: str(report_w)}
    try:
        if overlay is not None:
            view = views.build(checkout=checkout, tmp=tmp, shm=shm, toolchain=toolchain, extra=extra, hide=hide,
                               held_out=held_out)
            argv = bwrap_argv(command, view=view, overlay=overlay, status_fd=status_w, network=network, bwrap=bwrap,
                              uid=uid)
            cwd = str(tmp)
        else:
            argv = ["/bin/sh", "-c", GATE, "verifier-gate", "/bin/sh", "-c", command]
            cwd = str(checkout)
    except BaseException:
        for fd in (status_r, status_w, report_r, report_w):
            if fd >= 0:
                os.close(fd)
        raise
    try:
        return _supervise(argv, cwd=cwd, env=env, limits=limits,
                          status=(status_r, status_w) if overlay is not None else None,
                          tasks=limits.max_procs + (SANDBOX_TASKS if overlay is not None else 0), stop=stop,
                          runfs=runfs, mask=mask, uid=uid if overlay is not None else None,
                          report=(report_r, report_w, collect) if collect is not None else None)
    finally:
        if report_r >= 0:
            os.close(report_r)
        # Only the read end: _supervise owns the write end and closes it exactly once. Closing a descriptor
        # twice is not harmless here: checks run in threads of the server, and in between the number can be
        # reused by one of its sockets (a client connection, a database connection), which the second close
        # would cut.
        if status_r >= 0:
            os.close(status_r)


def _group(tasks: int, limits: Limits, runfs: RunFs | None) -> cg.RunGroup | None:
    memory = limits.memory_mb << 20
    if runfs is not None and runfs.kind == "tmpfs":
        memory += runfs.limit  # the run's tmpfs is memory charged to its group: the two limits stay apart
    try:
        return cg.RunGroup.create(tasks=tasks, memory_bytes=memory)
    except OSError as e:
        log.warning("the check runs without control groups: %s", e)
        return None


def _supervise(argv: list[str], *, cwd: str, env: dict[str, str], limits: Limits,
               status: tuple[int, int] | None, tasks: int, stop: Stop | None = None, runfs: RunFs | None = None,
               mask: Masker | None = None, uid: int | None = None,
               report: tuple[int, int, Collector] | None = None) -> Outcome:
    out = Outcome(exit_code=None, timed_out=False, started=False, log=LogCapture(mask))
    group = _group(tasks, limits, runfs)
    if group is not None and "pids" in group.dirs:
        uid = None  # the pids group limits and finds every process: no uid of its own is needed
    disk = runfs.kind if runfs is not None else "none"
    try:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, start_new_session=True,
                                pass_fds=tuple(fd for fd in (status[1] if status else -1, report[1] if report else -1)
                                               if fd >= 0))
    except OSError as e:
        if group:
            group.remove()
        out.setup_error = f"could not start the check: {e}"
        return out
    finally:
        if status:
            os.close(status[1])  # the child has its copy (or there is no child): ours is closed, once
        if report:
            os.close(report[1])
    assert proc.stdin is not None and proc.stdout is not None
    try:
        try:
            if group:
                group.add(proc.pid)
            else:
                _lower_priority(proc.pid)
            memory = limits.memory_mb * 1024 * 1024
            resource.prlimit(proc.pid, resource.RLIMIT_AS, (memory, memory))
            resource.prlimit(proc.pid, resource.RLIMIT_CORE, (0, 0))
            if uid is not None:  # counts the check's processes once it is that uid (bwrap's, as root, are not)
                resource.prlimit(proc.pid, resource.RLIMIT_NPROC, (limits.max_procs, limits.max_procs))
            proc.stdin.write(b"go\n")
            proc.stdin.close()
        except OSError as e:
            out.setup_error = f"could not put the limits on the check: {e}"
            _kill(proc, group, uid)
            proc.wait()
            return out
        code = _pump(proc, proc.stdout.fileno(), limits.timeout, group, out, stop, runfs, uid,
                     (report[0], report[2]) if report else None)
    finally:
        _kill(proc, group, uid)
        with contextlib.suppress(OSError):
            proc.stdout.close()
        if proc.returncode is None:
            proc.wait()
        if group:
            if not out.limit and group.oom_kills():
                out.limit = "memory_limit"
            out.memory_peak = group.memory_peak()
            out.enforced = group.enforced(disk=disk, uid=uid)
            group.remove()
        else:
            out.enforced = cg.Enforced(cpu="sched_idle", disk=disk, pids="uid" if uid is not None else "none")
        if not out.limit and runfs is not None and _full_at_end(runfs):
            out.limit = "disk_limit"
        out.log.end()
        if report:
            _drain(report[0], report[2])
    if status is None:
        out.started = True  # the gate was opened; nothing else stands between it and the command
        out.exit_code = None if out.timed_out or out.stopped else _shell_code(code)
        return out
    said_by_bwrap = _read_all(status[0])
    # bwrap reports the command's exit code only when the command ran: not when setting up the sandbox failed.
    out.started = out.timed_out or out.stopped or bool(out.limit) or '"exit-code"' in said_by_bwrap
    if not out.started:
        said = bytes(out.log.head).decode("utf-8", "replace").strip()[-500:] or "no output"
        out.setup_error = f"the sandbox could not be set up (exit {code}): {said}"
        out.exit_code = None
        return out
    if not (out.timed_out or out.stopped):
        out.exit_code = _bwrap_exit(said_by_bwrap, code)
    return out


def _lower_priority(pid: int) -> None:
    try:
        os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0))
    except (OSError, AttributeError):
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, pid, 19)


def _full_at_end(runfs: RunFs) -> bool:
    try:
        return runfs.full() if runfs.kind == "tmpfs" else runfs.used() > runfs.limit
    except OSError:
        return False


def _pump(proc: subprocess.Popen[bytes], fd: int, timeout: float, group: cg.RunGroup | None, out: Outcome,
          stop: Stop | None = None, runfs: RunFs | None = None, uid: int | None = None,
          report: tuple[int, Collector] | None = None) -> int:
    """Stream the log until the command is done (or the deadline, or ``stop``, or a limit it reached); returns
    the wrapper's exit status."""
    with contextlib.suppress(OSError, AttributeError):
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, 1 << 20)
    pidfd = -1
    with contextlib.suppress(OSError, AttributeError):
        pidfd = os.pidfd_open(proc.pid)
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLHUP)
    if pidfd >= 0:
        poller.register(pidfd, select.POLLIN)
    if stop is not None and stop.fd >= 0:
        poller.register(stop.fd, select.POLLIN)
    if report is not None:
        os.set_blocking(report[0], False)
        poller.register(report[0], select.POLLIN | select.POLLHUP)
    deadline = time.monotonic() + timeout
    watching = runfs is not None or (group is not None and "memory" in group.dirs)
    next_watch = time.monotonic() + WATCH_SECONDS
    eof = exited = False
    drain_until: float | None = None
    try:
        while not eof:
            now = time.monotonic()
            limit = drain_until if drain_until is not None else deadline
            if now >= limit:
                if drain_until is None:
                    out.timed_out = True
                    _kill(proc, group, uid)
                    drain_until = now + DRAIN_SECONDS
                    continue
                break  # something we cannot kill still holds the pipe: stop reading
            if watching and drain_until is None and now >= next_watch:
                next_watch = now + WATCH_SECONDS
                reached = _reached(group, runfs)
                if reached:
                    out.limit = reached
                    _kill(proc, group, uid)
                    drain_until = now + DRAIN_SECONDS
                    continue
            wait_ms = (limit - now) * 1000
            if pidfd < 0 and not exited:
                wait_ms = min(wait_ms, 50)
            if watching and drain_until is None:
                wait_ms = min(wait_ms, max(0.0, next_watch - now) * 1000)
            for ready, _ in poller.poll(max(1, int(wait_ms))):
                if ready == fd:
                    chunk = os.read(fd, 1 << 20)
                    if chunk:
                        out.log.feed(chunk)
                    else:
                        eof = True
                elif ready == pidfd:
                    poller.unregister(pidfd)
                    exited = True
                elif report is not None and ready == report[0]:
                    if not _read_some(report[0], report[1]):
                        poller.unregister(report[0])
                elif stop is not None and ready == stop.fd:
                    poller.unregister(stop.fd)
                    if drain_until is None:
                        out.stopped = True
                        _kill(proc, group, uid)
                        drain_until = time.monotonic() + DRAIN_SECONDS
            if not exited and pidfd < 0 and proc.poll() is not None:
                exited = True
            if exited and not eof and drain_until is None:
                # The command is done but something it started still holds the log: end it.
                _kill(proc, group, uid)
                drain_until = time.monotonic() + DRAIN_SECONDS
        if (not exited and not out.timed_out and not out.stopped and not out.limit
                and not _exits_by(proc, pidfd, deadline)):
            out.timed_out = True  # it closed its output but kept running
        _kill(proc, group, uid)  # whatever it left behind; the group is still pinned by the unreaped leader
        return proc.wait()
    finally:
        if pidfd >= 0:
            os.close(pidfd)


def _read_some(fd: int, into: Collector) -> bool:
    """Read what the plugin's pipe holds now; False at its end (every writer closed it)."""
    try:
        chunk = os.read(fd, 1 << 20)
    except BlockingIOError:
        return True
    except OSError:
        return False
    if not chunk:
        return False
    into.feed(chunk)
    return True


def _drain(fd: int, into: Collector) -> None:
    """What is left in the plugin's pipe once the run is over (its writers are dead: nothing more comes)."""
    os.set_blocking(fd, False)
    for _ in range(10_000):
        try:
            chunk = os.read(fd, 1 << 20)
        except OSError:
            return
        if not chunk:
            return
        into.feed(chunk)


def _reached(group: cg.RunGroup | None, runfs: RunFs | None) -> str:
    """The limit a running check has reached, if any: the kernel killed for memory, or its filesystem is full."""
    if group is not None and group.oom_kills():
        return "memory_limit"
    if runfs is not None and runfs.full():
        return "disk_limit"
    return ""


def _exits_by(proc: subprocess.Popen[bytes], pidfd: int, deadline: float) -> bool:
    """Wait for the process to exit, until the deadline, without reaping it when a pidfd allows."""
    remaining = max(0.0, deadline - time.monotonic())
    if pidfd >= 0:
        return bool(select.select([pidfd], [], [], remaining)[0])
    try:
        proc.wait(timeout=remaining)
    except subprocess.TimeoutExpired:
        return False
    return True


def _kill(proc: subprocess.Popen[bytes], group: cg.RunGroup | None, uid: int | None = None) -> None:
    """SIGKILL the process group (only while its leader is unreaped, so the id is still ours), every member of
    the run's control groups, and every process of its own uid."""
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    if group:
        group.kill_all()
    if uid is not None:
        cg.kill_uid(uid)


def _shell_code(code: int) -> int:
    return 128 - code if code < 0 else code


def _bwrap_exit(report: str, fallback: int) -> int:
    for line in report.splitlines():
        if '"exit-code"' in line:
            with contextlib.suppress(ValueError):
                return int(line.split(":", 1)[1].strip().rstrip("}").strip())
    return _shell_code(fallback)


def _read_all(fd: int) -> str:
    """What bwrap wrote to its status pipe (it is done writing: the process was reaped)."""
    os.set_blocking(fd, False)
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", "replace")
