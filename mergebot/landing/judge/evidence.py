"""What a candidate's ``verifier`` record holds: the deciding run with the verdict as its outcome and its judgement in
its ``tests`` (``Judged.as_json``; ``Judgement.of_record`` reads it back), and the other runs the verdict took (a
failed first run and its passing retry, for a flaky one).

Each run's per-test outcomes stay with its job (``tests.packed``); here only their counts and the comparison.
Pure.
"""

from __future__ import annotations

from typing import Any

from mergebot.models import Candidate
from mergebot.models.judgement import Judged


def verdict_json(run: Judged, outcome: str, runs: dict[str, Any]) -> dict[str, Any]:
    """What a candidate's ``verifier`` shows: the deciding run, with the verdict as its outcome, and the runs. Each
    run's per-test outcomes stay with its job (``tests.packed``): here only their counts and the comparison."""
    return {**_unpacked(run.as_json()), "outcome": outcome, **({"runs": runs_json(runs)} if runs else {})}


def flaky_runs(cand: Candidate) -> dict[str, Any] | None:
    """The runs of a candidate that failed once and passed a retry of the same commit before main moved on (the
    window judged it apart and put it back in the queue): it lands as ``flaky``, with those runs as evidence."""
    verdict = cand.verdict or {}
    return dict(verdict.get("flaky_runs") or {}) if verdict.get("was_flaky") else None


def runs_json(runs: dict[str, Any]) -> dict[str, Any]:
    """A verdict's runs as a candidate records them: each run's tests without their packed outcomes."""
    return {k: _unpacked(v) if isinstance(v, dict) else v for k, v in runs.items()}


def _unpacked(run: dict[str, Any]) -> dict[str, Any]:
    """A run without its packed outcomes, and without the raw record of the candidate's own tests' run (its summary is
    ``tests.own``; when that run decided, it is the deciding run itself)."""
    tests = run.get("tests")
    run = {k: v for k, v in run.items() if k != "own"}
    if isinstance(tests, dict) and "packed" in tests:
        return {**run, "tests": {k: v for k, v in tests.items() if k != "packed"}}
    return run
