"""The judgement as a typed record (``mergebot.models.judgement``, issue 42): the shapes the queue has always stored
read back as fields, old and damaged rows read without an exception, a judged run keeps its own outcome, and the
readers (messages, the verdict's tests, the forge's summary, the pages) format fields. Pure."""

from __future__ import annotations

from typing import Any

from mergebot import messages as say
from mergebot.forge import checkrun
from mergebot.landing.judge import evidence, verdicts
from mergebot.models.judgement import Comparison, HeldOut, Judged, Judgement
from mergebot.web import present
from verifier import compare as cmp
from verifier.outcomes import Outcomes
from verifier.runner import Result

BASELINE = Outcomes(source="pytest", tests={"t.py::a": "passed", "t.py::b": "passed", "t.py::c": "failed"})
NOW = Outcomes(source="pytest", tests={"t.py::a": "skipped", "t.py::c": "passed", "t.py::d": "passed"})


def stored_comparison() -> dict[str, Any]:
    """A comparison as ``judge.compare.hold`` writes it: the verifier's record, the changed tests, the acceptance."""
    record = cmp.compare(BASELINE, NOW, where={"job": 7, "commit": "m" * 40}).record()
    record["changed"] = ["t.py::c"]
    record["acceptance"] = {"files": ["t_accept.py"], "failed": [{"id": "t_accept.py::x", "now": "failed"}]}
    return record


def run(outcome: str = "pass", **tests: Any) -> Result:
    return Result("m" * 40, "t" * 40, "pytest -q", outcome, 0, 10, "", "", 0, "d" * 64, failing_tests=["t.py::a"],
                  tests={"source": "pytest", "counts": {"passed": 2}, "packed": "xyz", **tests})


def test_each_stored_shape_reads_as_fields_and_writes_back_the_same() -> None:
    tests = {"comparison": stored_comparison(), "held_out": {"outcome": "fail", "failing": ["h.py::t"]},
             "own": {"outcome": "pass", "files": ["t_new.py"], "counts": {"passed": 1}},
             "reset": {"restored": [], "dropped": ["t_new.py"], "kept": [], "own": ["t_new.py"]}}
    j = Judgement.from_json(tests, "held_out_failed")
    assert j.comparison is not None and j.acceptance is not None and j.held_out is not None
    assert [(c.id, c.was, c.now) for c in j.comparison.weakened] == [("t.py::a", "passed", "skipped"),
                                                                     ("t.py::b", "passed", "missing")]
    assert (j.comparison.passed_before, j.comparison.weakened_count, j.comparison.added) == (2, 2, ("t.py::d",))
    assert j.changed == ("t.py::c",) and j.acceptance.failed[0].id == "t_accept.py::x"
    assert j.held_out.named == ("h.py::t",) and j.own is not None and j.own["outcome"] == "pass"
    assert j.as_json() == tests  # what it read is what it writes: no data lost, no migration needed
    flood = {"comparison": {"verdict": "report_flood"}}
    assert Judgement.from_json(flood, "report_flood").as_json() == flood


def test_old_and_damaged_rows_read_as_absent_never_as_an_exception() -> None:
    damaged: list[Any] = [None, {}, "x", {"comparison": {}}, {"comparison": "x", "held_out": 3, "own": [1], "reset": 0}]
    for tests in damaged:
        j = Judgement.from_json(tests, "pass")
        assert (j.comparison, j.held_out, j.own, j.reset) == (None, None, None, None), tests
    old = Judgement.from_json({"comparison": {"verdict": "tests_weakened", "weakened": [{"id": "a", "now": "failed"},
                                                                                        "junk"]}}, "tests_weakened")
    assert old.comparison is not None and old.comparison.weakened_count == 1  # counted from the list it kept
    assert old.comparison == Comparison("tests_weakened", weakened=old.comparison.weakened, weakened_count=1)
    assert old.changed == () and old.acceptance is None  # rows from before changed tests and acceptance were kept
    assert Judgement.of_record({"outcome": "pass", "tests": {"held_out": {"outcome": "pass"}}}).held_out == \
        HeldOut("pass")
    assert Judgement.of_record(None) == Judgement("")


def test_a_judged_run_keeps_its_own_outcome_and_the_verdict_record_reads_the_judgement() -> None:
    """The run exited 0 (``pass``); the held-out checks judged it ``held_out_failed``. The Result is never rewritten:
    the verdict record (a candidate's ``verifier``) shows the judged kind and the run's own beside it."""
    mine = run()
    judged = Judged(mine, Judgement("held_out_failed", Comparison.from_json(stored_comparison()),
                                    HeldOut("fail", (), "a held-out test failed")))
    assert mine.outcome == "pass" and judged.run is mine and judged.outcome == "held_out_failed"
    assert judged.failing_tests == ["a held-out test failed"]  # never the run's own failing ids
    record = evidence.verdict_json(judged, judged.outcome, {"first": judged.as_json()})
    assert (record["outcome"], record["run_outcome"], record["failing_tests_from"]) == ("held_out_failed", "pass",
                                                                                         "held_out")
    assert "packed" not in record["tests"] and "packed" not in record["runs"]["first"]["tests"]
    assert Result.from_json(record).outcome == "held_out_failed"  # the record is the verdict's, not a Result to judge
    assert Judgement.of_record(record) == judged.judgement
    facts = verdicts.tests_facts(record)
    assert facts is not None and facts["held_out"] == {"outcome": "fail", "failing": [],
                                                       "unnamed": "a held-out test failed"}
    assert facts["comparison"]["changed"] == ["t.py::c"] and facts["counts"] == {"passed": 2}
    assert Judged.as_run(mine).judgement == Judgement("pass")


def test_the_readers_format_fields() -> None:
    j = Judgement.from_json({"comparison": stored_comparison(), "held_out": {"outcome": "fail", "failing": ["h::t"]}},
                            "tests_weakened")
    said = say.rejection(say.Rejection("tests_weakened", "main", "c" * 40, "pytest -q", merged_sha="e" * 40,
                                       run=run(), judgement=j))
    assert said.startswith("2 tests that pass on main") and "t.py::b (passed on main, missing now)" in said
    accepted = say.rejection(say.Rejection("acceptance_failed", "main", "c" * 40, run=run(), judgement=j))
    assert "t_accept.py::x (failed)" in accepted
    held = say.rejection(say.Rejection("held_out_failed", "main", "c" * 40, run=run(), judgement=j))
    assert "(h::t)" in held
    changed = say.rejection(say.Rejection("tests_changed", "main", "c" * 40, run=run(), judgement=j))
    assert "edits 1 existing test (t.py::c)" in changed
    summary = checkrun.comparison({"counts": {"passed": 2}, **j.as_json()})
    assert "- weakened: `t.py::a` passed on main, skipped now" in summary and "Held-out checks: fail" in summary
    view = present.tests_view({"outcome": "tests_weakened", "tests": {"source": "pytest", **j.as_json()}})
    assert view is not None and view.weakened[1].now == "missing" and view.added == 1 and view.changed == ("t.py::c",)
