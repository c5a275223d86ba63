"""A judgement: what the queue made of a finished run, as a typed record beside the run, never written into it.

Rules:
  * A ``Result`` is the worker's record of one run: its ``outcome`` is the run's own (pass, fail, timeout, error, a
    limit) and stays so. What the queue concluded from it is a ``Judgement``: ``kind`` (``pass``, the run's own
    outcome, or a judged kind such as ``tests_weakened`` or ``held_out_failed``), the comparison with main's tests
    (with the acceptance tests and the changed tests), the held-out checks' summary, the own tests' summary, the
    reset of the test paths, and the failing tests the verdict names.
  * ``Judged`` is the pair the verdict policy reads: the deciding run, untouched, and its judgement; its ``outcome``
    is the judged one.
  * Stored shape: a candidate's ``verifier`` record keeps the judgement where it always was, as keys of the deciding
    run's ``tests`` (``comparison``, ``held_out``, ``own``, ``reset``) and the verdict as its ``outcome``.
    ``as_json`` writes those keys; ``from_json`` reads them from any row, old or new (a missing or damaged key reads
    as absent, never as an exception). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from verifier.result import Result


def _dict(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _strs(value: Any) -> tuple[str, ...]:
    return tuple(str(v) for v in value) if isinstance(value, list | tuple) else ()


def _int(value: Any, default: int = 0) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


@dataclass(frozen=True)
class TestChange:
    """One test of main's that does not hold: its id, what it was on main, what it is now."""

    id: str
    now: str
    was: str = ""

    @classmethod
    def read(cls, items: Any) -> tuple[TestChange, ...]:
        return tuple(cls(str(c.get("id", "")), str(c.get("now", "")), str(c.get("was", "")))
                     for c in (items if isinstance(items, list) else []) if isinstance(c, Mapping))


@dataclass(frozen=True)
class Acceptance:
    """The subtask's acceptance tests: the files attached, and the tests of them that did not pass."""

    files: tuple[str, ...] = ()
    failed: tuple[TestChange, ...] = ()

    def as_json(self) -> dict[str, Any]:
        return {"files": list(self.files), "failed": [{"id": c.id, "now": c.now} for c in self.failed]}


@dataclass(frozen=True)
class Comparison:
    """The run's tests held to main's (``verifier.compare``): each list is cut at its bound, each count is whole."""

    verdict: str = ""  # "" (fine), "tests_weakened", "no_report" or "report_flood"
    passed_before: int = 0
    passed_now: int = 0
    weakened: tuple[TestChange, ...] = ()
    weakened_count: int = 0
    removed: tuple[str, ...] = ()
    removed_count: int = 0
    added: tuple[str, ...] = ()
    added_count: int = 0
    changed: tuple[str, ...] = ()  # existing tests whose code the change edits
    baseline: Mapping[str, Any] = field(default_factory=dict)  # where main's outcomes came from
    acceptance: Acceptance | None = None
    old_tests_failing: tuple[str, ...] | None = None  # main's version of changed tests, failing on the change

    @classmethod
    def from_json(cls, data: Any) -> Comparison | None:
        if not isinstance(data, Mapping) or not data:
            return None
        acc = data.get("acceptance")
        old = data.get("old_tests")
        weakened = TestChange.read(data.get("weakened"))
        removed, added = _strs(data.get("removed")), _strs(data.get("added"))
        return cls(str(data.get("verdict") or ""), _int(data.get("passed_before")), _int(data.get("passed_now")),
                   weakened, _int(data.get("weakened_count"), len(weakened)), removed,
                   _int(data.get("removed_count"), len(removed)), added, _int(data.get("added_count"), len(added)),
                   _strs(data.get("changed")), dict(_dict(data.get("baseline"))),
                   Acceptance(_strs(acc.get("files")), TestChange.read(acc.get("failed")))
                   if isinstance(acc, Mapping) else None,
                   _strs(old.get("failing")) if isinstance(old, Mapping) else None)

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"verdict": self.verdict}
        if self.verdict != "report_flood":
            out |= {"passed_before": self.passed_before, "passed_now": self.passed_now,
                    "weakened_count": self.weakened_count, "removed_count": self.removed_count,
                    "added_count": self.added_count,
                    "weakened": [{"id": c.id, "was": c.was, "now": c.now} for c in self.weakened],
                    "removed": list(self.removed), "added": list(self.added), "baseline": dict(self.baseline),
                    "changed": list(self.changed)}
        if self.acceptance is not None:
            out["acceptance"] = self.acceptance.as_json()
        if self.old_tests_failing is not None:
            out["old_tests"] = {"failing": list(self.old_tests_failing)}
        return out


@dataclass(frozen=True)
class HeldOut:
    """What an agent may learn of the held-out run (``mergebot.landing.judge.heldout.summary``)."""

    outcome: str
    failing: tuple[str, ...] = ()
    unnamed: str = ""  # said when a failing held-out test has no name an agent may see

    @classmethod
    def from_json(cls, data: Any) -> HeldOut | None:
        if not isinstance(data, Mapping) or not isinstance(data.get("outcome"), str):
            return None
        return cls(data["outcome"], _strs(data.get("failing")), str(data.get("unnamed") or ""))

    def as_json(self) -> dict[str, Any]:
        return {"outcome": self.outcome, "failing": list(self.failing), **({"unnamed": self.unnamed}
                                                                           if self.unnamed else {})}

    @property
    def named(self) -> tuple[str, ...]:
        """What a verdict names: the failing ids, else the sentence for the unnamed ones."""
        return self.failing or ((self.unnamed,) if self.unnamed else ())


@dataclass(frozen=True)
class Judgement:
    """What a run came to (see the module's rules)."""

    kind: str
    comparison: Comparison | None = None
    held_out: HeldOut | None = None
    own: Mapping[str, Any] | None = None  # the own tests' run: outcome, files, counts, failing, commit, whole
    reset: Mapping[str, Any] | None = None  # the test paths restored, dropped and kept (``judge.reset``)

    @property
    def passed(self) -> bool:
        return self.kind == "pass"

    @property
    def changed(self) -> tuple[str, ...]:
        return self.comparison.changed if self.comparison is not None else ()

    @property
    def acceptance(self) -> Acceptance | None:
        return self.comparison.acceptance if self.comparison is not None else None

    def as_json(self) -> dict[str, Any]:
        """The keys a verdict's ``tests`` record holds (``from_json`` reads them back)."""
        out: dict[str, Any] = {}
        if self.comparison is not None:
            out["comparison"] = self.comparison.as_json()
        if self.held_out is not None:
            out["held_out"] = self.held_out.as_json()
        if self.own is not None:
            out["own"] = dict(self.own)
        if self.reset:
            out["reset"] = dict(self.reset)
        return out

    @classmethod
    def from_json(cls, tests: Any, kind: str) -> Judgement:
        """The judgement in a run's ``tests`` record (a candidate's ``verifier["tests"]``), with the verdict's
        ``kind`` (the record's ``outcome``)."""
        t = _dict(tests)
        own = t.get("own")
        reset = t.get("reset")
        return cls(kind, Comparison.from_json(t.get("comparison")), HeldOut.from_json(t.get("held_out")),
                   dict(own) if isinstance(own, Mapping) else None, dict(reset) if isinstance(reset, Mapping) else None)

    @classmethod
    def of_record(cls, verifier: Any) -> Judgement:
        """The judgement of a candidate's stored ``verifier`` record (empty when there is none)."""
        v = _dict(verifier)
        return cls.from_json(v.get("tests"), str(v.get("outcome") or ""))


@dataclass(frozen=True)
class Judged:
    """A deciding run as the worker reported it, and its judgement: what the verdict policy reads."""

    run: Result
    judgement: Judgement

    @classmethod
    def as_run(cls, run: Result) -> Judged:
        """A run nothing judged beyond its own outcome (main's base run, a run that never finished)."""
        return cls(run, Judgement(run.outcome))

    @property
    def outcome(self) -> str:
        return self.judgement.kind

    @property
    def passed(self) -> bool:
        return self.judgement.passed

    @property
    def failing_tests(self) -> list[str]:
        """The tests a verdict names: the held-out ones when the held-out checks decided, else the run's."""
        held = self.judgement.held_out
        if held is not None and held.outcome != "pass":
            return list(held.named)
        return list(self.run.failing_tests)

    def with_kind(self, kind: str, **more: Any) -> Judged:
        return Judged(self.run, replace(self.judgement, kind=kind, **more))

    def as_json(self) -> dict[str, Any]:
        """The run as a verdict records it: the run's own record, with the judgement in its ``tests`` and the judged
        kind as ``outcome`` (the run's own stays in its job's row and in ``run_outcome``)."""
        data = self.run.as_json()
        held = self.judgement.held_out
        source = {"failing_tests_from": "held_out"} if held is not None and held.outcome != "pass" else {}
        return {**data, "outcome": self.outcome, "run_outcome": self.run.outcome, "failing_tests": self.failing_tests,
                **source, "tests": {**(data.get("tests") or {}), **self.judgement.as_json()}}
