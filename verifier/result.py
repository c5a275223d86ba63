"""What one run of a check gave: the ``Result`` a worker reports and the queue judges.

A run's own outcome (pass, fail, timeout, error, disk_limit or memory_limit), never a verdict (flaky, pre-existing
and the rest are the queue's words); the bounded log (head, tail, size, digest of the masked log); how the run was
confined and limited; and each test's outcome. JSON in and out (``as_json``, ``from_json``), masked on demand.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from verifier.mask import Masker

EXCERPT_WIDTH = 100  # characters per line of a result's excerpt (15 lines of it fit a subtask's 2,000-character reason)


@dataclass
class Result:
    commit_sha: str
    tree_sha: str
    command: str
    outcome: str  # pass, fail, timeout or error: this run's, never a verdict's (flaky is the queue's word)
    exit_code: int | None
    duration_ms: int
    log_head: str
    log_tail: str
    log_size: int
    log_digest: str
    sandbox: str = "none"  # bwrap or none
    failing_tests: list[str] = field(default_factory=list)  # a failed run's tests (``verifier.reports``)
    failing_tests_from: str = ""  # "junit" (a report the check left), "log" (pytest's summary) or "" (none named)
    cache: dict[str, Any] | None = None  # what the run did with the repository's caches (``verifier.cache.Use``)
    setup: dict[str, Any] | None = None  # the setup step before the check: command, exit code, time, network
    limits: dict[str, Any] | None = None  # how it was limited: ``enforced`` ("cpu=cgroup memory=... disk=...
    # pids=..."), the bounds (timeout_s, memory_mb, max_procs, disk_limit_mb), the peaks, and for a polled disk
    # limit the bound polling gives (disk_note)
    tests: dict[str, Any] | None = None  # each test's outcome (``verifier.outcomes``): source, counts, packed

    @property
    def passed(self) -> bool:
        return self.outcome == "pass"

    def as_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Result:
        """The result ``as_json`` gave (keys it does not know are ignored: a newer worker's extra fields)."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    def masked(self, mask: Masker) -> Result:
        """This result with every secret masked in everything it says; the edges of the log's head and tail
        also lose any piece of one (a worker that did not know a secret may have cut it in two)."""
        data = mask.json(self.as_json())
        assert isinstance(data, dict)
        if self.log_tail or self.log_size > len(self.log_head.encode()):
            data["log_head"] = mask.cut(data["log_head"], head=True)
        if self.log_tail:
            data["log_tail"] = mask.cut(data["log_tail"], tail=True)
        return Result.from_json(data)

    def excerpt(self, lines: int = 15, width: int = EXCERPT_WIDTH) -> str:
        """The log's last ``lines`` lines, each cut to ``width`` characters (a check may print one huge line; the
        whole log stays in ``log_head`` and ``log_tail``)."""
        tail = (self.log_tail or self.log_head).rstrip().splitlines()
        return "\n".join(line if len(line) <= width else line[:width - 1] + "…" for line in tail[-lines:])
