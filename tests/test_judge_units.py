"""(Pure) The parts of the judgement that decide without I/O: the reset, the start-up and shadowing rules, the
bounded outcome reports, storable text, what a held-out run may tell, and how a check's pytest starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from mergebot.landing.intake.checks import shadowing
from mergebot.landing.judge import heldout
from mergebot.landing.judge.reset import DEFAULT_GLOBS, Allowed, Change, matches, plan
from verifier import outcomes, startup
from verifier.compare import only_deletes
from verifier.result import Result, storable

A, B = 1, 2


def test_test_paths_match_files_folders_and_names_anywhere() -> None:
    for path in ("test_a.py", "pkg/test_a.py", "a_test.py", "tests/helpers/data.json", "src/tests/x.py",
                 "test/conftest.py", "deep/er/conftest.py", "tests/__init__.py", "tests", "src/tests"):
        assert matches(path, DEFAULT_GLOBS), path
    for path in ("calc.py", "testing.py", "contest.py", "mytests/x.py", "src/test_data/x.json", "tests.py"):
        assert not matches(path, DEFAULT_GLOBS), path
    assert matches("qa/suite/a.py", ["qa/suite/"]) and not matches("qa/a.py", ["qa/suite/"])
    assert matches("spec/a_spec.py", ["*_spec.py"])


def test_the_reset_takes_mains_tests_and_runs_the_candidates_apart() -> None:
    got = plan([Change("calc.py", "modified", A), Change("tests/test_calc.py", "modified", A),
                Change("tests/test_new.py", "added", A), Change("tests/__init__.py", "added", A),
                Change("tests/helpers.py", "modified", A), Change("tests/test_old.py", "deleted", A),
                Change("tests/test_accept.py", "added", A)], globs=DEFAULT_GLOBS, accept={"tests/test_accept.py"})
    assert got.restore == ("tests/helpers.py", "tests/test_calc.py")
    assert got.drop == ("tests/__init__.py", "tests/test_new.py")
    assert got.own == ("tests/test_calc.py", "tests/test_new.py")  # modules only; never the acceptance tests
    assert got.kept == () and got.needed  # a deleted test stays deleted: the comparison judges it
    assert got.whole  # main's helper and a new __init__.py were taken: the run apart is the whole suite
    modules = plan([Change("tests/test_new.py", "added", A), Change("tests/test_calc.py", "modified", A)],
                   globs=DEFAULT_GLOBS)
    assert modules.own == ("tests/test_calc.py", "tests/test_new.py") and not modules.whole
    extra = plan([Change("app/tests.py", "modified", A), Change("__init__.py", "added", A)], globs=DEFAULT_GLOBS,
                 extra={"app/tests.py", "__init__.py"})  # what main's run collected, whatever the globs say
    assert extra.restore == ("app/tests.py",) and extra.drop == ("__init__.py",) and extra.whole
    assert not plan([Change("calc.py", "modified", A)], globs=DEFAULT_GLOBS).needed


def test_what_a_lead_allowed_stays_as_the_change_made_it() -> None:
    changes = [Change("tests/test_calc.py", "modified", A), Change("tests/conftest.py", "added", B),
               Change("tests/test_more.py", "modified", B, only_deletes=True), Change("tests/test_x.py", "added", A)]
    got = plan(changes, globs=DEFAULT_GLOBS, allowed={A: Allowed(behaviour=True), B: Allowed(removal=True)})
    assert got.kept == ("tests/test_calc.py", "tests/test_more.py")
    assert got.drop == ("tests/conftest.py", "tests/test_x.py") and got.own == ("tests/test_x.py",)
    got = plan(changes, globs=DEFAULT_GLOBS, allowed={B: Allowed(check=True)})
    assert "tests/conftest.py" in got.kept and "tests/test_calc.py" in got.restore


def test_a_removal_keeps_a_file_only_when_its_edit_only_deletes() -> None:
    main = ("import x\n\ndef test_a():\n    assert 1\n\nclass TestB:\n    def test_c(self): pass\n"
            "    def test_d(self): pass\n")
    assert only_deletes(main, "import x\n\nclass TestB:\n    def test_d(self): pass\n")
    assert not only_deletes(main, "import x\n\ndef test_a():\n    assert True\n")  # an edit beside the deletion
    assert not only_deletes(main, main + "\nadd = lambda a, b: 4\n") and not only_deletes(main, "def (")


def test_start_up_files_and_where_a_module_shadows() -> None:
    for path in (".pytest.ini", "sub/pytest.toml", ".pytest.toml", "sitecustomize.py", "x/usercustomize.py", "a.pth",
                 "x-1.0.dist-info/entry_points.txt", "x.egg-info/PKG-INFO", "__pycache__/a.cpython-311.pyc",
                 "lib/a.pyc", "conftest.py", "tox.ini"):
        assert startup.is_startup(path), path
    for path in ("setup.py", "pytest_helpers.py", "docs/pth.md", "pyc.txt"):
        assert not startup.is_startup(path), path
    names = {"json", "pytest", "_pytest", "typing", "email", "secrets"}
    packages, with_tests = {"pkg", "myapp", "myapp/email"}, {"checks"}
    roots = startup.path_roots({"", "src", "pkg", "myapp", "scripts", "checks"}, packages.__contains__,
                               with_tests.__contains__)
    assert roots == {"", "src", "checks"}
    assert startup.shadows("json.py", names, roots) and startup.shadows("_pytest/__init__.py", names, roots)
    assert startup.shadows("src/json.py", names, roots)  # src is no package: `pythonpath = src` puts it first
    assert startup.shadows("checks/json.py", names, roots)  # beside test modules pytest puts first
    assert not startup.shadows("pkg/json.py", names, roots)  # a package's own module: pkg.json
    assert not startup.shadows("myapp/email/__init__.py", names, roots)  # myapp.email
    assert not startup.shadows("scripts/secrets.py", names, roots)  # nothing puts scripts/ on sys.path
    assert startup.shadows("json.cpython-311-x86_64-linux-gnu.so", names, roots)
    assert not startup.shadows("jsonx.py", names, roots) and not startup.shadows("json.txt", names, roots)
    got = shadowing(["json.py", "tests/json.py", "pkg/typing.py", "pytest.py"], names, roots, DEFAULT_GLOBS)
    assert got == [("json.py", "json"), ("pytest.py", "pytest")]  # test paths are reset, so exempt


def test_the_shadowing_names_are_read_from_the_interpreter() -> None:
    names = startup.interpreter_modules()
    assert {"json", "os", "pytest", "_pytest", "pluggy", "sys"} <= names
    assert "mergebot_outcomes" not in names and "tests" not in names  # nothing of a caller's folder


def test_outcome_reports_are_bounded_and_a_flood_keeps_nothing() -> None:
    def line(**kw: object) -> str:
        return json.dumps(kw) + "\n"

    session = line(t="session", root="/x", plugins=["asyncio"])
    ok = outcomes.parse(session + "".join(line(t="r", id=f"t.py::test_{i}", when=w, o="passed")
                                          for i in range(3) for w in ("setup", "call", "teardown")))
    assert ok.counts() == {"passed": 3} and ok.plugins == ["asyncio"] and not ok.flood
    long_id = outcomes.parse(session + line(t="r", id="t.py::" + "x" * outcomes.MAX_ID, when="call", o="passed"))
    assert long_id.flood.startswith("a test id of") and long_id.none and long_id.record()["packed"] == ""
    # a later report of the same phase never undoes a failure
    twice = outcomes.parse(session + "".join(line(t="r", id="t.py::a", when=w, o="failed" if w == "call" else "passed")
                                             for w in ("setup", "call", "teardown"))
                           + line(t="r", id="t.py::a", when="call", o="passed"))
    assert twice.tests == {"t.py::a": "failed"}
    stored = outcomes.unpack(long_id.record())
    assert stored.flood and stored.none


@given(st.text())
def test_any_text_is_storable(text: str) -> None:
    got = storable({"k" + text: [text, {"n": text}]})
    flat = json.dumps(got, ensure_ascii=False)
    assert "\x00" not in flat and not any(0xD800 <= ord(c) <= 0xDFFF for c in flat)
    flat.encode("utf-8")


def test_a_held_out_run_tells_only_what_the_bot_finds_in_its_files() -> None:
    known = heldout.known_tests([("test_hidden.py", b"def test_a():\n    pass\n\nclass TestB:\n    def test_c(self):"
                                                    b"\n        pass\n")])
    assert heldout.named("test_hidden.py::test_a", known) == "test_hidden.py::test_a"
    assert heldout.named("../../held-out/test_hidden.py::test_a[secret-42]", known) == "test_hidden.py::test_a"
    assert heldout.named("test_hidden.py::TestB::test_c", known) == "test_hidden.py::TestB::test_c"
    for forged in ("SECRET TEXT", "test_hidden.py::SECRET", "other.py::test_a", "test_hidden.py"):
        assert heldout.named(forged, known) is None, forged

    def run(exit_code: int, tests: dict[str, str] | None) -> Result:
        record = outcomes.Outcomes(tests, source="pytest", sessions=1).record() if tests is not None else None
        return Result("c", "t", "cmd", "pass" if exit_code == 0 else "fail", exit_code, 1, "", "", 0, "",
                      tests=record)

    assert heldout.outcome_of(run(0, None), known) == "no_report"
    assert heldout.outcome_of(run(0, {}), known) == "no_report"
    assert heldout.outcome_of(run(0, {"test_hidden.py::test_a": "skipped"}), known) == "fail"  # a skip is no pass
    both = {"test_hidden.py::test_a": "passed", "test_hidden.py::TestB::test_c": "passed"}
    assert heldout.outcome_of(run(0, both), known) == "pass"
    stopped = run(0, {"test_hidden.py::test_a": "passed"})  # exit 0 after the first test: the other never ran
    assert heldout.outcome_of(stopped, known) == "fail"
    assert heldout.summary(stopped, known)["failing"] == ["test_hidden.py::TestB::test_c"]
    said = heldout.summary(run(1, {"test_hidden.py::test_a": "failed", "SECRET": "failed", **{
        "test_hidden.py::TestB::test_c": "passed"}}), known)
    assert said == {"outcome": "fail", "failing": ["test_hidden.py::test_a"], "unnamed": heldout.UNNAMED}  # no count


def test_how_a_checks_pytest_starts() -> None:
    assert "asyncio" in outcomes.installed_plugins()  # pytest-asyncio, in this environment
    env = outcomes.start_env(["asyncio", "bad name; rm -rf /", "no:mergebot_outcomes", "not_installed"],
                             only=["/c/tests/test_new.py"])
    assert env["PYTEST_ADDOPTS"].split(" -W ")[0] == "-p mergebot_outcomes -p asyncio"  # names it declares only
    assert env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] == "1" and json.loads(env["VERIFIER_ONLY"]) == ["/c/tests/test_new.py"]
    unknown = outcomes.start_env(None)
    assert unknown["PYTEST_ADDOPTS"] == "-p mergebot_outcomes" and "PYTEST_DISABLE_PLUGIN_AUTOLOAD" not in unknown


def test_a_repository_that_turns_warnings_into_errors_passes_under_the_checks_pytest(tmp_path: Path) -> None:
    # `-p asyncio` names a module the standard library already imported: pytest's "cannot be rewritten" warning was
    # in every check's log, and failed every run of a repository with `filterwarnings = error`.
    (tmp_path / "pytest.ini").write_text("[pytest]\nfilterwarnings =\n    error\nasyncio_default_fixture_loop_scope = "
                                         "function\n")
    (tmp_path / "test_one.py").write_text("def test_one():\n    assert 1 + 1 == 2\n")
    env = {**os.environ, **outcomes.start_env(sorted(outcomes.installed_plugins()))}
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, check=False, timeout=120)
    assert out.returncode == 0 and "1 passed" in out.stdout, out.stdout[-2000:] + out.stderr[-2000:]
    assert "cannot be rewritten" not in out.stdout + out.stderr


def test_a_jobs_suite_takes_its_own_tests_only_for_the_files_they_were_asked_to_run() -> None:
    from mergebot.landing.judge.compare import suite
    from mergebot.models import Job

    def packed(tests: dict[str, str]) -> dict[str, object]:
        return outcomes.Outcomes(tests, source="pytest", sessions=1).record()

    judged = {"tests/test_a.py::test_x": "passed", "tests/test_b.py::test_y": "passed"}
    own = {"tests/test_b.py::test_y": "passed", "tests/test_b.py::test_z": "passed",
           "tests/test_a.py::test_forged": "passed", "tests/test_a.py::test_x": "failed"}  # it names test_a.py too
    result = {"tests": packed(judged), "own": {"outcome": "pass", "tests": packed(own)}}
    job = Job(1, "r", "c", "cmd", 60, "candidate", "done", 1, 1, result=result,
              sandbox={"own": {"commit": "m", "files": ["tests/test_b.py"]}})
    assert suite(job).tests == {"tests/test_a.py::test_x": "passed", "tests/test_b.py::test_y": "passed",
                                "tests/test_b.py::test_z": "passed"}
    whole = Job(1, "r", "c", "cmd", 60, "candidate", "done", 1, 1, result=result,
                sandbox={"own": {"commit": "m", "files": [], "whole": True}})
    assert suite(whole).tests == own  # the whole suite ran apart: it is the merged tree's
