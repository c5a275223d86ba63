"""What one run of a check is asked to do (``CheckSpec``): the command, its time limit, and the part of the
repository's rules a run needs (its sandbox paths and limits, where its tests report, its setup step and caches),
with what the judging step adds (the plugins pytest loads, the candidate's own tests).

Rules:
  * The bot builds it where it queues a job, from the repository's rules; it travels in the job as JSON
    (``as_json``: the job's ``command``, ``timeout_s``, ``sandbox`` and ``cache``, as they always were) and a worker
    decodes it once (``from_json``); ``run_check`` takes it whole.
  * Decoding is lenient about what it does not know and strict about types: a value of the wrong type is left
    out (its default holds), a cache path that is not inside the checkout is dropped.
  * Where the run happens (the slot, the sandbox mode, the paths hidden, the secrets masked, the cache's place on
    the worker's disk) is the worker's, never the job's: ``run_check``'s other arguments.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verifier import cache as caches

DISK_LIMIT_MB = 2048  # what a run may write in all, by default (``repo add/set --disk-limit``)
MEMORY_MB = 4096  # the memory a run may use, by default (``repo add/set --memory-limit``)


@dataclass(frozen=True)
class Own:
    """The candidate's own tests, run apart: ``files`` (paths in the checkout) on ``commit`` (the merged commit); with
    ``whole``, the whole command there."""

    commit: str
    files: tuple[str, ...]
    whole: bool = False


@dataclass(frozen=True)
class Setup:
    """A repository's setup step, run before its check in the same checkout."""

    command: str
    network: bool = False  # the host's network for the setup (given only for a commit already on main)


@dataclass(frozen=True)
class CheckSpec:
    """One run's check: ``command`` under ``timeout_s``, in a view with the repository's ``sandbox_paths`` added,
    writing at most ``disk_limit_mb`` (None: unbounded) and using at most ``memory_mb``; its tests report through
    ``report``; ``setup`` runs first; ``cache_paths`` keyed by ``cache_key`` are read (and written when
    ``cache_write``: a commit on main); ``plugins`` are the entry-point plugins pytest loads (None: all); ``own``
    the candidate's own tests, run after a pass."""

    command: str
    timeout_s: float
    memory_mb: int = MEMORY_MB
    max_procs: int = 512
    sandbox_paths: tuple[str, ...] = ()
    disk_limit_mb: int | None = DISK_LIMIT_MB
    report: str = "pytest"
    setup: Setup | None = None
    cache_paths: tuple[str, ...] = ()
    cache_key: tuple[str, ...] = ()
    cache_write: bool = False
    cache_scope: str = ""  # a named check's name: its own line of cache generations (``cache.Request.scope``)
    plugins: tuple[str, ...] | None = None
    own: Own | None = None

    def cache_request(self, root: Path, *, pin: int | None = None) -> caches.Request | None:
        """Its caches on a worker's disk (``root``: the repository's there); None when it keeps none."""
        if not self.cache_paths:
            return None
        return caches.Request(root, self.cache_paths, self.cache_key, write=self.cache_write, pin=pin,
                              scope=self.cache_scope)

    def as_json(self) -> dict[str, Any]:
        """The job's columns: ``command``, ``timeout_s``, ``sandbox`` and ``cache`` (None without caches or a
        setup)."""
        sandbox: dict[str, Any] = {"paths": list(self.sandbox_paths), "disk_limit_mb": self.disk_limit_mb,
                                   "memory_mb": self.memory_mb, "report": self.report}
        if self.plugins is not None:
            sandbox["plugins"] = list(self.plugins)
        if self.own is not None:
            sandbox["own"] = {"commit": self.own.commit, "files": list(self.own.files), "whole": self.own.whole}
        cache = None
        if self.cache_paths or self.setup is not None:
            cache = {"paths": list(self.cache_paths), "key_files": list(self.cache_key), "write": self.cache_write,
                     "setup": self.setup.command if self.setup else None,
                     "setup_network": bool(self.setup and self.setup.network)}
            if self.cache_scope:
                cache["scope"] = self.cache_scope
        timeout = int(self.timeout_s) if float(self.timeout_s).is_integer() else self.timeout_s
        return {"command": self.command, "timeout_s": timeout, "sandbox": sandbox, "cache": cache}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CheckSpec:
        """The spec a job carries (``as_json``'s shape; a job from before it was a spec reads the same)."""
        box: dict[str, Any] = data["sandbox"] if isinstance(data.get("sandbox"), dict) else {}
        want: dict[str, Any] = data["cache"] if isinstance(data.get("cache"), dict) else {}
        own, plugins, setup = box.get("own"), box.get("plugins"), want.get("setup")
        return cls(
            command=str(data["command"]), timeout_s=float(data["timeout_s"]),
            memory_mb=int(box.get("memory_mb") or MEMORY_MB),
            sandbox_paths=tuple(str(p) for p in box.get("paths") or [] if isinstance(p, str)),
            disk_limit_mb=int(box.get("disk_limit_mb") or DISK_LIMIT_MB), report=str(box.get("report") or "pytest"),
            setup=Setup(str(setup), bool(want.get("setup_network"))) if setup else None,
            cache_paths=tuple(p for p in want.get("paths") or [] if isinstance(p, str) and caches.valid_path(p)),
            cache_key=tuple(p for p in want.get("key_files") or [] if isinstance(p, str) and caches.valid_path(p)),
            cache_write=bool(want.get("write")),
            cache_scope=str(want["scope"]) if isinstance(want.get("scope"), str) else "",
            plugins=tuple(str(p) for p in plugins) if isinstance(plugins, list) else None,
            own=Own(str(own["commit"]), tuple(str(f) for f in own.get("files") or []), bool(own.get("whole")))
            if isinstance(own, dict) and isinstance(own.get("commit"), str) else None)
