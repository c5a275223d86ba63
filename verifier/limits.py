"""What this machine lets the verifier limit, found once per process, and one run's control group.

A check runs in a control group of its own, made for the run and removed after it, in every hierarchy where the
verifier may make one. What each controller gives:

- ``pids``: ``pids.max`` bounds processes and threads together (uid 0 included, which ``RLIMIT_NPROC`` does not);
- ``memory``: a limit on resident memory (``memory.max`` on v2; ``memory.limit_in_bytes``, and the same for
  memory plus swap, on v1), and the kernel's own count of the processes it killed for it (``oom_kill``), which
  ends the run as ``memory_limit``. A run's ``tmpfs`` (``verifier.disk``) is memory too, charged to the run's
  group, so the group's limit is the memory limit plus the disk limit: neither eats into the other;
- ``cpu``: a weight far below the server's and PostgreSQL's (``cpu.weight`` on v2, ``cpu.shares`` on v1), so a
  check that burns every core still leaves the server its turn;
- and any of them lists every process of the run, so the runner kills them all at the end, even one that left the
  process group (``cgroup.kill`` where the kernel has it).

Finding them (``probe``):

- **v1**: each controller's hierarchy is found in ``/proc/self/mountinfo`` and this process's place in it in
  ``/proc/self/cgroup``; it is usable when a child group can be made there (root, a writable mount);
- **v2**: the unified hierarchy; the controllers must be listed in the parent's ``cgroup.controllers``. To hand
  them to children they must be in its ``cgroup.subtree_control``, which the kernel refuses while the parent
  holds processes itself (the "no internal processes" rule): then every process of the parent (this one, the
  embedded PostgreSQL it started) moves into a leaf ``mergebot-serve`` first, and the controllers are enabled;
- a read-only ``/sys/fs/cgroup`` (most containers) or a hierarchy that is not mounted leaves the controller out.

Where a controller is missing, the fallbacks are: for CPU, ``SCHED_IDLE`` on the check's first process (its
children inherit it), else ``nice 19``; for memory, the address-space limit alone (``RLIMIT_AS``, always set);
for processes, an unprivileged uid of the run's own (``run_uid``: the sandbox switches to it before the check
starts), so that ``RLIMIT_NPROC`` holds (it binds no process of uid 0) and every process of the run can be
found and killed by its uid (``kill_uid``). ``Enforced`` says which, and every run records it.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import logging
import os
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from verifier.uids import kill_uid as kill_uid
from verifier.uids import run_uid as run_uid
from verifier.uids import uid_processes as uid_processes

log = logging.getLogger(__name__)

PREFIX = "mergebot-verify-"
SERVE_LEAF = "mergebot-serve"
CPU_SHARES_V1 = 2  # the least v1 allows (a task at nice 0 weighs 1024)
CPU_WEIGHT_V2 = 1  # the least v2 allows (the default is 100)
CONTROLLERS = ("cpu", "memory", "pids")


@dataclass(frozen=True)
class Machine:
    """Where per-run groups are made, per controller (None: not available), and why not."""

    version: str  # "v1", "v2" or "none"
    bases: dict[str, Path] = field(default_factory=dict)  # controller -> the directory children are made in
    problems: tuple[str, ...] = ()

    def has(self, controller: str) -> bool:
        return controller in self.bases


@dataclass(frozen=True)
class Enforced:
    """How each limit was enforced for a run (or is, on this machine): recorded on every run."""

    cpu: str = "none"  # cgroup, sched_idle, nice or none
    memory: str = "rlimit"  # cgroup (resident) or rlimit (address space only)
    disk: str = "none"  # tmpfs, poll or none
    pids: str = "none"  # cgroup, uid (an unprivileged uid of the run's own, with RLIMIT_NPROC) or none

    def __str__(self) -> str:
        return f"cpu={self.cpu} memory={self.memory} disk={self.disk} pids={self.pids}"


def _mountinfo(path: str = "/proc/self/mountinfo") -> list[tuple[str, str, str, str, list[str]]]:
    """(root, mount point, fstype, options, super options) of every mount."""
    out = []
    with open(path) as f:
        for line in f:
            parts = line.split()
            sep = parts.index("-")
            out.append((parts[3], parts[4], parts[sep + 1], parts[5], parts[sep + 3].split(",")))
    return out


def _own_cgroups(path: str = "/proc/self/cgroup") -> dict[str, str]:
    """controller (or "" for v2) -> this process's group path."""
    out: dict[str, str] = {}
    with open(path) as f:
        for line in f:
            _, controllers, group = line.rstrip("\n").split(":", 2)
            for c in controllers.split(",") if controllers else [""]:
                out[c] = group
    return out


def _inside(mount_root: str, point: str, own: str) -> Path | None:
    own = own or "/"
    if mount_root != "/" and not (own == mount_root or own.startswith(mount_root.rstrip("/") + "/")):
        return None  # our group is outside what is mounted here
    return Path(point) / own[len(mount_root.rstrip("/")):].lstrip("/")


def _can_make_children(base: Path) -> bool:
    probe = base / f"{PREFIX}probe-{os.getpid()}"
    try:
        probe.mkdir()
        probe.rmdir()
        return True
    except OSError:
        return False


def probe(*, mountinfo: str = "/proc/self/mountinfo", cgroup: str = "/proc/self/cgroup") -> Machine:
    """What this machine allows (see the module's rules). The paths are parameters for tests."""
    if os.geteuid() != 0:
        return Machine("none", problems=("not root: no control group of our own can be made",))
    try:
        mounts = _mountinfo(mountinfo)
        own = _own_cgroups(cgroup)
    except (OSError, ValueError, IndexError) as e:
        return Machine("none", problems=(f"cannot read this process's control groups: {e}",))
    bases: dict[str, Path] = {}
    problems: list[str] = []
    v1 = [m for m in mounts if m[2] == "cgroup"]
    for controller in CONTROLLERS:
        m = next((m for m in v1 if controller in m[4]), None)
        if m is None:
            continue
        base = _inside(m[0], m[1], own.get(controller, "/"))
        if base is None or "ro" in m[3].split(",") or not _can_make_children(base):
            problems.append(f"{controller} (v1): the hierarchy at {m[1]} is not writable here")
            continue
        bases[controller] = base
    if bases:
        return Machine("v1", bases, tuple(problems))
    v2 = next((m for m in mounts if m[2] == "cgroup2"), None)
    if v2 is None:
        return Machine("none", problems=(*problems, "no cgroup hierarchy is mounted"))
    base = _inside(v2[0], v2[1], own.get("", "/"))
    if base is None:
        return Machine("none", problems=(*problems, "this process's v2 group is outside the mounted hierarchy"))
    if "ro" in v2[3].split(","):
        return Machine("none", problems=(*problems, f"{v2[1]} is mounted read-only"))
    found, why = _enable_v2(base)
    if not found:
        return Machine("none", problems=(*problems, why))
    return Machine("v2", {c: base for c in found}, (why,) if why else ())


def _enable_v2(base: Path) -> tuple[list[str], str]:
    """Make the controllers available to children of ``base`` (moving its processes into a leaf if it must)."""
    try:
        available = (base / "cgroup.controllers").read_text().split()
        enabled = (base / "cgroup.subtree_control").read_text().split()
    except OSError as e:
        return [], f"cannot read {base}: {e}"
    wanted = [c for c in CONTROLLERS if c in available]
    if not wanted:
        return [], f"none of {', '.join(CONTROLLERS)} is available in {base}"
    missing = [c for c in wanted if c not in enabled]
    if missing:
        try:
            _write(base / "cgroup.subtree_control", " ".join(f"+{c}" for c in missing))
        except OSError as e:
            if e.errno not in (errno.EBUSY, errno.EOPNOTSUPP):
                return [], f"cannot enable {', '.join(missing)} in {base}: {e}"
            try:  # the group holds processes: move them all into a leaf, then enable
                leaf = base / SERVE_LEAF
                leaf.mkdir(exist_ok=True)
                for pid in (base / "cgroup.procs").read_text().split():
                    with contextlib.suppress(ProcessLookupError, OSError):
                        _write(leaf / "cgroup.procs", pid)
                _write(base / "cgroup.subtree_control", " ".join(f"+{c}" for c in missing))
            except OSError as e2:
                return [], f"cannot enable {', '.join(missing)} in {base} (even after moving into a leaf): {e2}"
    if not _can_make_children(base):
        return [], f"cannot make a group in {base}"
    return wanted, ""


def _write(path: Path, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


_lock = threading.Lock()
_machine: Machine | None = None
_counter = itertools.count()


def machine() -> Machine:
    """``probe()``, once per process (stale groups of dead runners are swept then)."""
    global _machine
    with _lock:
        if _machine is None:
            _machine = probe()
            for base in set(_machine.bases.values()):
                _sweep(base)
            if _machine.problems:
                log.info("control groups: %s", "; ".join(_machine.problems))
        return _machine


def enforced(machine_: Machine | None = None, *, disk: str = "none", sandboxed: bool = True) -> Enforced:
    """What a run gets here (before it runs: ``RunGroup`` may still fall back for CPU)."""
    m = machine_ or machine()
    pids = "cgroup" if m.has("pids") else ("uid" if sandboxed and os.geteuid() == 0 else "none")
    return Enforced(cpu="cgroup" if m.has("cpu") else "sched_idle", memory="cgroup" if m.has("memory") else "rlimit",
                    disk=disk, pids=pids)


def _sweep(base: Path) -> None:
    """Remove the groups of runners that died (their name carries the runner's pid)."""
    for d in base.glob(f"{PREFIX}*"):
        try:
            owner = int(d.name[len(PREFIX):].split("-")[0])
        except ValueError:
            continue
        if owner == os.getpid() or pid_alive(owner):
            continue
        _kill_in(d)
        _rmdir(d)


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` lives on this machine (one of another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _procs(group: Path) -> list[int]:
    try:
        return [int(x) for x in (group / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def _kill_in(group: Path) -> None:
    kill = group / "cgroup.kill"
    if kill.exists():
        with contextlib.suppress(OSError):
            _write(kill, "1")
    for _ in range(200):
        pids = _procs(group)
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.002)
    log.warning("processes left in %s after repeated kills", group)


def _rmdir(group: Path) -> None:
    for _ in range(100):
        try:
            group.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError as e:
            if e.errno != errno.EBUSY:
                break
            time.sleep(0.005)
    log.warning("could not remove control group %s", group)


class RunGroup:
    """One run's groups (one directory per v1 hierarchy, or one v2 directory), with the run's limits."""

    def __init__(self, m: Machine, dirs: dict[str, Path], cpu: str) -> None:
        self.machine, self.dirs, self.cpu = m, dirs, cpu

    @classmethod
    def create(cls, *, tasks: int, memory_bytes: int | None, m: Machine | None = None) -> RunGroup:
        """Groups for a run of at most ``tasks`` processes and ``memory_bytes`` of resident memory (None: no
        resident limit)."""
        m = m or machine()
        name = f"{PREFIX}{os.getpid()}-{next(_counter)}"
        dirs: dict[str, Path] = {}
        group = cls(m, dirs, "none")
        try:
            for base in dict.fromkeys(m.bases.values()):
                d = base / name
                d.mkdir()
                for c, b in m.bases.items():
                    if b == base:
                        dirs[c] = d
            if "pids" in dirs:
                _write(dirs["pids"] / "pids.max", str(tasks))
            if "memory" in dirs and memory_bytes:
                mem = dirs["memory"]
                if m.version == "v2":
                    _write(mem / "memory.max", str(memory_bytes))
                    with contextlib.suppress(OSError):
                        _write(mem / "memory.swap.max", "0")
                    with contextlib.suppress(OSError):
                        _write(mem / "memory.oom.group", "1")  # the kernel kills the whole run, not one process
                else:
                    _write(mem / "memory.limit_in_bytes", str(memory_bytes))
                    if (mem / "memory.memsw.limit_in_bytes").exists():
                        with contextlib.suppress(OSError):
                            _write(mem / "memory.memsw.limit_in_bytes", str(memory_bytes))
            if "cpu" in dirs:
                if m.version == "v2":
                    _write(dirs["cpu"] / "cpu.weight", str(CPU_WEIGHT_V2))
                else:
                    _write(dirs["cpu"] / "cpu.shares", str(CPU_SHARES_V1))
                group.cpu = "cgroup"
        except OSError:
            group.remove()
            raise
        return group

    def enforced(self, *, disk: str, uid: int | None = None) -> Enforced:
        pids = "cgroup" if "pids" in self.dirs else ("uid" if uid is not None else "none")
        return Enforced(cpu=self.cpu, memory="cgroup" if "memory" in self.dirs else "rlimit", disk=disk, pids=pids)

    def add(self, pid: int) -> None:
        """Put the (gated, not yet running) process in every group; without a CPU group, lower its priority."""
        for d in dict.fromkeys(self.dirs.values()):
            _write(d / "cgroup.procs", str(pid))
        if self.cpu != "cgroup":
            try:
                os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0))
                self.cpu = "sched_idle"
            except (OSError, AttributeError):
                with contextlib.suppress(OSError):
                    os.setpriority(os.PRIO_PROCESS, pid, 19)
                    self.cpu = "nice"

    def pids(self) -> list[int]:
        seen: set[int] = set()
        for d in dict.fromkeys(self.dirs.values()):
            seen.update(_procs(d))
        return sorted(seen)

    def kill_all(self) -> None:
        for d in dict.fromkeys(self.dirs.values()):
            _kill_in(d)

    def oom_kills(self) -> int:
        """How many processes of the run the kernel killed for its memory limit."""
        mem = self.dirs.get("memory")
        if mem is None:
            return 0
        name = "memory.events" if self.machine.version == "v2" else "memory.oom_control"
        try:
            for line in (mem / name).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            pass
        return 0

    def memory_peak(self) -> int | None:
        mem = self.dirs.get("memory")
        if mem is None:
            return None
        for name in ("memory.peak", "memory.max_usage_in_bytes"):
            with contextlib.suppress(OSError, ValueError):
                return int((mem / name).read_text().split()[0])
        return None

    def remove(self) -> None:
        for d in dict.fromkeys(self.dirs.values()):
            _rmdir(d)
