"""What one run of a check gave: the ``Result`` a worker reports and the queue judges.

A run's own outcome (pass, fail, timeout, error, disk_limit or memory_limit), never a verdict (flaky, pre-existing
and the rest are the queue's words); the bounded log (head, tail, size, digest of the masked log); how the run was
confined and limited; and each test's outcome. A run of a candidate's own tests that followed it is ``own``, a
result of its own; ``overall`` is the job's outcome. JSON in and out (``as_json``, ``from_json``: anything that
is not a result's JSON, a stored error among them, reads as an ``error`` result), masked on demand, and made
storable (``storable``: no NUL, no lone surrogate in any text) before it leaves the verifier.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from verifier.mask import Masker

NO_TESTS = 5  # pytest's exit status when it collected no test
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def storable(value: Any) -> Any:
    """``value`` (JSON-like: dicts, lists, strings, numbers) with every NUL and lone surrogate in its strings and keys
    replaced by U+FFFD: what PostgreSQL takes as text or JSON. The one place that makes a run's text storable."""
    if isinstance(value, str):
        return _UNSTORABLE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {storable(k): storable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [storable(v) for v in value]
    return value
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
    own: dict[str, Any] | None = None  # the candidate's own tests, run apart after this run passed (a Result's JSON)
    checks: list[dict[str, Any]] | None = None  # a run of named checks: each one's name, required, outcome, duration,
    # job (``verifier.checks.combine``); None for a single check

    @property
    def passed(self) -> bool:
        return self.outcome == "pass"

    @property
    def found_no_tests(self) -> bool:
        """pytest's exit 5: it ran, reported, and found no test to run."""
        return self.outcome == "fail" and self.exit_code == NO_TESTS and (self.tests or {}).get("source") == "pytest"

    @property
    def overall(self) -> str:
        """The outcome of the whole job: this run's, unless it passed and the candidate's own tests did not."""
        own = (self.own or {}).get("outcome")
        return str(own) if self.own is not None and self.passed and own != "pass" else self.outcome

    def as_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Result:
        """The result ``as_json`` gave (keys it does not know are ignored: a newer worker's extra fields). Anything
        else (an ``{"error": ...}`` the database stored for a job every worker lost, a damaged record) is an
        ``error`` result saying so: never a pass, never an exception in whoever reads it."""
        names = {f.name for f in fields(cls)}
        try:
            got = cls(**{k: v for k, v in data.items() if k in names})
        except TypeError:
            got = None
        if got is None or not all(isinstance(getattr(got, k), str) for k in ("commit_sha", "outcome", "log_head")):
            why = str(data.get("error") or "the run's result could not be read") if isinstance(data, dict) else ""
            why = why or "the run's result could not be read"
            sha = data.get("commit_sha") if isinstance(data, dict) else None
            return cls(sha if isinstance(sha, str) else "", "", str(data.get("command") or "")
                       if isinstance(data, dict) else "", "error", None, 0, why, "", len(why.encode()), "")
        return got

    def storable(self) -> Result:
        """This result with every text made storable (``storable``)."""
        return Result.from_json(storable(self.as_json()))

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
