"""Run one shell command under limits and capture a bounded log: bubblewrap when it is usable, else plain.

Two ways to run, chosen by the caller (``verifier.runner`` records which one as the result's ``sandbox``):

``bwrap``
    The command runs in a bubblewrap sandbox that bwrap sets up as root, with every capability dropped and
    ``no_new_privs`` set, so the check is uid 0 without any privilege. Its view of the machine:

    - the whole filesystem read-only (``--ro-bind / /``), so the interpreter and tools the check uses are
      there at their usual paths (``/work/venv/bin/python`` and ``/root/.pyenv`` included);
    - the checkout writable at its own path — through an overlay whose upper layer is a per-run directory:
      the check writes into the overlay, never into the slot's checkout itself, and the runner reads the
      upper layer afterwards to see exactly what the check changed (``verifier.checkout``). A cache generation
      (``verifier.cache``) is a second, read-only lower layer under the checkout's tree;
    - a private temporary directory writable at ``/tmp`` (``HOME`` and ``TMPDIR`` point into it);
    - a minimal ``/dev`` and a ``/proc`` of its own PID namespace (it sees only its own processes, so never
      the bot's environment through ``/proc/<pid>/environ``);
    - no network: a network namespace with only its own loopback, so neither the host's ``127.0.0.1`` nor DNS
      is reachable, nor abstract Unix sockets. Path-bound Unix sockets would still be reachable through a
      read-only bind (connecting needs no write access to the mount), so every listening socket of the
      host's network namespace (``/proc/net/unix``, e.g. the embedded PostgreSQL's) is covered with
      ``/dev/null`` inside the sandbox; paths given in ``hide`` are replaced by an empty read-only tmpfs;
    - its own IPC and UTS namespaces, a new session (no terminal to inject into), ``--die-with-parent``.

    The overlay is mounted in a private mount namespace (``unshare --mount``) just before bwrap starts, so it
    vanishes with the sandbox and never shows on the host. All of this needs root (which the verifier runs
    as); ``bwrap_usable()`` probes the full chain once per process.

``none``
    A plain ``/bin/sh -c`` in the checkout, with the same limits, the same scrubbed environment and the same
    bounded log, but no isolation: the check can reach the network and write wherever the verifier can.

Limits, the same in both ways:

- **time**: a wall-clock limit; at the deadline the whole process group is killed (and everything in the
  pids cgroup), and the outcome is ``timeout``;
- **processes**: a pids cgroup (v1, as on this machine) per run with ``pids.max`` = ``max_procs`` (the
  check's own shell included) plus bwrap's two processes when sandboxed. It counts threads too, it binds
  uid 0 (``RLIMIT_NPROC`` does not), and it lets the runner kill every process the check started, even one
  that left the process group. Without a writable pids cgroup (not root, or a cgroup-v2-only host) there is
  no process limit, and a warning is logged;
- **memory**: ``RLIMIT_AS`` of ``memory_mb`` (address space, not resident memory), plus no core dumps.

Limits are put on the child by the parent (``prlimit`` and the cgroup's ``cgroup.procs``) while the child
waits on a gate (its stdin) before it execs anything, so no Python code runs between fork and exec
(``preexec_fn`` is not safe in a threaded process, and the runner is called from worker threads).

The log is stdout and stderr merged into one pipe and streamed into ``LogCapture``: the first ``LOG_HEAD``
and last ``LOG_TAIL`` bytes are kept, the full size is counted and the SHA-256 taken over every byte; nothing
is written to disk, so a check that prints gigabytes costs time, not space.

What the sandbox does not do:

- hide what is readable: the check reads the whole filesystem as root reads it (files of the bot, keys in
  home directories, other repositories), read-only. Pass the directories that matter as ``hide``;
- bound disk space: what the check writes into its overlay and its ``/tmp`` lands on the slot's filesystem,
  unlimited (it is deleted after the run); the ``/dev`` tmpfs is writable too (in memory);
- cover Unix sockets bound after the run started, or bound in another network namespace;
- stop the check from creating user namespaces of its own (still without any way back to the host's mounts,
  network or processes, but a larger kernel surface);
- limit processes on a host without a writable v1 pids cgroup, or limit resident memory (``RLIMIT_AS``
  counts reservations, so a runtime that reserves a large heap up front needs a larger ``memory_mb``);
- any of the isolation in ``none`` mode, where only the limits, the environment and the log apply.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import itertools
import logging
import os
import resource
import select
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

LOG_HEAD = 16 * 1024
LOG_TAIL = 48 * 1024
SANDBOX_TASKS = 2  # bwrap outside the PID namespace and its PID-1 reaper inside
SANDBOX_TMP = "/tmp"  # noqa: S108 - inside the sandbox: a mount point for the run's own directory
DRAIN_SECONDS = 2.0  # how long to keep reading once every process is dead

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
    """The upper layer and overlay work directory of one run (both empty, on the checkout's filesystem)."""

    upper: Path
    work: Path
    lower: Path | None = None  # a read-only layer under the checkout's tree (a cache generation, verifier.cache)


class LogCapture:
    """Head and tail of a stream of any size, its full size and SHA-256."""

    def __init__(self) -> None:
        self.head = bytearray()
        self._tail = bytearray()
        self.size = 0
        self._digest = hashlib.sha256()

    def feed(self, chunk: bytes) -> None:
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


# -- pids cgroup -------------------------------------------------------------------------------------------

_CG_PREFIX = "mergebot-verify-"
_cg_lock = threading.Lock()
_cg_base: Path | None = None
_cg_probed = False
_cg_counter = itertools.count()


def _find_pids_cgroup() -> Path | None:
    """This process's cgroup in the v1 pids hierarchy, if it is mounted and writable (root only)."""
    if os.geteuid() != 0:
        return None
    mount: tuple[str, str] | None = None
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                parts = line.split()
                sep = parts.index("-")
                if parts[sep + 1] == "cgroup" and "pids" in parts[sep + 3].split(","):
                    mount = (parts[3], parts[4])  # the mount's root inside the hierarchy, its mount point
                    break
        if mount is None:
            return None
        own = ""
        with open("/proc/self/cgroup") as f:
            for line in f:
                _, controllers, path = line.rstrip("\n").split(":", 2)
                if "pids" in controllers.split(","):
                    own = path
        root, point = mount
        own = own or "/"
        if root != "/" and not (own == root or own.startswith(root.rstrip("/") + "/")):
            return None  # our cgroup is outside what is mounted here
        base = Path(point) / own[len(root.rstrip("/")):].lstrip("/")
        probe = base / f"{_CG_PREFIX}probe-{os.getpid()}"
        probe.mkdir()
        probe.rmdir()
        return base
    except (OSError, ValueError, IndexError):
        return None


def _pids_base() -> Path | None:
    global _cg_base, _cg_probed
    with _cg_lock:
        if not _cg_probed:
            _cg_base = _find_pids_cgroup()
            _cg_probed = True
            if _cg_base is not None:
                _sweep_stale(_cg_base)
            else:
                log.warning("no writable pids cgroup: checks run without a process limit")
        return _cg_base


def process_limit_available() -> bool:
    """Whether checks get a process limit here (a writable pids cgroup)."""
    return _pids_base() is not None


def _sweep_stale(base: Path) -> None:
    """Remove the cgroups of runners that died (their name carries the runner's pid)."""
    for d in base.glob(f"{_CG_PREFIX}*"):
        try:
            owner = int(d.name[len(_CG_PREFIX):].split("-")[0])
        except ValueError:
            continue
        if owner == os.getpid() or _alive(owner):
            continue
        cg = _Cgroup(d)
        cg.kill_all()
        cg.remove()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class _Cgroup:
    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def create(cls, limit: int) -> _Cgroup | None:
        base = _pids_base()
        if base is None:
            return None
        path = base / f"{_CG_PREFIX}{os.getpid()}-{next(_cg_counter)}"
        path.mkdir()
        (path / "pids.max").write_text(str(limit))
        return cls(path)

    def add(self, pid: int) -> None:
        (self.path / "cgroup.procs").write_text(str(pid))

    def pids(self) -> list[int]:
        try:
            return [int(x) for x in (self.path / "cgroup.procs").read_text().split()]
        except (OSError, ValueError):
            return []

    def kill_all(self) -> None:
        for _ in range(200):
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.002)
        log.warning("processes left in %s after repeated kills", self.path)

    def remove(self) -> None:
        for _ in range(100):
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError as e:
                if e.errno != errno.EBUSY:
                    break
                time.sleep(0.005)
        log.warning("could not remove cgroup %s", self.path)


# -- bubblewrap ----------------------------------------------------------------------------------------------

_bwrap_lock = threading.Lock()
_bwrap_problem: str | None = None
_bwrap_probed = False
# Overlay options: no redirects, metacopy or index, so that the upper layer says plainly what changed;
# "volatile" (Linux 5.10+) skips syncing the upper layer, which is thrown away anyway. Dropped if refused.
_OVERLAY_OPTIONS = ["redirect_dir=off", "metacopy=off", "index=off", "xino=off", "volatile"]


def bwrap_problem() -> str | None:
    """Why the bwrap sandbox cannot be used here, or None when it can (probed once per process)."""
    global _bwrap_problem, _bwrap_probed
    with _bwrap_lock:
        if not _bwrap_probed:
            _bwrap_problem = _probe_bwrap()
            if _bwrap_problem is not None and "volatile" in _OVERLAY_OPTIONS:
                _OVERLAY_OPTIONS.remove("volatile")  # an older kernel: try once more without it
                _bwrap_problem = _probe_bwrap()
            _bwrap_probed = True
            if _bwrap_problem is not None:
                log.warning("the bwrap sandbox is not usable here: %s", _bwrap_problem)
        return _bwrap_problem


def bwrap_usable() -> bool:
    return bwrap_problem() is None


def _probe_bwrap() -> str | None:
    missing = [tool for tool in ("bwrap", "unshare", "mount") if shutil.which(tool) is None]
    if missing:
        return f"not installed: {', '.join(missing)} (apt-get install -y bubblewrap)"
    if os.geteuid() != 0:
        return "the bwrap sandbox needs root (it mounts the checkout's overlay and sets up bwrap as root)"
    work = Path(tempfile.mkdtemp(prefix="mb-bwrap-probe-"))
    try:
        checkout, tmp = work / "checkout", work / "tmp"
        for d in (checkout, tmp, work / "upper", work / "work"):
            d.mkdir()
        (checkout / "probe").write_text("probe\n")
        out = run_command("cat probe && echo ok > probe.out && cat probe.out", checkout=checkout, tmp=tmp,
                          env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")}, limits=Limits(timeout=30),
                          overlay=Overlay(work / "upper", work / "work"))
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


def _unix_sockets(covered: Sequence[str]) -> list[str]:
    """Paths of the Unix sockets bound in this network namespace that exist now and that nothing covers."""
    found = []
    try:
        with open("/proc/net/unix", encoding="utf-8", errors="surrogateescape") as f:
            next(f, None)
            for line in f:
                parts = line.rstrip("\n").split(None, 7)
                if len(parts) == 8 and parts[7].startswith("/"):
                    found.append(parts[7])
    except OSError:
        return []
    out = set()
    for p in found:
        real = os.path.realpath(p)
        if _under(real, covered):
            continue
        with contextlib.suppress(OSError):
            if stat.S_ISSOCK(os.lstat(real).st_mode):
                out.add(real)
    return sorted(out)


def _under(path: str, parents: Sequence[str]) -> bool:
    return any(path == p or path.startswith(p.rstrip("/") + "/") for p in parents)


def _overlay_option(path: Path) -> str:
    return str(path).replace("\\", "\\\\").replace(",", "\\,").replace(":", "\\:")


def bwrap_argv(command: str, *, checkout: Path, tmp: Path, overlay: Overlay, status_fd: int,
               hide: Sequence[Path | str] = (), network: bool = False) -> list[str]:
    """The argv that waits on the gate, mounts the overlay in a private mount namespace and runs ``command``
    under bwrap."""
    co = str(checkout)
    hidden: list[str] = []
    for h in sorted({os.path.realpath(h) for h in hide if os.path.isdir(h)}):
        if not _under(h, [SANDBOX_TMP, *hidden]):  # the private /tmp or a hidden parent covers it already
            hidden.append(h)
    args = ["bwrap", "--ro-bind", "/", "/"]
    for sock in _unix_sockets([SANDBOX_TMP, *hidden]):
        args += ["--ro-bind", "/dev/null", sock]
    for h in hidden:
        args += ["--tmpfs", h]
    args += ["--dev", "/dev", "--proc", "/proc", "--bind", str(tmp), SANDBOX_TMP]
    for keep in _toolchain_under_tmp(hidden):  # the private /tmp must not hide the interpreter the check runs
        args += ["--ro-bind", keep, keep]
    args += ["--bind", co, co, "--chdir", co]
    for h in hidden:
        args += ["--remount-ro", h]
    args += [*([] if network else ["--unshare-net"]), "--unshare-pid", "--unshare-ipc", "--unshare-uts",
             "--unshare-cgroup-try",
             "--hostname", "verifier", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
             "--json-status-fd", str(status_fd), "--", "/bin/sh", "-c", command]
    lowers = _overlay_option(checkout) + (f":{_overlay_option(overlay.lower)}" if overlay.lower else "")
    options = ",".join([f"lowerdir={lowers}", f"upperdir={_overlay_option(overlay.upper)}",
                        f"workdir={_overlay_option(overlay.work)}", *_OVERLAY_OPTIONS])
    return ["unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", GATE_MOUNT, "verifier-sandbox",
            options, co, *args]


def _toolchain_under_tmp(hidden: Sequence[str]) -> list[str]:
    """Directories under the host's /tmp that a check needs read-only: the interpreter's prefixes (a virtual
    environment made in /tmp, as CI makes one) and every PATH entry. Hidden paths stay hidden."""
    wanted = [sys.prefix, sys.base_prefix, sys.exec_prefix, *os.environ.get("PATH", "").split(os.pathsep)]
    keep: list[str] = []
    for path in sorted({os.path.realpath(p) for p in wanted if p and os.path.isdir(p)}):
        if _under(path, [SANDBOX_TMP]) and path != SANDBOX_TMP and not _under(path, [*hidden, *keep]):
            keep.append(path)
    return keep


# -- running -------------------------------------------------------------------------------------------------

def run_command(command: str, *, checkout: Path, tmp: Path, env: dict[str, str], limits: Limits,
                overlay: Overlay | None, hide: Sequence[Path | str] = (), stop: Stop | None = None,
                network: bool = False) -> Outcome:
    """Run ``command`` in ``checkout``: under bwrap when ``overlay`` is given, else plainly. ``stop``, once set,
    kills it (the outcome says ``stopped``). ``network``: keep the host's network (only a repository's setup
    step, on a commit already on main, is ever given it)."""
    status_r, status_w = os.pipe() if overlay is not None else (-1, -1)
    try:
        if overlay is not None:
            argv = bwrap_argv(command, checkout=checkout, tmp=tmp, overlay=overlay, status_fd=status_w, hide=hide,
                              network=network)
            cwd = str(tmp)
        else:
            argv = ["/bin/sh", "-c", GATE, "verifier-gate", "/bin/sh", "-c", command]
            cwd = str(checkout)
    except BaseException:
        for fd in (status_r, status_w):
            if fd >= 0:
                os.close(fd)
        raise
    try:
        return _supervise(argv, cwd=cwd, env=env, limits=limits,
                          status=(status_r, status_w) if overlay is not None else None,
                          tasks=limits.max_procs + (SANDBOX_TASKS if overlay is not None else 0), stop=stop)
    finally:
        # Only the read end: _supervise owns the write end and closes it exactly once. Closing a descriptor
        # twice is not harmless here: checks run in threads of the server, and in between the number can be
        # reused by one of its sockets (a client connection, a database connection), which the second close
        # would cut.
        if status_r >= 0:
            os.close(status_r)


def _supervise(argv: list[str], *, cwd: str, env: dict[str, str], limits: Limits,
               status: tuple[int, int] | None, tasks: int, stop: Stop | None = None) -> Outcome:
    out = Outcome(exit_code=None, timed_out=False, started=False)
    cgroup = _Cgroup.create(tasks)
    try:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, start_new_session=True,
                                pass_fds=(status[1],) if status else ())
    except OSError as e:
        if cgroup:
            cgroup.remove()
        out.setup_error = f"could not start the check: {e}"
        return out
    finally:
        if status:
            os.close(status[1])  # the child has its copy (or there is no child): ours is closed, once
    assert proc.stdin is not None and proc.stdout is not None
    try:
        try:
            if cgroup:
                cgroup.add(proc.pid)
            memory = limits.memory_mb * 1024 * 1024
            resource.prlimit(proc.pid, resource.RLIMIT_AS, (memory, memory))
            resource.prlimit(proc.pid, resource.RLIMIT_CORE, (0, 0))
            proc.stdin.write(b"go\n")
            proc.stdin.close()
        except OSError as e:
            out.setup_error = f"could not put the limits on the check: {e}"
            _kill(proc, cgroup)
            proc.wait()
            return out
        code = _pump(proc, proc.stdout.fileno(), limits.timeout, cgroup, out, stop)
    finally:
        _kill(proc, cgroup)
        with contextlib.suppress(OSError):
            proc.stdout.close()
        if proc.returncode is None:
            proc.wait()
        if cgroup:
            cgroup.remove()
    if status is None:
        out.started = True  # the gate was opened; nothing else stands between it and the command
        out.exit_code = None if out.timed_out or out.stopped else _shell_code(code)
        return out
    report = _read_all(status[0])
    # bwrap reports the command's exit code only when the command ran: not when setting up the sandbox failed.
    out.started = out.timed_out or out.stopped or '"exit-code"' in report
    if not out.started:
        said = bytes(out.log.head).decode("utf-8", "replace").strip()[-500:] or "no output"
        out.setup_error = f"the sandbox could not be set up (exit {code}): {said}"
        out.exit_code = None
        return out
    if not (out.timed_out or out.stopped):
        out.exit_code = _bwrap_exit(report, code)
    return out


def _pump(proc: subprocess.Popen[bytes], fd: int, timeout: float, cgroup: _Cgroup | None, out: Outcome,
          stop: Stop | None = None) -> int:
    """Stream the log until the command is done (or the deadline, or ``stop``); returns the wrapper's exit
    status."""
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
    deadline = time.monotonic() + timeout
    eof = exited = False
    drain_until: float | None = None
    try:
        while not eof:
            now = time.monotonic()
            limit = drain_until if drain_until is not None else deadline
            if now >= limit:
                if drain_until is None:
                    out.timed_out = True
                    _kill(proc, cgroup)
                    drain_until = now + DRAIN_SECONDS
                    continue
                break  # something we cannot kill still holds the pipe: stop reading
            wait_ms = (limit - now) * 1000
            if pidfd < 0 and not exited:
                wait_ms = min(wait_ms, 50)
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
                elif stop is not None and ready == stop.fd:
                    poller.unregister(stop.fd)
                    if drain_until is None:
                        out.stopped = True
                        _kill(proc, cgroup)
                        drain_until = time.monotonic() + DRAIN_SECONDS
            if not exited and pidfd < 0 and proc.poll() is not None:
                exited = True
            if exited and not eof and drain_until is None:
                # The command is done but something it started still holds the log: end it.
                _kill(proc, cgroup)
                drain_until = time.monotonic() + DRAIN_SECONDS
        if not exited and not out.timed_out and not out.stopped and not _exits_by(proc, pidfd, deadline):
            out.timed_out = True  # it closed its output but kept running
        _kill(proc, cgroup)  # whatever it left behind; the group is still pinned by the unreaped leader
        return proc.wait()
    finally:
        if pidfd >= 0:
            os.close(pidfd)


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


def _kill(proc: subprocess.Popen[bytes], cgroup: _Cgroup | None) -> None:
    """SIGKILL the process group (only while its leader is unreaped, so the id is still ours) and the cgroup."""
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    if cgroup:
        cgroup.kill_all()


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
