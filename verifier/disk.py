"""The run's own filesystem: everything a check may write, under one size limit.

A sandboxed check writes in three places: its checkout's overlay (the upper and work layers), its ``/tmp`` and
``/dev/shm``. All three are directories of one filesystem made for the run (``RunFs``), so one limit bounds their
sum, and the disk PostgreSQL writes to never fills because a check did:

- **tmpfs** (the default, for root): a ``tmpfs`` of the limit's size mounted on the slot's ``run/`` directory in
  the host's mount namespace, so it outlives the sandbox's own namespace and the runner reads the upper layer
  after the check (what it changed, the cache it leaves). Its inodes are bounded too (one per 4 KiB of the
  limit, at least 16,384). Unmounting it at the end of the run throws everything away at once. Its pages are
  memory, charged to the run's memory group (``verifier.limits`` adds the disk limit to the memory limit);
- **poll** (where no filesystem can be mounted: not root): the run's directories (and, without the sandbox, what
  the checkout holds beyond its own files) are measured every ``POLL_SECONDS``; the limit is then only as good
  as the interval: a check can write, between two measurements, whatever the disk takes in that time, beyond the
  limit. The run says so.

The limit is reached when the filesystem has less than ``FULL_MARGIN`` left, or no inode: the run then ends
with ``disk_limit`` (``verifier.sandbox``). Mounts left by a runner that died are swept (``sweep``) before a
slot is used again.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

FULL_MARGIN = 1 << 20  # less than this free: the run's filesystem is full
POLL_SECONDS = 1.0
MIN_INODES = 16384
MS_NOSUID, MS_NODEV = 2, 4
MNT_DETACH = 2

_libc: ctypes.CDLL | None = None


def _c() -> ctypes.CDLL:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    return _libc


def mount_tmpfs(path: Path, size: int) -> None:
    inodes = max(MIN_INODES, size // 4096)
    options = f"size={size},nr_inodes={inodes},mode=0700".encode()
    if _c().mount(b"mergebot-run", str(path).encode(), b"tmpfs", MS_NOSUID | MS_NODEV, options) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"cannot mount a tmpfs on {path}: {os.strerror(e)}")


def unmount(path: Path) -> None:
    if _c().umount2(str(path).encode(), MNT_DETACH) != 0:
        e = ctypes.get_errno()
        if e not in (errno.EINVAL, errno.ENOENT):  # not a mount point (any more)
            raise OSError(e, f"cannot unmount {path}: {os.strerror(e)}")


def mounts_under(root: Path, mountinfo: str = "/proc/self/mountinfo") -> list[Path]:
    """Mount points at or under ``root``, deepest first."""
    found = []
    prefix = str(root).rstrip("/")
    try:
        with open(mountinfo) as f:
            for line in f:
                point = line.split()[4].encode().decode("unicode_escape")
                if point == prefix or point.startswith(prefix + "/"):
                    found.append(Path(point))
    except OSError:
        return []
    return sorted(found, key=lambda p: len(p.parts), reverse=True)


def sweep(root: Path) -> None:
    """Unmount whatever is mounted under ``root`` (a slot's ``run/``, left by a runner that died)."""
    for point in mounts_under(root):
        with contextlib.suppress(OSError):
            unmount(point)


def sweep_process(slots: Path, pid: int) -> None:
    """Unmount what the slots of process ``pid`` left mounted (a slot is named ``<pid>-<n>`` under ``slots``): a
    server that died mid-check, whose data directory another live process may share."""
    for slot in slots.glob(f"{pid}-*"):
        sweep(slot)


def usage(paths: Sequence[Path]) -> int:
    """Bytes that the files under ``paths`` take on disk (hard links once)."""
    total = 0
    seen: set[tuple[int, int]] = set()
    for top in paths:
        for folder, dirs, files in os.walk(top):
            for name in [*dirs, *files]:
                with contextlib.suppress(OSError):
                    st = os.lstat(os.path.join(folder, name))
                    if (st.st_dev, st.st_ino) in seen:
                        continue
                    seen.add((st.st_dev, st.st_ino))
                    total += st.st_blocks * 512
    return total


@dataclass
class RunFs:
    """Where one run writes, and how its size is bounded (``kind``: tmpfs or poll)."""

    root: Path
    limit: int  # bytes
    kind: str
    watched: list[Path] = field(default_factory=list)  # poll: what is measured
    peak: int = 0
    _next_poll: float = 0.0
    _base: int = 0  # poll: what the watched paths held before the run (a checkout's own files are not its writes)

    @classmethod
    def make(cls, root: Path, limit: int, *, mount: bool = True) -> RunFs:
        """``root`` (empty, existing) becomes the run's filesystem: a tmpfs when it can be mounted (and
        ``mount``), else a directory that is polled."""
        if mount and os.geteuid() == 0:
            try:
                mount_tmpfs(root, limit)
                return cls(root, limit, "tmpfs")
            except OSError as e:
                log.warning("the run's disk limit falls back to polling: %s", e)
        return cls(root, limit, "poll", [root])

    def watch(self, path: Path) -> None:
        """Also count what is written under ``path`` (the checkout, when a check writes into it directly)."""
        if self.kind == "poll":
            self.watched.append(path)
            self._base += usage([path])

    @property
    def note(self) -> str:
        if self.kind == "tmpfs":
            return f"a tmpfs of {self.limit >> 20} MiB holds all the run writes"
        return (f"no filesystem of its own could be mounted: its size was measured every {POLL_SECONDS:g} s, so "
                f"it may have gone past {self.limit >> 20} MiB by what it wrote within {POLL_SECONDS:g} s")

    def used(self) -> int:
        if self.kind == "tmpfs":
            st = os.statvfs(self.root)
            used = (st.f_blocks - st.f_bfree) * st.f_frsize
        else:
            used = max(0, usage(self.watched) - self._base)
        self.peak = max(self.peak, used)
        return used

    def full(self, *, now: float | None = None) -> bool:
        """Whether the run has reached its limit (for ``poll``: measured at most every ``POLL_SECONDS``)."""
        if self.kind == "tmpfs":
            try:
                st = os.statvfs(self.root)
            except OSError:
                return False
            self.peak = max(self.peak, (st.f_blocks - st.f_bfree) * st.f_frsize)
            return st.f_bavail * st.f_frsize < FULL_MARGIN or (st.f_files > 0 and st.f_favail == 0)
        t = time.monotonic() if now is None else now
        if t < self._next_poll:
            return False
        self._next_poll = t + POLL_SECONDS
        return self.used() > self.limit

    def close(self) -> None:
        """Throw everything away (unmount the tmpfs; a polled directory is left to its owner)."""
        if self.kind == "tmpfs":
            with contextlib.suppress(OSError):
                self.used()
            unmount(self.root)
