"""A run's own unprivileged uid, where no pids control group can be made: ``RLIMIT_NPROC`` then holds for the run
alone, and every process of the run is found, and killed, by its uid.

Each slot has its uid (``run_uid``), far above any account's; the sandbox switches to it inside bubblewrap
(``verifier.sandbox``), and ``verifier.limits`` re-exports these for the runner.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
import zlib

log = logging.getLogger("verifier.limits")
UID_BASE = 0x30000000  # the runs' own uids (no pids group): far above any account's
UID_SPAN = 1 << 20


def run_uid(key: str) -> int:
    """The unprivileged uid a run keyed by ``key`` (its slot) runs as where no pids group can be made: the same
    for every run of the slot, different (but for a one-in-a-million clash) from other slots'."""
    return UID_BASE + zlib.crc32(key.encode()) % UID_SPAN


def uid_processes(uid: int) -> list[int]:
    """Processes whose real uid is ``uid``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as f:
                for line in f:
                    if line.startswith("Uid:"):
                        if int(line.split()[1]) == uid:
                            found.append(int(entry))
                        break
        except (OSError, ValueError):
            continue
    return found


def kill_uid(uid: int) -> None:
    """SIGKILL every process of ``uid`` until none is left (a process may fork while it is being killed)."""
    for _ in range(200):
        pids = uid_processes(uid)
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.002)
    log.warning("processes of uid %s left after repeated kills", uid)
