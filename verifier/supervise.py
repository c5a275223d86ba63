"""Run a started check to its end under its limits (``verifier.sandbox`` builds what it runs): put the limits on
the waiting child, open its gate, stream its merged stdout and stderr into a bounded, masked ``LogCapture`` (and
our pytest plugin's pipe into its collector), end it at the deadline, at ``Stop``, or at the disk or memory limit it
reached, kill every process of the run, and say how each limit was enforced (``Outcome``).

See ``verifier.sandbox``'s rules for the limits and the log; this module carries them out.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import resource
import select
import signal
import subprocess
import time
from dataclasses import dataclass, field

from verifier import limits as cg
from verifier.disk import RunFs
from verifier.mask import Masker
from verifier.outcomes import Collector

log = logging.getLogger(__name__)

LOG_HEAD = 16 * 1024
LOG_TAIL = 48 * 1024
DRAIN_SECONDS = 2.0  # how long to keep reading once every process is dead
WATCH_SECONDS = 0.2  # how often a running check's disk and memory are looked at


@dataclass(frozen=True)
class Limits:
    timeout: float
    memory_mb: int = 4096
    max_procs: int = 512


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


def _group(tasks: int, limits: Limits, runfs: RunFs | None) -> cg.RunGroup | None:
    memory = limits.memory_mb << 20
    if runfs is not None and runfs.kind == "tmpfs":
        memory += runfs.limit  # the run's tmpfs is memory charged to its group: the two limits stay apart
    try:
        return cg.RunGroup.create(tasks=tasks, memory_bytes=memory)
    except OSError as e:
        log.warning("the check runs without control groups: %s", e)
        return None


def supervise(argv: list[str], *, cwd: str, env: dict[str, str], limits: Limits,
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
