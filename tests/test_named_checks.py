"""Named checks (issue 43): a repository declares several checks; the checks of one merged commit run in parallel,
each in a job of its own on its own verifier slot, and the candidate passes when every required check passes.

Units: ``verifier.checks.combine`` (the one result of a group) and the rules' sentences for bad ``--check`` values;
the group's jobs in the store (never claimed, settled by its last child, lost and cancelled children). End to end
(one real server, three workers, real pushes, the checks under bubblewrap): the three checks of one landing are
queued together as jobs any worker takes; a failing required check names itself in the verdict and on the
candidate page; an optional check's failure does not block the landing; on a GitHub App's repository each named
check gets a check run of its own.
"""

from __future__ import annotations

import asyncio
import html
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pygit2
import pytest
from psycopg.types.json import Jsonb

from mergebot.auth import Role
from mergebot.cli import main
from mergebot.cli.parser import build_parser
from mergebot.cli.repos import cmd_repo_add, rules_given, with_check_rules
from mergebot.db.database import Database
from mergebot.errors import Invalid
from mergebot.landing.judge import runs, told
from mergebot.landing.main.repos import add_repo, repos_root
from mergebot.models import Candidate, Repo
from mergebot.rules import Rules, RulesChange
from tests.support.bot import PYTEST, BotProcess, Fleet, make_project, repo_added_by_cli, stop_keepers
from tests.test_github_app import AppFleet, final_check_run
from tests.test_github_app import app_fleet as app_fleet  # the fixtures, shared with the GitHub App's tests
from tests.test_github_app import forge as forge
from tests.test_github_app import keys as keys
from verifier import cache as caches
from verifier import checks as named
from verifier import outcomes
from verifier.result import Result
from verifier.spec import CheckSpec

TREE = "a" * 40


def ran(name: str, outcome: str, *, required: bool = True, tests: dict[str, str] | None = None, ms: int = 1000,
        tree: str = TREE, job: int = 1) -> named.Ran:
    record = outcomes.Outcomes(dict(tests), source="pytest", sessions=1).record() if tests is not None else None
    return named.Ran(name, required, job, Result("c" * 40, tree, f"run {name}", outcome, 0 if outcome == "pass" else 1,
                                                 ms, f"{name} says hello\n", f"{name} ends\n", 10, "d" * 64,
                                                 tests=record, failing_tests=["t.py::x"] if outcome == "fail" else []))


# -- the combined result ------------------------------------------------------------------------------------------


def test_every_required_check_passing_passes_and_an_optional_failure_is_recorded_not_blocking() -> None:
    got = named.combine("c" * 40, "checks unit, lint, style", [
        ran("unit", "pass", tests={"tests/test_a.py::test_x": "passed"}, ms=3000, job=11),
        ran("lint", "pass", tests={"tests/test_a.py::test_x": "failed"}, ms=1000, job=12),
        ran("style", "fail", required=False, ms=2000, job=13)])
    assert got.outcome == "pass" and got.exit_code == 0 and got.failing_tests == []
    assert got.duration_ms == 3000 and got.tree_sha == TREE and got.command == "checks unit, lint, style"
    assert got.checks == [{"name": "unit", "required": True, "outcome": "pass", "duration_ms": 3000, "job": 11},
                          {"name": "lint", "required": True, "outcome": "pass", "duration_ms": 1000, "job": 12},
                          {"name": "style", "required": False, "outcome": "fail", "duration_ms": 2000, "job": 13}]
    # the first check's ids stay as they are; every other check's are prefixed with its name: compared per check
    tests = outcomes.unpack(got.tests).tests
    assert tests == {"tests/test_a.py::test_x": "passed", "lint::tests/test_a.py::test_x": "failed"}
    # each check's log under a header naming it
    assert got.log_head.index("check unit (required): pass") < got.log_head.index("unit says hello")
    assert "check style (optional): fail" in got.log_head and "style says hello" in got.log_head
    assert got.log_size == 30


def test_the_first_failing_required_check_decides_with_its_outcome_tests_and_tail() -> None:
    got = named.combine("c" * 40, "g", [ran("unit", "pass"), ran("lint", "timeout"), ran("types", "fail")])
    assert got.outcome == "timeout" and got.log_tail.startswith("===== check lint (required): timeout")
    got = named.combine("c" * 40, "g", [ran("unit", "pass"), ran("types", "fail")])
    assert got.outcome == "fail" and got.exit_code == 1 and got.failing_tests == ["types::t.py::x"]


def test_a_check_without_a_result_is_an_error_and_checks_on_other_trees_vouch_for_nothing() -> None:
    gone = named.combine("c" * 40, "g", [ran("unit", "pass"), named.Ran("lint", True, 2, None)])
    assert gone.outcome == "error" and "this check gave no result" in gone.log_head
    split = named.combine("c" * 40, "g", [ran("unit", "pass"), ran("lint", "pass", tree="b" * 40)])
    assert split.outcome == "error" and split.tree_sha == "" and "different trees" in split.log_head


def test_one_check_s_flood_floods_the_whole() -> None:
    flood = named.Ran("lint", True, 2, Result("c" * 40, TREE, "x", "pass", 0, 1, "", "", 0, "",
                                              tests={"source": "pytest", "flood": "more than 100000 tests"}))
    got = named.combine("c" * 40, "g", [ran("unit", "pass", tests={"t.py::a": "passed"}), flood])
    assert outcomes.unpack(got.tests).flood == "check lint: more than 100000 tests"


# -- the rules ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("checks", "words"), [
    ([{"name": "Lint", "command": "ruff"}], "'Lint' is not a check name"),
    ([{"name": "x" * 41, "command": "ruff"}], "is not a check name"),
    ([{"name": "lint", "command": " "}], "check 'lint': its command is 1 to 4000 characters"),
    ([{"name": "lint", "command": "a"}, {"name": "lint", "command": "b"}], "check 'lint' is named twice"),
    ([{"name": f"c{i}", "command": "true"} for i in range(11)], "at most 10 named checks"),
    ([{"name": "lint", "command": "a", "required": False}], "at least one must be required"),
    ([{"name": "lint", "command": "a", "timeout_s": 0}], "its timeout is 1 to 86400 seconds"),
    ([{"name": "lint", "command": "a", "shell": "sh"}], "'shell' is not part of a named check"),
])
def test_a_bad_named_check_is_a_sentence_naming_the_rule(checks: list[dict[str, Any]], words: str) -> None:
    for model, given in ((Rules, {"verifier_command": "true"}), (RulesChange, {})):
        with pytest.raises(Invalid) as e:
            model.of(**given, checks=checks)
        assert words in e.value.message and e.value.detail["field"] == "checks", e.value.message


@pytest.mark.parametrize(("own", "words"), [
    ({"setup": " "}, "check 'lint': --setup is a command of 1 to 4000 characters"),
    ({"setup": 3}, "check 'lint': its setup_command is text"),
    ({"cache_paths": ["../up"]}, "check 'lint': cache_paths '../up' is not a path inside the checkout"),
    ({"cache_paths": ".venv"}, "check 'lint': its cache_paths is a list of paths"),
    ({"cache_key": [".git/x"]}, "check 'lint': cache_key '.git/x' is not a path inside the checkout"),
    ({"cache_paths": [f"c{i}" for i in range(21)]}, "cache_paths: at most 20 paths"),
    ({"report": "nose"}, "check 'lint': --report is pytest or junit:PATH"),
    ({"report": "junit:/abs.xml"}, "check 'lint': --report is pytest or junit:PATH"),
])
def test_a_check_s_own_rules_are_checked_as_the_repository_s(own: dict[str, Any], words: str) -> None:
    with pytest.raises(Invalid) as e:
        Rules.of(verifier_command="true", checks=[{"name": "lint", "command": "ruff", **own}])
    assert words in e.value.message and e.value.detail["field"] == "checks", e.value.message


def test_a_check_s_own_rules_override_the_repository_s_for_that_check_only(tmp_path: Path) -> None:
    checks = [{"name": "unit", "command": "pytest", "setup": None},
              {"name": "lint", "command": "ruff .", "timeout_s": 5, "setup": "pip install ruff",
               "cache_paths": [".ruff_cache"], "cache_key": ["ruff.toml"], "report": "junit:out.xml"}]
    rules = Rules.of(verifier_command="true", checks=checks, setup_command="make", cache_paths=[".venv"])
    assert rules.checks[0] == {"name": "unit", "command": "pytest", "required": True, "timeout_s": None}
    assert rules.checks[1]["setup"] == "pip install ruff" and rules.checks[1]["report"] == "junit:out.xml"
    repo = Repo(name="x", target_branch="main", verifier_command="true", verifier_timeout_s=60, protected_paths=[],
                max_push_bytes=1, max_file_bytes=1, root_sha="a" * 40, setup_command="make", cache_paths=[".venv"],
                checks=rules.checks)
    unit, lint = (runs.check_spec(repo, "base", named=c) for c in repo.checks)
    assert (unit.command, unit.timeout_s, unit.report, unit.cache_paths, unit.cache_key) == (
        "pytest", 60, "pytest", (".venv",), ())
    assert unit.setup is not None and unit.setup.command == "make" and unit.cache_scope == "unit"
    assert (lint.command, lint.timeout_s, lint.report, lint.cache_paths, lint.cache_key) == (
        "ruff .", 5, "junit:out.xml", (".ruff_cache",), ("ruff.toml",))
    assert lint.setup is not None and lint.setup.command == "pip install ruff"
    assert CheckSpec.from_json(lint.as_json()) == lint  # as a job carries it to a worker
    # one line of cache generations per check: two checks with the same paths never share (or overwrite) one
    src = make_project(tmp_path / "src")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=src, capture_output=True, text=True).stdout.strip()
    bare = pygit2.Repository(str(src))
    keys = {scope: caches.key_of(bare, head, caches.Request(tmp_path, (".venv",), scope=scope))
            for scope in ("", "unit", "lint")}
    assert len(set(keys.values())) == 3
    plain = runs.check_spec(Repo(**{**repo.__dict__, "checks": []}), "base")
    assert plain.cache_scope == "" and plain.as_json()["cache"].get("scope") is None  # a single check: as before


def test_check_flags_keep_their_order_and_name_the_group() -> None:
    parser = build_parser()
    add = parser.parse_args(["repo", "add", "demo", "--check", "unit=pytest -q", "--optional-check",
                             "style=ruff format --check", "--check", "lint=ruff check ."])
    given = rules_given(add)
    rules = Rules.of(**{**given, "verifier_command": "true"})
    assert [(c["name"], c["required"], c["timeout_s"]) for c in rules.checks] == [
        ("unit", True, None), ("style", False, None), ("lint", True, None)]
    with pytest.raises(SystemExit):  # not NAME=COMMAND: argparse says so and exits
        parser.parse_args(["repo", "add", "demo", "--check", "lint"])
    with pytest.raises(SystemExit, match="one --check NAME=COMMAND per named check"):  # neither kind of check
        cmd_repo_add(parser.parse_args(["repo", "add", "demo"]))
    assert parser.parse_args(["repo", "set", "demo", "--no-checks"]).no_checks
    plain = Repo(name="x", target_branch="main", verifier_command="true", verifier_timeout_s=60, protected_paths=[],
                 max_push_bytes=1, max_file_bytes=1, root_sha="a" * 40)
    repo = Repo(**{**plain.__dict__, "checks": rules.checks})
    assert repo.check_command.startswith("checks unit, style, lint #") and repo.main_check == repo.check_command
    other = Repo(**{**plain.__dict__, "checks": [{**rules.checks[0], "command": "pytest -x"}, *rules.checks[1:]]})
    assert other.check_command != repo.check_command  # changed checks never reuse the old ones' baselines
    assert plain.check_command == "true" and plain.main_check == "true"


def test_each_check_s_own_rule_flags_name_a_check_or_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    args = parser.parse_args(["repo", "add", "demo", "--check", "unit=pytest", "--check", "lint=ruff .",
                              "--check-timeout", "lint=30", "--check-setup", "lint=pip install ruff",
                              "--check-cache", "lint=.ruff_cache", "--check-cache", "lint=.cache/ruff",
                              "--check-report", "unit=junit:out.xml"])
    given = with_check_rules(args, rules_given(args)["checks"])
    assert given == [{"name": "unit", "command": "pytest", "required": True, "report": "junit:out.xml"},
                     {"name": "lint", "command": "ruff .", "required": True, "timeout_s": 30,
                      "setup": "pip install ruff", "cache_paths": [".ruff_cache", ".cache/ruff"]}]
    assert Rules.of(verifier_command="true", checks=given).checks[1]["cache_paths"] == [".ruff_cache", ".cache/ruff"]
    with pytest.raises(SystemExit):  # not NAME=SECONDS: argparse says so and exits 2
        parser.parse_args(["repo", "add", "demo", "--check", "unit=pytest", "--check-timeout", "unit=soon"])
    assert "--check-timeout takes NAME=SECONDS" in capsys.readouterr().err
    for argv, known in ((["repo", "add", "demo", "--check", "unit=pytest", "--check-timeout", "lint=5"],
                         "its named checks are unit"),
                        (["repo", "add", "demo", "--verifier", "pytest", "--check-setup", "lint=make"],
                         "the repository has no named checks")):
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        assert exit_.value.code == 2
        err = capsys.readouterr().err
        assert "names 'lint', which is no named check" in err and known in err, err


# -- the group's jobs in the store ---------------------------------------------------------------------------------


def child(name: str, command: str, required: bool = True) -> dict[str, Any]:
    return {"name": name, "command": command, "timeout_s": 10, "required": required, "sandbox": {}}


def result(job_id: int, sha: str, outcome: str) -> dict[str, Any]:
    return Result(sha, TREE, f"job {job_id}", outcome, 0 if outcome == "pass" else 1, 5, "", "", 0, "").as_json()


async def test_a_group_is_never_claimed_and_finishes_with_its_children(e2e_db: Database, e2e_db_url: str,
                                                                        tmp_path: Path) -> None:
    db = e2e_db
    repo = await add_repo(db, repos_root(tmp_path / "data"), name="demo", source=str(make_project(tmp_path / "src")),
                          rules=Rules.of(verifier_command="true"))
    sha = repo.root_sha
    group = await db.jobs.enqueue_job(repo="demo", commit_sha=sha, command="checks unit, lint, style", timeout_s=10,
                                      purpose="manual", children=[child("unit", "u"), child("lint", "l"),
                                                                  child("style", "s", required=False)])
    assert group.is_group and group.status == "queued"
    claimed = [await db.jobs.claim_job(worker_id=None, worker_name=f"w{i}") for i in range(4)]
    assert claimed[3] is None  # three children, and never the parent
    kids = {j.check_name: j for j in claimed if j is not None}
    assert sorted(kids) == ["lint", "style", "unit"] and {j.parent_id for j in kids.values()} == {group.id}
    for name, outcome in (("unit", "pass"), ("style", "fail")):
        await db.jobs.finish_job(job_id=kids[name].id, worker_id=None, claim_version=1, outcome=outcome,
                                 result=result(kids[name].id, sha, outcome))
        assert (await db.jobs.get_job(group.id)).status == "queued"  # lint still runs
    await db.jobs.finish_job(job_id=kids["lint"].id, worker_id=None, claim_version=1, outcome="fail",
                             result=result(kids["lint"].id, sha, "fail"))
    done = await db.jobs.wait_job(group.id, timeout=5)
    assert done.status == "done" and done.outcome == "fail" and done.tree_sha == TREE
    assert [(c["name"], c["outcome"], c["job"]) for c in (done.result or {})["checks"]] == [
        ("unit", "pass", kids["unit"].id), ("lint", "fail", kids["lint"].id), ("style", "fail", kids["style"].id)]

    # a child every worker lost ends in error, and so does its group; a cancelled group's children are cancelled
    db.jobs.lease_seconds = 0.01
    lone = await db.jobs.enqueue_job(repo="demo", commit_sha=sha, command="checks unit", timeout_s=10,
                                     purpose="manual", children=[child("unit", "u")])
    for _ in range(3):
        assert (await db.jobs.claim_job(worker_id=None, worker_name="w")) is not None
        await asyncio.sleep(0.05)
        await db.jobs.recover_jobs(grace_seconds=0)
    lost = await db.jobs.get_job(lone.id)
    assert (lost.status, lost.outcome) == ("done", "error"), lost
    db.jobs.lease_seconds = 30
    dropped = await db.jobs.enqueue_job(repo="demo", commit_sha=sha, command="checks unit, lint", timeout_s=10,
                                        purpose="manual", children=[child("unit", "u"), child("lint", "l")])
    assert (await db.jobs.claim_job(worker_id=None, worker_name="w")) is not None  # one child runs, one waits
    with psycopg.connect(e2e_db_url, autocommit=True) as conn:  # as a candidate's cancellation cancels its parent
        conn.execute("UPDATE verify_jobs SET status = 'cancelled', finished_at = now() WHERE id = %s", (dropped.id,))
    await db.jobs.sql.all("job_cancel_orphans")
    assert {k.status for k in await db.jobs.children(dropped.id)} == {"cancelled"}
    assert (await db.jobs.claim_job(worker_id=None, worker_name="w")) is None

    # a settle cut off (the last child ended, its group's settle never ran, as a crash between the two leaves it):
    # the next recovery pass settles the group, so the window waiting on it is answered
    cut = await db.jobs.enqueue_job(repo="demo", commit_sha=sha, command="checks unit", timeout_s=10,
                                    purpose="manual", children=[child("unit", "u")])
    with psycopg.connect(e2e_db_url, autocommit=True) as conn:
        conn.execute("UPDATE verify_jobs SET status = 'done', outcome = 'pass', finished_at = now(), result = %s "
                     "WHERE parent_id = %s", (Jsonb(result(cut.id + 1, sha, "pass")), cut.id))
    assert (await db.jobs.get_job(cut.id)).status == "queued"
    await db.jobs.recover_jobs(grace_seconds=60)
    settled = await db.jobs.get_job(cut.id)
    assert (settled.status, settled.outcome) == ("done", "pass"), settled


# -- end to end ---------------------------------------------------------------------------------------------------

UNIT = f"sleep 1 && {PYTEST} tests"
LINT = "sleep 1 && ! grep -rq LINTBAD --include=*.py ."
STYLE = "sleep 1 && ! grep -rq STYLEBAD --include=*.py ."


@pytest.fixture
async def checked(e2e_db: Database, e2e_db_url: str, tmp_path: Path) -> AsyncIterator[Fleet]:
    """Repository ``demo`` added by ``mergebot repo add`` with three named checks (unit and lint required, style
    optional), one candidate at a time and no retry of a failed check; a bot with three verifier workers."""
    tokens, data, out = await repo_added_by_cli(
        e2e_db, e2e_db_url, tmp_path, {"root": Role.ADMIN, "ann": Role.AGENT, "bob": Role.AGENT, "cat": Role.AGENT,
                                       "lead": Role.LEAD},
        "--check", f"unit={UNIT}", "--check", f"lint={LINT}", "--optional-check", f"style={STYLE}", "--timeout", "60",
        "--window", "1", "--batch", "1", "--no-retry-failures")
    assert f"  checks: unit (required): {UNIT}, lint (required): {LINT}, style (optional): {STYLE}" in \
        out.stdout.splitlines(), out.stdout
    repo = await e2e_db.repos.get_repo("demo")
    assert [(c["name"], c["required"]) for c in repo.checks] == [("unit", True), ("lint", True), ("style", False)]
    assert repo.verifier_command == f"({UNIT}) && ({LINT})"  # the one-command form: the required checks, glued
    bot = BotProcess(e2e_db_url, data).start(MERGEBOT_VERIFIER_WORKERS="3")
    try:
        yield Fleet(bot, e2e_db, tokens, tmp_path / "work")
    finally:
        stop_keepers(tmp_path / "work")
        bot.stop()


async def settled(fleet: Fleet, ids: list[int], timeout: float = 120) -> dict[int, str]:
    """Once each subtask's candidate has landed or been rejected: each subtask's status."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        latest = [await fleet.db.landing.candidates(subtask_id=i, limit=1) for i in ids]
        if all(rows and rows[0]["status"] in ("landed", "rejected") for rows in latest):
            return {i: (await fleet.db.subtasks.get_subtask(i)).status for i in ids}
        time.sleep(0.2)
    raise AssertionError(f"subtasks {ids} never settled:\n" + fleet.bot.tail())


async def page(fleet: Fleet, path: str) -> str:
    async with httpx.AsyncClient(base_url=fleet.bot.url, timeout=30) as web:
        r = await web.post("/login", data={"token": fleet.tokens["lead"], "next": "/ui/queue"},
                           headers={"Origin": fleet.bot.url})
        assert r.status_code == 303, r.text
        got = await web.get(path)
        assert got.status_code == 200, got.text
        return html.unescape(got.text)


async def test_named_checks_run_in_parallel_and_the_failing_required_one_is_named(checked: Fleet) -> None:
    fleet = checked
    subs = [(await fleet.db.subtasks.create_subtask(actor_id=None, title=t))[0] for t in ("ok", "lint", "style")]
    await fleet.db.repos.set_paused(repo="demo", paused=True, reason="collecting a queue")
    fleet.start_and_push("ann", {"ok.py": "X = 1\n"})
    fleet.start_and_push("bob", {"bad.py": "Y = 'LINTBAD'\n"})
    fleet.start_and_push("cat", {"styled.py": "Z = 'STYLEBAD'\n"})
    await fleet.db.repos.set_paused(repo="demo", paused=False, reason=None)
    ok, lint, style = (s.id for s in subs)
    got = await settled(fleet, [ok, lint, style])
    assert got == {ok: "landed", lint: "running", style: "landed"}, got

    # the landing run of the first is a group: a parent no worker ran, and one child per check, all at once
    cand = Candidate.from_row((await fleet.db.landing.candidates(subtask_id=ok, limit=1))[0])
    runs = [j for j in await fleet.db.jobs.jobs(candidate_id=cand.id, limit=50) if j["purpose"] == "candidate"]
    parent = next(j for j in runs if j["is_group"])
    assert parent["worker_name"] is None and parent["status"] == "done" and parent["outcome"] == "pass"
    kids = await fleet.db.jobs.children(parent["id"])
    assert [(k.check_name, k.required, k.command) for k in kids] == [("unit", True, UNIT), ("lint", True, LINT),
                                                                    ("style", False, STYLE)]
    assert all(k.status == "done" and k.outcome == "pass" and k.started_at and k.finished_at for k in kids)
    # the three were queued together, in one statement, each a job any free worker may take: they run at the same
    # time as far as the worker slots allow (how much time that saves is bench/landing/named_checks.py's figure; here a
    # wall-clock overlap, or three distinct workers, would hang on how fast this machine's workers claim them)
    assert len({k.created_at for k in kids}) == 1 and kids[0].created_at is not None, [k.created_at for k in kids]
    assert all(k.worker_name for k in kids)
    assert [c["name"] for c in cand.verifier["checks"]] == ["unit", "lint", "style"]
    first = next(r for r in await fleet.db.landing.landed(repo="demo") if r.subtask_id == ok)
    assert first.verifier_command.startswith("checks unit, lint, style #") and first.run_id == parent["id"]

    # a failing required check names itself in the verdict and on the candidate page
    bad = Candidate.from_row((await fleet.db.landing.candidates(subtask_id=lint, limit=1))[0])
    verdict = await told.candidate_verdict(fleet.db, bad)
    assert "the required check `lint`" in verdict.message and "style pass (optional)" in verdict.message, \
        verdict.message
    shown = await page(fleet, f"/ui/candidates/{bad.id}")
    assert "the required check `lint`" in shown
    rows = shown[shown.index('id="checks"'):]
    for name, kind, outcome in (("unit", "required", "pass"), ("lint", "required", "fail"),
                                ("style", "optional", "pass")):
        assert f"<td><code>{name}</code></td><td>{kind}</td><td>{outcome}</td>" in rows, rows[:2000]
    job = next(c["job"] for c in bad.verifier["checks"] if c["name"] == "lint")
    assert f'href="/ui/jobs/{job}/log"' in rows
    assert f"Verify job {job} (candidate)" in await page(fleet, f"/ui/jobs/{job}/log")

    # an optional check's failure is shown but does not block
    styled = Candidate.from_row((await fleet.db.landing.candidates(subtask_id=style, limit=1))[0])
    outcomes_of = {c["name"]: c["outcome"] for c in styled.verifier["checks"]}
    assert styled.status == "landed" and outcomes_of == {"unit": "pass", "lint": "pass", "style": "fail"}
    assert "<td><code>style</code></td><td>optional</td><td>fail</td>" in await page(
        fleet, f"/ui/candidates/{styled.id}")

    # the cost of each named check, and the landing's checks charged to the landing, not as rework
    cost = httpx.get(f"{fleet.bot.url}/api/v1/cost", headers={"Authorization": f"Bearer {fleet.tokens['root']}"},
                     timeout=30).json()
    per_check = {c["check"]: c for c in cost["checks"] if c["repo"] == "demo"}
    assert set(per_check) == {"unit", "lint", "style"} and all(c["runs"] >= 3 and c["seconds"] >= 3
                                                               for c in per_check.values()), per_check
    landing = next(c for c in cost["landings"] if c["subtask_id"] == ok)
    assert landing["seconds"]["landing_run"] >= 3 and landing["seconds"]["rework"] == 0, landing


# -- a GitHub App's repository: one check run per named check -----------------------------------------------------


async def test_each_named_check_gets_a_check_run_of_its_own(app_fleet: AppFleet) -> None:
    """On a GitHub App's repository the candidate's own check run (``mergebot``) has the verdict, and each named
    check one of its own once the checks ran: success, or neutral for an optional check that failed."""
    f, forge = app_fleet, app_fleet.forge
    await f.db.repos.update_repo("calc", RulesChange.of(checks=[
        {"name": "unit", "command": f"{PYTEST} tests"},
        {"name": "style", "command": STYLE.removeprefix("sleep 1 && "), "required": False}]))
    status = await f.land("styled", {"styled.py": "Z = 'STYLEBAD'\n"})
    assert status.state == "success", status
    assert final_check_run(forge, status.sha)[-1]["conclusion"] == "success"
    [cand] = [c for c in await f.db.landing.candidates(repo="calc") if c["sha"] == status.sha]
    for name, conclusion in (("unit", "success"), ("style", "neutral")):
        sent = final_check_run(forge, status.sha, name=f"mergebot / {name}")
        assert len(sent) == 1 and sent[0]["head_sha"] == status.sha, sent  # made once, completed
        assert sent[0]["conclusion"] == conclusion and sent[0]["external_id"] == f"{cand['id']}:{name}", sent[0]
        assert sent[0]["output"]["title"].startswith(f"{name}: {'pass' if name == 'unit' else 'fail'}")


# -- each check's own rules, and a flaky check re-run alone ---------------------------------------------------------

BUILT = "test -e built.txt"  # passes only where its own setup ran
PLAIN = "test ! -e built.txt && printf '<testsuite><testcase classname=\"plain\" name=\"t\"/></testsuite>' > r.xml"
SLOW = "test ! -e SLOW.txt || sleep 30"


async def test_each_check_has_its_own_rules_and_a_flaky_check_is_re_run_alone(e2e_db: Database, e2e_db_url: str,
                                                                             tmp_path: Path) -> None:
    """``repo add`` with four checks, each with rules of its own (``--check-setup``, ``--check-report``,
    ``--check-cache``, ``--check-timeout``); a change that makes ``slow`` sleep fails as a timeout naming it after
    ``slow``'s own 2 s (the others keep the repository's 60 s); a check that fails once and passes again (a marker
    outside the checkout) is retried alone: the candidate lands as flaky, and the checks that passed ran once."""
    flag = tmp_path / "flaked-once"
    flaky = f"test ! -e FLAKY.txt || test -e {flag} || {{ touch {flag}; exit 1; }}"
    data, tokens = tmp_path / "data", {}
    for name, role in (("ann", Role.AGENT), ("bob", Role.AGENT), ("cat", Role.AGENT)):
        _, tokens[name] = await e2e_db.agents.add_agent(name=name, role=role)
    env = {**os.environ, "MERGEBOT_DATABASE_URL": e2e_db_url, "MERGEBOT_DATA_DIR": str(data)}
    out = subprocess.run([sys.executable, "-m", "mergebot", "repo", "add", "demo", "--from",
                          str(make_project(tmp_path / "src")), "--check", f"built={BUILT}", "--check",
                          f"plain={PLAIN}", "--check", f"slow={SLOW}", "--check", f"flaky={flaky}",
                          "--check-setup", "built=touch built.txt", "--check-report", "plain=junit:r.xml",
                          "--check-cache", "plain=.plain-cache", "--check-timeout", "slow=2", "--timeout", "60",
                          "--window", "1", "--batch", "1"], env=env, capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "built (required, setup: touch built.txt): test -e built.txt" in out.stdout, out.stdout
    assert "slow (required, 2 s): " in out.stdout and "report: junit:r.xml" in out.stdout
    for argv, code in ((["--check-timeout", "flaky=50", "--check-setup", "plain=true"], 0),
                       (["--check-timeout", "flaky=60", "--check-timeout", "nope=3"], 2)):
        set_ = subprocess.run([sys.executable, "-m", "mergebot", "repo", "set", "demo", *argv], env=env,
                              capture_output=True, text=True, check=False)
        assert set_.returncode == code, set_.stderr[-2000:]
    assert "--check-timeout names 'nope', which is no named check" in set_.stderr, set_.stderr
    kept = {c["name"]: c for c in (await e2e_db.repos.get_repo("demo")).checks}  # on the repository's checks
    assert kept["flaky"]["timeout_s"] == 50 and kept["plain"]["setup"] == "true" and kept["slow"]["timeout_s"] == 2
    await e2e_db.repos.update_repo("demo", RulesChange.of(checks=[  # back as added
        kept["built"], {**kept["plain"], "setup": None}, kept["slow"], {**kept["flaky"], "timeout_s": None}]))
    bot = BotProcess(e2e_db_url, data).start(MERGEBOT_VERIFIER_WORKERS="3", MERGEBOT_VERIFIER_SANDBOX="none")
    fleet = Fleet(bot, e2e_db, tokens, tmp_path / "work")
    try:
        subs = [(await fleet.db.subtasks.create_subtask(actor_id=None, title=t))[0] for t in ("ok", "slow", "flaky")]
        await fleet.db.repos.set_paused(repo="demo", paused=True, reason="collecting a queue")
        fleet.start_and_push("ann", {"ok.py": "X = 1\n"})
        fleet.start_and_push("bob", {"SLOW.txt": "zzz\n"})
        _, _, flaky_sha = fleet.start_and_push("cat", {"FLAKY.txt": "once\n"})
        await fleet.db.repos.set_paused(repo="demo", paused=False, reason=None)
        ok, slow, flaked = (s.id for s in subs)
        got = await settled(fleet, [ok, slow, flaked])
        assert got == {ok: "landed", slow: "running", flaked: "landed"}, got

        # each child's own spec: the setup for built only, plain's report and cache, slow's timeout
        cand = Candidate.from_row((await fleet.db.landing.candidates(subtask_id=ok, limit=1))[0])
        parent = next(j for j in await fleet.db.jobs.jobs(candidate_id=cand.id, limit=50) if j["is_group"])
        kids = {k.check_name: k for k in await fleet.db.jobs.children(parent["id"])}
        assert {n: k.timeout_s for n, k in kids.items()} == {"built": 60, "plain": 60, "slow": 2, "flaky": 60}
        assert (kids["built"].cache or {})["setup"] == "touch built.txt" and kids["flaky"].cache is None
        assert (kids["plain"].cache or {})["paths"] == [".plain-cache"] and kids["plain"].cache["setup"] is None
        assert kids["plain"].cache["scope"] == "plain" and (kids["plain"].sandbox or {})["report"] == "junit:r.xml"
        assert (kids["built"].sandbox or {})["report"] == "pytest"
        assert (kids["plain"].result or {})["tests"]["source"] == "junit"  # plain's own report was read
        assert all(k.outcome == "pass" for k in kids.values()), {n: k.outcome for n, k in kids.items()}

        # slow's own timeout decides, and the verdict names it
        late = Candidate.from_row((await fleet.db.landing.candidates(subtask_id=slow, limit=1))[0])
        verdict = await told.candidate_verdict(fleet.db, late)
        assert verdict.kind == "check_timeout" and "the required check `slow`" in verdict.message, verdict
        timed = {c["name"]: c["outcome"] for c in late.verifier["checks"]}
        assert timed == {"built": "pass", "plain": "pass", "slow": "timeout", "flaky": "pass"}, timed

        # the flaky check alone ran again: the others kept their first result, each ran once on that commit
        flaky_cand = Candidate.from_row((await fleet.db.landing.candidates(subtask_id=flaked, limit=1))[0])
        landed = next(r for r in await fleet.db.landing.landed(repo="demo") if r.subtask_id == flaked)
        assert landed.verifier_result == "flaky", landed
        jobs = await fleet.db.jobs.jobs(candidate_id=flaky_cand.id, limit=100)
        retry = next(j for j in jobs if j["is_group"] and j["purpose"] == "retry")
        again = {k.check_name: k for k in await fleet.db.jobs.children(retry["id"])}
        assert again["flaky"].started_at is not None and again["flaky"].outcome == "pass"
        assert all(k.started_at is None and k.worker_name is None and k.outcome == "pass"
                   for n, k in again.items() if n != "flaky"), again
        runs_of = {n: sum(1 for j in jobs if j["check_name"] == n and j["commit_sha"] == retry["commit_sha"]
                          and j["started_at"] is not None) for n in ("built", "plain", "slow", "flaky")}
        assert runs_of == {"built": 1, "plain": 1, "slow": 1, "flaky": 2}, runs_of
        assert flag.exists() and flaky_sha
    finally:
        stop_keepers(tmp_path / "work")
        bot.stop()
