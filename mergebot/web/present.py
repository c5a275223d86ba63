"""Pure presentation for the pages: parsing filters, shaping rows into what templates show. No I/O here.

Rules:
  * Query strings are untrusted: every filter is parsed here into typed values or a readable complaint, and a
    bad value never reaches SQL (the page shows the complaint and the unfiltered list is not shown either).
  * Times are shown in UTC with an age ("4m ago"); shas short, with the full sha one hover away.
  * A tree window arrives as flat rows in path order (``page_tree_window``); ``nest`` turns them into nodes and
    says, per node, how many children the window left out, so the page can link to them instead of listing them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any
from urllib.parse import urlencode

from mergebot import messages as say
from mergebot.models.judgement import Acceptance, HeldOut, Judgement, TestChange

STATUSES = ("blocked", "ready", "running", "submitted", "landed", "failed", "cancelled")
CANDIDATE_STATUSES = ("queued", "verifying", "landing", "landed", "rejected", "superseded", "cancelled", "parked",
                      "awaiting_approval")
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
GREEN = frozenset({"pass", "flaky", "landed"})
RED = frozenset({"fail", "timeout", "error", "rejected", "failed", "disk_limit", "memory_limit"})


# -- small formatters (Jinja filters) ---------------------------------------------------------------------


def short(sha: str | None, n: int = 12) -> str:
    return (sha or "")[:n] or "—"


def when(at: datetime | None) -> str:
    if at is None:
        return "—"
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


# A unit ladder: the first step whose bound the value is under shows it (the last step's bound is infinite).
Ladder = tuple[tuple[float, Callable[[int], str]], ...]

_AGO: Ladder = (
    (0, lambda s: "just now"),
    (60, lambda s: f"{s}s"),
    (3600, lambda s: f"{s // 60}m"),
    (86400, lambda s: f"{s // 3600}h {s % 3600 // 60:02d}m"),
    (math.inf, lambda s: f"{s // 86400}d {s % 86400 // 3600}h"),
)
_DURATION: Ladder = (
    (1000, lambda ms: f"{ms} ms"),
    (60_000, lambda ms: f"{ms / 1000:.1f} s"),
    (math.inf, lambda ms: f"{ms // 60_000}m {ms % 60_000 // 1000:02d}s"),
)
_SIZE: Ladder = (
    (1024, lambda n: f"{n} B"),
    (1 << 20, lambda n: f"{n / 1024:.1f} KiB"),
    (math.inf, lambda n: f"{n / (1 << 20):.1f} MiB"),
)


def _scaled(value: int | None, ladder: Ladder) -> str:
    if value is None:
        return "—"
    return next(shown(value) for bound, shown in ladder if value < bound)


def ago(at: datetime | None, now: datetime | None = None) -> str:
    """How long ago, in the largest unit that fits: "12s", "4m", "3h 05m", "2d 4h"."""
    return _scaled(None if at is None else int(((now or datetime.now(UTC)) - at).total_seconds()), _AGO)


def duration(ms: int | None) -> str:
    return _scaled(ms, _DURATION)


def size(n: int | None) -> str:
    return _scaled(n, _SIZE)


def tone(status: str | None) -> str:
    """The CSS class of a status word: green for passed or landed, red for failed, grey otherwise."""
    if status in GREEN:
        return "good"
    if status in RED:
        return "bad"
    return "meh"


# -- redirects and paging ---------------------------------------------------------------------------------


def safe_next(value: str | None, default: str = "/ui/landed") -> str:
    """Where to go after logging in: a path on this site only (never "//host" or "http://...")."""
    if not value or not value.startswith("/") or value.startswith("//") or "\\" in value:
        return default
    if any(ord(ch) < 32 for ch in value):
        return default
    return value


def next_cursor(rows: list[dict[str, Any]], limit: int, key: str = "id") -> int | None:
    """The keyset cursor for the next page: the last row's key when the page was full, else None."""
    return int(rows[-1][key]) if rows and len(rows) >= limit else None


def link(path: str, **params: Any) -> str:
    kept = {k: v for k, v in params.items() if v not in (None, "")}
    return f"{path}?{urlencode(kept)}" if kept else path


def int_param(value: str | None, name: str, errors: list[str], *, lo: int = 0, hi: int = 2**62) -> int | None:
    if value is None or value.strip() == "":
        return None
    try:
        n = int(value)
    except ValueError:
        errors.append(f"{name} must be a whole number, not {value[:40]!r}")
        return None
    if not lo <= n <= hi:
        errors.append(f"{name} must be between {lo} and {hi}")
        return None
    return n


# -- landed filters ---------------------------------------------------------------------------------------


@dataclass
class LandedFilter:
    repo: str | None = None
    agent: str | None = None
    subtask: int | None = None
    since: date | None = None
    until: date | None = None
    before: int | None = None

    def params(self, **override: Any) -> dict[str, Any]:
        out: dict[str, Any] = {"repo": self.repo, "agent": self.agent, "subtask": self.subtask,
                               "since": self.since.isoformat() if self.since else None,
                               "until": self.until.isoformat() if self.until else None, "before": self.before}
        out.update(override)
        return out

    @property
    def active(self) -> bool:
        return any(v is not None for v in (self.repo, self.agent, self.subtask, self.since, self.until))


def parse_landed_filter(q: Mapping[str, str]) -> tuple[LandedFilter, list[str]]:
    """Typed filters from a query string, and what was wrong with it (empty when nothing was)."""
    errors: list[str] = []
    f = LandedFilter()
    for key in ("repo", "agent"):
        value = (q.get(key) or "").strip()
        if value:
            if NAME.match(value):
                setattr(f, key, value)
            else:
                errors.append(f"{key} must be a name (letters, digits, '.', '_', '-'), not {value[:40]!r}")
    f.subtask = int_param(q.get("subtask"), "subtask", errors, lo=1)
    f.before = int_param(q.get("before"), "before", errors, lo=1)
    for key in ("since", "until"):
        value = (q.get(key) or "").strip()
        if value:
            try:
                setattr(f, key, date.fromisoformat(value))
            except ValueError:
                errors.append(f"{key} must be a date like 2025-01-31, not {value[:40]!r}")
    if f.since and f.until and f.since > f.until:
        errors.append("since is after until: nothing can match")
    return f, errors


# -- the subtask tree -------------------------------------------------------------------------------------


@dataclass
class TreeNode:
    id: int
    title: str
    status: str
    owner: str | None
    depth: int
    children_total: int
    children_landed: int
    deps: list[dict[str, Any]]  # dependencies other than its own children (the first few)
    other_deps: int  # how many such dependencies there are
    child_deps: int  # how many of its children it waits on (an integration step waits on all of them)
    dependents: int
    priority: int = 0
    group_name: str | None = None
    children: list[TreeNode] = field(default_factory=list)

    @property
    def hidden_children(self) -> int:
        """Children that exist but are not in this window (the page links to them)."""
        return max(0, self.children_total - len(self.children))

    @property
    def unlisted_deps(self) -> int:
        return max(0, self.other_deps - len(self.deps))


def nest(rows: list[dict[str, Any]]) -> list[TreeNode]:
    """Rows of ``page_tree_window`` (ordered by path) into a forest of nodes, first level at the top."""
    top: list[TreeNode] = []
    by_id: dict[int, TreeNode] = {}
    for r in rows:
        node = TreeNode(id=r["id"], title=r["title"], status=r["status"], owner=r["owner"], depth=r["depth"],
                        children_total=r["children"], children_landed=r["children_landed"], deps=list(r["deps"]),
                        other_deps=r["other_deps"], child_deps=r["child_deps"], dependents=r["dependents"],
                        priority=r.get("priority", 0), group_name=r.get("group_name"))
        by_id[node.id] = node
        path = r["path"]
        parent = by_id.get(path[-2]) if len(path) > 1 else None
        (parent.children if parent is not None else top).append(node)
    return top


def count_nodes(nodes: list[TreeNode]) -> int:
    return sum(1 + count_nodes(n.children) for n in nodes)


def status_bar(counts: Mapping[str, int]) -> list[tuple[str, int, float, float]]:
    """(status, count, start, width) in lifecycle order, start and width in percent: a subtree's coloured bar."""
    total = sum(counts.values()) or 1
    out, start = [], 0.0
    for s in STATUSES:
        if counts.get(s):
            width = 100.0 * counts[s] / total
            out.append((s, counts[s], start, width))
            start += width
    return out


def finding_detail(detail: Mapping[str, Any], most: int = 10) -> list[tuple[str, str]]:
    """A reconciler finding's detail as (key, text) lines: shas shortened, long lists cut to ``most`` items."""

    def text(value: Any) -> str:
        if isinstance(value, str) and re.fullmatch(r"[0-9a-f]{40}([0-9a-f]{24})?", value):
            return value[:12]
        if isinstance(value, list):
            items = ", ".join(text(v) for v in value[:most])
            return items + (f" and {len(value) - most} more" if len(value) > most else "")
        return str(value)

    return [(k, text(detail[k])) for k in sorted(detail)]


# -- verifier logs ----------------------------------------------------------------------------------------


@dataclass
class LogView:
    label: str
    command: str
    outcome: str
    exit_code: int | None
    duration_ms: int | None
    sandbox: str
    size: int
    digest: str
    head: str
    tail: str
    commit_sha: str = ""

    @property
    def gap(self) -> int:
        """Bytes of the log kept neither in the head nor in the tail (0 when the whole log is shown)."""
        shown = len(self.head.encode("utf-8", "replace")) + len(self.tail.encode("utf-8", "replace"))
        return max(0, self.size - shown) if self.tail else 0


def log_views(verifier: Mapping[str, Any] | None, label: str = "run") -> list[LogView]:
    """The verifier record of a candidate or a job as logs to show: the deciding run, then earlier runs."""
    if not verifier:
        return []

    def one(v: Mapping[str, Any], name: str) -> LogView:
        exit_code = v.get("exit_code")
        return LogView(label=name, command=str(v.get("command", "")), outcome=str(v.get("outcome", "?")),
                       exit_code=int(exit_code) if isinstance(exit_code, int) else None,
                       duration_ms=v.get("duration_ms") if isinstance(v.get("duration_ms"), int) else None,
                       sandbox=str(v.get("sandbox") or "none"), size=int(v.get("log_size") or 0),
                       digest=str(v.get("log_digest") or ""), head=str(v.get("log_head") or ""),
                       tail=str(v.get("log_tail") or ""), commit_sha=str(v.get("commit_sha") or ""))

    views = [one(verifier, label)]
    runs = verifier.get("runs")
    if isinstance(runs, Mapping):
        for name, run in runs.items():
            if isinstance(run, Mapping) and run.get("log_digest") != verifier.get("log_digest"):
                views.append(one(run, f"{name} run"))
    return views


@dataclass(frozen=True)
class TestsView:
    """A run's tests as a candidate's or landing's page shows them: its counts and what they came to against
    main's (``mergebot.landing.judge``), the test paths it took from main, the change's own tests, its acceptance
    tests and held-out checks."""

    source: str
    counts: dict[str, int]
    passed_before: int | None
    passed_now: int | None
    weakened: tuple[TestChange, ...]
    removed: tuple[str, ...]
    added: int
    changed: tuple[str, ...]
    acceptance: Acceptance | None
    held_out: HeldOut | None
    problem: str
    own: Mapping[str, Any] | None = None  # the change's own tests, run apart on the merged commit
    reset: Mapping[str, Any] | None = None  # the test paths the judging run took from main (restored, dropped), or kept


def tests_view(verifier: Mapping[str, Any] | None) -> TestsView | None:
    """The tests of a verifier record (a candidate's deciding run) and its judgement, or None when it has none."""
    tests = (verifier or {}).get("tests")
    if not isinstance(tests, Mapping):
        return None
    judged = Judgement.of_record(verifier)
    c = judged.comparison
    return TestsView(source=str(tests.get("source") or ""), counts=dict(tests.get("counts") or {}),
                     passed_before=c.passed_before if c else None, passed_now=c.passed_now if c else None,
                     weakened=c.weakened if c else (), removed=c.removed if c else (), added=c.added_count if c else 0,
                     changed=judged.changed, acceptance=judged.acceptance, held_out=judged.held_out,
                     problem=str(tests.get("flood") or tests.get("problem") or ""), own=judged.own,
                     reset=judged.reset)


# -- the queue --------------------------------------------------------------------------------------------


def event_data(fingerprint: str) -> str:
    """One server-sent event announcing a new queue state (the data is the state's fingerprint)."""
    clean = fingerprint.replace("\n", " ").replace("\r", " ")
    return f"event: queue\ndata: {clean}\n\n"


def repo_state(repo: Mapping[str, Any]) -> tuple[str, str]:
    """What a repository's queue is doing, as its badge's word and tone (``page_queue_repos``' row): "paused"
    (amber) and "main red" (red) first, whatever waits; else "landing" (green) only while a candidate is in
    flight, "waiting" when candidates are queued and none has started yet, and "idle" when the queue is empty
    (both grey: nothing is wrong, and nothing is landing)."""
    if repo["paused"]:
        return "paused", "warn"
    if repo["red_since"]:
        return "main red", "bad"
    if repo["in_flight"]:
        return "landing", "good"
    return ("waiting", "meh") if repo["queued"] else ("idle", "meh")


def unattested_text(repo: Mapping[str, Any]) -> str | None:
    """What the queue page says of a repository whose main holds commits no landing statement explains (the audit
    of main), until an admin resumes it; None when it holds none."""
    found = repo.get("unattested")
    if not found:
        return None
    return say.unattested_summary(list(found.get("commits") or []), int(found.get("count") or 0))


def verdict_text(message: str | None) -> tuple[str, str]:
    """A verdict's text as its sentence (the first line) and the output it quotes after it (a check's excerpt,
    pytest's lines as they were), to show preformatted; either may be empty."""
    head, _, rest = (message or "").strip("\n").partition("\n")
    return head, rest.strip("\n")


def summary(text: str | None, most: int = 200) -> str:
    """A long reason as a table row shows it: its first line, cut to ``most`` characters (the rest is on the
    candidate's page)."""
    first = (text or "").strip().split("\n", 1)[0]
    return first if len(first) <= most else first[:most - 1] + "…"


def cut(text: str | None, most: int = 200) -> bool:
    """Whether ``summary`` leaves something of ``text`` out."""
    whole = (text or "").strip()
    return whole != summary(whole, most)
