"""What a check run here would see, and how each limit would be enforced, without running anything
(``mergebot verify --explain-sandbox``).
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from verifier import limits as limits_
from verifier import sandbox as sb
from verifier import view as views
from verifier.disk import RunFs
from verifier.runner import DISK_LIMIT_MB, MEMORY_MB


def explain(*, sandbox: str = "bwrap", timeout: float = 600, memory_mb: int = MEMORY_MB, max_procs: int = 512,
            sandbox_paths: Sequence[str] = (), disk_limit_mb: int | None = DISK_LIMIT_MB,
            hide: Sequence[Path | str] = (), slot: Path | None = None, bwrap: str = sb.BWRAP) -> dict[str, Any]:
    """What a check run here with these settings would see and how each limit would be enforced, without running
    anything (``mergebot verify --explain-sandbox``): ``text`` for people, the rest for machines."""
    problem = sb.bwrap_problem(bwrap) if sandbox != "none" else None
    mode = "none" if sandbox == "none" or (sandbox == "auto" and problem) else "bwrap"
    root = Path(slot or Path(tempfile.gettempdir()) / "mergebot-slot").absolute()
    disk = "none" if disk_limit_mb is None else ("tmpfs" if mode == "bwrap" and os.geteuid() == 0 else "poll")
    enforced = limits_.enforced(disk=disk, sandboxed=mode == "bwrap")
    lines = [f"sandbox: {mode}" + (f" (REFUSED: {problem})" if mode == "bwrap" and problem else ""),
             f"limits: {enforced}",
             f"  time {timeout:g} s; memory {memory_mb} MiB ({'resident and ' if enforced.memory == 'cgroup' else ''}"
             f"address space); processes {max_procs}" + ("" if enforced.pids == "cgroup" else " (not enforced)") +
             (f"; disk {disk_limit_mb} MiB written in all (the checkout's changes, /tmp, /dev/shm)"
              if disk_limit_mb is not None else "; disk unbounded") +
             f"; CPU {'at the least weight of a control group' if enforced.cpu == 'cgroup' else 'at SCHED_IDLE'}"]
    if disk == "poll":
        lines.append(f"  {RunFs(root / 'run', (disk_limit_mb or 0) << 20, 'poll').note}")
    view = None
    if mode == "bwrap":
        view = views.build(checkout=root / "tree", tmp=root / "run" / "tmp", shm=root / "run" / "shm",
                           extra=sandbox_paths, hide=hide)
        lines.append(view.explain())
    else:
        lines.append("what a check sees: everything the verifier can read (no sandbox: MERGEBOT_SANDBOX=none)")
    machine = limits_.machine()
    if machine.problems:
        lines.append("control groups: " + "; ".join(machine.problems))
    return {"sandbox": mode, "problem": problem, "enforced": str(enforced), "disk_limit_mb": disk_limit_mb,
            "memory_mb": memory_mb, "max_procs": max_procs, "timeout_s": timeout,
            "view": [dataclasses.asdict(m) for m in view.mounts] if view else None,
            "left_out": [list(x) for x in view.left_out] if view else [], "text": "\n".join(lines)}
