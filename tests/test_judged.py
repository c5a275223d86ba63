"""A verdict the candidate cannot write for itself (issue 32): each trick an agent uses to pass without passing,
pushed for real, run by the real verifier, refused by what its tests reported against main's.

Every push here breaks ``add()`` and then makes the suite exit 0 another way; every one must be refused, by kind.
What must still land lands: a change that only adds tests, and a test deletion a lead allowed.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pygit2

from mergebot import agent
from mergebot.auth import Role
from mergebot.rules import RulesChange
from tests.support.bot import Fleet, check_command, commit, git

BROKEN = {"calc.py": "def add(a, b):\n    return a - b\n"}
MORE = ("from calc import add\n\n\ndef test_zero():\n    assert add(0, 0) == 0\n\n\n"
        "def test_negative():\n    assert add(-1, 1) == 0\n")
SKIP_ALL = ("import pytest\n\n\ndef pytest_collection_modifyitems(items):\n    for item in items:\n"
            "        item.add_marker(pytest.mark.skip(reason='not today'))\n")
DESELECT_ALL = ("def pytest_collection_modifyitems(config, items):\n"
                "    config.hook.pytest_deselected(items=[i for i in items if 'trivial' not in i.nodeid])\n"
                "    items[:] = [i for i in items if 'trivial' in i.nodeid]\n")
EXIT_EARLY = "import sys\n\nsys.exit(0)\n"


async def push(fleet: Fleet, who: str, title: str, files: dict[str, str], *, delete: tuple[str, ...] = (),
               **allow: bool) -> dict[str, Any]:
    """A new agent ``who`` claims a new subtask (allowed what ``allow`` names: test_removal, check_changes, by the
    admin through the API) and pushes ``files``."""
    if who not in fleet.tokens:
        _, fleet.tokens[who] = await fleet.db.agents.add_agent(name=who, role=Role.AGENT)
    sub, _ = await fleet.db.subtasks.create_subtask(actor_id=None, title=title)
    if allow:
        got = fleet.client("root").post(f"/api/v1/subtasks/{sub.id}/allow", allow)
        assert all(got["subtask"][f"allow_{k}"] is v for k, v in allow.items()), got
    claim, wt = fleet.start(who)
    assert claim.subtask_id == sub.id
    for path in delete:
        git(["rm", "-q", path], wt)
    commit(wt, files, title)
    out: dict[str, Any] = agent.push(fleet.client(who), wt, wait=120, progress=False)
    return out


def weakened(v: dict[str, Any]) -> dict[str, str]:
    return {c["id"]: c["now"] for c in v["tests"]["comparison"]["weakened"]}


async def test_changing_what_configures_the_check_is_refused_at_push_time(make_fleet: Callable[..., Any]) -> None:
    """On a default subtask every trick that needs a config file is refused before anything runs
    (``check_config``); an allowed subtask's honest change of its configuration lands."""
    fleet: Fleet = await make_fleet(f"{check_command()} && sh ci/check.sh", MERGEBOT_RETRY_FAILED_CHECKS="0")
    tricks = {"skip all": {"tests/conftest.py": SKIP_ALL}, "deselect": {"conftest.py": DESELECT_ALL},
              "exit early": {"tests/conftest.py": EXIT_EARLY},
              "plugin off": {"pytest.ini": "[pytest]\naddopts = -p no:mergebot_outcomes -p no:junitxml\n"},
              "pyproject": {"pyproject.toml": "[tool.pytest.ini_options]\naddopts = '-k nothing'\n"},
              "setup.cfg": {"setup.cfg": "[tool:pytest]\naddopts = -x\n"},
              "the check's script": {"ci/check.sh": "exit 0\n"}}
    for i, (title, files) in enumerate(tricks.items()):
        out = await push(fleet, f"c{i}", title, {**BROKEN, **files})
        v = out["verdict"]
        assert out["status"] == "refused" and (v["kind"], v["final"]) == ("check_config", True), (title, out)
        assert v["paths"] == sorted(files) and "--check-changes" in v["next"], (title, v)
    # a new pyproject.toml moves pytest's rootdir: it configures the check even without a pytest section (a lead
    # allows it); once there, an edit that leaves its pytest sections as they are is an ordinary change
    out = await push(fleet, "c7", "a project file", {"pyproject.toml": "[project]\nname = 'calc'\n"})
    assert (out["status"], out["verdict"]["kind"]) == ("refused", "check_config"), out
    out = await push(fleet, "c7b", "a project file, allowed", {"pyproject.toml": "[project]\nname = 'calc'\n"},
                     check_changes=True)
    assert out["status"] == "landed", out
    out = await push(fleet, "c8", "project metadata", {"pyproject.toml": "[project]\nname = 'calc2'\n"})
    assert out["status"] == "landed", out
    # the verifier's own plugin's name is refused even where check changes are allowed
    out = await push(fleet, "c9", "shadow the plugin", {"mergebot_outcomes.py": "def pytest_configure():\n    pass\n"},
                     check_changes=True)
    assert (out["status"], out["verdict"]["kind"]) == ("refused", "check_config"), out
    # an allowed subtask that changes its check's configuration honestly lands
    out = await push(fleet, "c10", "a marker", {"pytest.ini": "[pytest]\nmarkers = slow: a slow test\n"},
                     check_changes=True)
    assert out["status"] == "landed", out


async def test_each_trick_that_passes_without_passing_is_refused(make_fleet: Callable[..., Any]) -> None:
    """On subtasks allowed to change the check (so past the push rule), the outcome comparison catches each."""
    fleet: Fleet = await make_fleet(check_command(), MERGEBOT_RETRY_FAILED_CHECKS="0")

    # adding tests is never weakening: main's one test judges the code, the two new ones run apart, it lands, and
    # its job's outcomes (both runs) are the next candidates' baseline
    out = await push(fleet, "ann", "more tests", {"tests/test_more.py": MORE})
    assert out["status"] == "landed", out
    tests = out["verdict"]["tests"]
    assert tests["counts"] == {"passed": 1} and tests["reset"]["dropped"] == ["tests/test_more.py"], tests
    assert tests["own"]["counts"] == {"passed": 2} and tests["own"]["files"] == ["tests/test_more.py"], tests

    # a conftest that skips everything (the exit code is 0)
    v = (await push(fleet, "a1", "skip all", {**BROKEN, "tests/conftest.py": SKIP_ALL},
                    check_changes=True))["verdict"]
    assert (v["kind"], v["final"]) == ("tests_weakened", True), v
    assert weakened(v) == {"tests/test_calc.py::test_add": "skipped", "tests/test_more.py::test_zero": "skipped",
                           "tests/test_more.py::test_negative": "skipped"}, v
    assert "test_add (passed on main, skipped now)" in v["message"] and "--test-removal" in v["next"]
    # the run exited 0: its job row and its Result keep that; the verdict reads the judgement (issue 42)
    own = [(j["outcome"], j["result"]["outcome"]) for j in await fleet.db.jobs.jobs(candidate_id=v["candidate_id"])]
    assert own == [("pass", "pass")], own
    record = (await fleet.db.landing.get_candidate(v["candidate_id"])).verifier or {}
    assert (record["outcome"], record["run_outcome"]) == ("tests_weakened", "pass"), record
    page = await candidate_page(fleet, v["candidate_id"])
    assert "Weakened" in page and "tests/test_calc.py::test_add</code>: passed on main, skipped now" in page

    # deselecting the suite and adding one trivial test
    v = (await push(fleet, "a2", "deselect", {**BROKEN, "tests/conftest.py": DESELECT_ALL,
                                              "tests/test_trivial.py": "def test_trivial():\n    pass\n"},
                    check_changes=True))["verdict"]
    assert v["kind"] == "tests_weakened", v
    assert set(weakened(v).values()) == {"deselected"} and len(weakened(v)) == 3, v
    assert v["tests"]["comparison"]["added"] == [], v  # a new test file is not in the run that judges the code
    assert v["tests"]["reset"] == {"restored": [], "dropped": ["tests/test_trivial.py"],
                                   "kept": ["tests/conftest.py"], "own": ["tests/test_trivial.py"]}, v

    # sys.exit(0) from a conftest: pytest never reports
    v = (await push(fleet, "a3", "exit early", {**BROKEN, "tests/conftest.py": EXIT_EARLY},
                    check_changes=True))["verdict"]
    assert (v["kind"], v["final"]) == ("no_report", True), v
    assert "reported nothing" in v["message"] and "report" in v["next"]

    # our plugin and junitxml turned off in pytest.ini's addopts, the failures hidden by skipping: the verifier's
    # PYTEST_ADDOPTS come after the ini's, so the plugin still loads, and it sees the skips
    ini = "[pytest]\naddopts = -p no:mergebot_outcomes -p no:junitxml\n"
    v = (await push(fleet, "a4", "plugin off", {**BROKEN, "pytest.ini": ini, "tests/conftest.py": SKIP_ALL},
                    check_changes=True))["verdict"]
    assert v["kind"] == "tests_weakened", v
    # unregistered from a conftest before the session starts: nothing is reported at all
    unregister = ("def pytest_configure(config):\n    config.pluginmanager.unregister(name='mergebot_outcomes')\n"
                  + SKIP_ALL)
    v = (await push(fleet, "a5", "plugin gone", {**BROKEN, "tests/conftest.py": unregister},
                    check_changes=True))["verdict"]
    assert v["kind"] == "no_report", v

    # deleting a test file without permission, then with it
    v = (await push(fleet, "a6", "delete tests", {"notes.txt": "fewer tests\n"}, delete=("tests/test_more.py",))
         )["verdict"]
    assert v["kind"] == "tests_weakened", v
    assert weakened(v) == {"tests/test_more.py::test_zero": "deleted", "tests/test_more.py::test_negative": "deleted"}
    out = await push(fleet, "a7", "delete tests, allowed", {"notes.txt": "fewer tests\n"},
                     delete=("tests/test_more.py",), test_removal=True)
    assert out["status"] == "landed", out
    assert sorted(out["verdict"]["tests"]["comparison"]["removed"]) == ["tests/test_more.py::test_negative",
                                                                         "tests/test_more.py::test_zero"]
    # deleting one test function (not its file) is a deleted definition too
    v = (await push(fleet, "a8", "delete a function", {"tests/test_calc.py": "from calc import add\n"}))["verdict"]
    assert v["kind"] == "tests_weakened" and weakened(v) == {"tests/test_calc.py::test_add": "deleted"}, v

    # nothing of it reached main: only the added tests and the allowed deletion landed
    bare = fleet.bare()
    main_tree = bare[fleet.main()].peel(pygit2.Commit).tree
    assert bare[main_tree["calc.py"].id].data == b"def add(a, b):\n    return a + b\n"
    assert "test_more.py" not in [e.name for e in bare[main_tree["tests"].id]]  # the allowed deletion landed
    runs = fleet.client("ann").get("/api/v1/verify-jobs", limit=200)["jobs"]
    assert not [r for r in runs if r["purpose"] == "retry"], runs  # a judged run is never retried


def test_the_runs_record_what_it_compared(tmp_path: Path) -> None:
    """(Pure) ``verifier.compare`` on its own: the rules its module states, one case each."""
    from verifier.compare import compare, deleted_tests
    from verifier.outcomes import Outcomes

    main = Outcomes({"a::t1": "passed", "a::t2": "passed", "a::t3": "failed", "b::t4": "passed"}, source="pytest")
    now = Outcomes({"a::t1": "passed", "a::t2": "xfailed", "a::t3": "skipped", "c::new": "skipped"}, source="pytest")
    c = compare(main, now, deleted={"b::t4"}, removal_allowed={"b::t4"})
    assert c.verdict == "tests_weakened" and [(x.id, x.now) for x in c.weakened] == [("a::t2", "xfailed")]
    assert c.removed == ("b::t4",) and c.added == ("c::new",)  # t3 failed on main: its skip weakens nothing
    assert compare(main, Outcomes(), deleted=()).verdict == "no_report"
    assert compare(Outcomes(), now).verdict == ""  # no baseline: nothing to hold it to
    assert compare(main, now, deleted={"b::t4"}).weakened[-1].now == "deleted"
    before = {"t.py": "class TestA:\n    def test_x(self): pass\n    def test_y(self): pass\n"}
    after = {"t.py": "class TestA:\n    def test_y(self): pass\n"}
    assert deleted_tests(["t.py::TestA::test_x[1]", "t.py::TestA::test_y"], before, after) == {"t.py::TestA::test_x[1]"}
    assert deleted_tests(["t.py::TestA::test_y"], before, {"t.py": None}) == {"t.py::TestA::test_y"}
    assert deleted_tests(["t.py::TestA::test_y"], before, {"t.py": "def broken(:"}) == set()


async def test_a_batch_whose_middle_member_weakens_a_test_lands_the_other_two(make_fleet: Callable[..., Any]) -> None:
    """Three candidates verified by one run: its tests are held to main's, so the batch fails like any failing
    batch, the planner bisects it, the culprit is judged alone (``tests_weakened``) and the other two land."""
    fleet: Fleet = await make_fleet(check_command(), MERGEBOT_BATCH_SIZE="3", MERGEBOT_VERIFIER_WORKERS="2",
                                    MERGEBOT_RETRY_FAILED_CHECKS="0")
    await fleet.db.repos.update_repo("demo", RulesChange.of(risk_aware=False))  # one batch of three, by count
    await fleet.db.repos.set_paused(repo="demo", paused=True, reason="collecting a batch")
    members = {}
    for who, title, files, allow in (
            ("b1", "a test", {"tests/test_zero.py": "from calc import add\n\n\ndef test_zero():\n"
                                                     "    assert add(0, 0) == 0\n"}, {}),
            ("b2", "weaken", {**BROKEN, "tests/conftest.py": SKIP_ALL}, {"check_changes": True}),
            ("b3", "notes", {"notes.txt": "three\n"}, {})):
        _, fleet.tokens[who] = await fleet.db.agents.add_agent(name=who, role=Role.AGENT)
        sub, _ = await fleet.db.subtasks.create_subtask(actor_id=None, title=title)
        if allow:
            fleet.client("root").post(f"/api/v1/subtasks/{sub.id}/allow", allow)
        fleet.start_and_push(who, files, title)
        members[who] = sub.id
    await fleet.db.repos.set_paused(repo="demo", paused=False, reason=None)
    statuses: dict[int, str] = {}
    deadline = asyncio.get_running_loop().time() + 120
    while asyncio.get_running_loop().time() < deadline:
        statuses = {sid: (await fleet.db.subtasks.get_subtask(sid)).status for sid in members.values()}
        if statuses[members["b1"]] == statuses[members["b3"]] == "landed" and statuses[members["b2"]] == "running":
            break
        await asyncio.sleep(0.3)
    assert statuses == {members["b1"]: "landed", members["b2"]: "running", members["b3"]: "landed"}, statuses
    cands = fleet.client("root").get("/api/v1/candidates", subtask=members["b2"], limit=5)["candidates"]
    v = fleet.client("b2").get(f"/api/v1/candidates/{cands[0]['id']}")["verdict"]
    assert v["kind"] == "tests_weakened" and "tests/test_calc.py::test_add" in weakened(v), v
    # one run did cover all three: a candidate run of the last whose commit holds the middle one's conftest
    jobs = fleet.client("root").get("/api/v1/verify-jobs", limit=100)["jobs"]
    last = fleet.client("root").get("/api/v1/candidates", subtask=members["b3"], limit=5)["candidates"]
    bare = fleet.bare()
    spanning = [j for j in jobs if j["purpose"] == "candidate" and j["candidate_id"] in {c["id"] for c in last}
                and "conftest.py" in [e.name for e in bare[bare[j["commit_sha"]].peel(pygit2.Commit).tree["tests"].id]]]
    assert spanning, jobs


ACCEPT = ("from calc import add, sub\n\n\ndef test_sub():\n    assert sub(3, 1) == 2\n\n\n"
          "def test_add_still():\n    assert add(2, 3) == 5\n")
SUB = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"


async def test_acceptance_tests_are_written_into_the_merge_and_must_pass(make_fleet: Callable[..., Any],
                                                                          tmp_path: Path) -> None:
    """A lead attaches acceptance tests from the command line; they run once on main (failing there: they test
    something new); whatever the candidate pushes at their path, the merged commit holds them as attached, the
    landed record names them, and a candidate that skips them is ``acceptance_failed``."""
    fleet: Fleet = await make_fleet(check_command(), MERGEBOT_RETRY_FAILED_CHECKS="0")
    local = tmp_path / "accept_sub.py"
    local.write_text(ACCEPT)
    made = cli(fleet, "root", "create", "sub(), with its acceptance tests", "--accept",
               f"{local}:tests/test_accept.py", "--json")
    assert made.returncode == 0, made.stderr
    sid = json.loads(made.stdout)["subtask"]["id"]
    probe = await until_probe(fleet, sid)
    assert probe["status"] == "new" and "test what the subtask must change" in probe["message"], probe
    # an agent reads them: they are the contract
    got = fleet.client("ann").get(f"/api/v1/subtasks/{sid}/acceptance")
    assert got["files"] == [{"path": "tests/test_accept.py", "text": ACCEPT}]

    # a subtask whose acceptance tests already pass on main is told they test nothing new
    other = tmp_path / "accept_add.py"
    other.write_text("from calc import add\n\n\ndef test_add_again():\n    assert add(1, 1) == 2\n")
    made = cli(fleet, "root", "create", "nothing new", "--accept", f"{other}:tests/test_again.py", "--json")
    nothing = json.loads(made.stdout)["subtask"]["id"]
    probe = await until_probe(fleet, nothing)
    assert probe["status"] == "nothing_new" and "test nothing new" in probe["message"], probe
    await fleet.db.subtasks.cancel(subtask_id=nothing, reason="tests nothing new", actor_id=None)

    # an agent who skips the acceptance tests (with check changes allowed, past the push rule) is refused
    fleet.client("root").post(f"/api/v1/subtasks/{sid}/allow", {"check_changes": True})
    claim, wt = fleet.start("ann")
    assert claim.subtask_id == sid
    skip_accept = ("import pytest\n\n\ndef pytest_collection_modifyitems(items):\n    for item in items:\n"
                   "        if 'test_accept' in item.nodeid:\n            item.add_marker(pytest.mark.skip)\n")
    commit(wt, {"calc.py": SUB, "tests/conftest.py": skip_accept})
    v = agent.push(fleet.client("ann"), wt, wait=120, progress=False)["verdict"]
    assert v["kind"] == "acceptance_failed", v
    assert {c["id"]: c["now"] for c in v["tests"]["comparison"]["acceptance"]["failed"]} == {
        "tests/test_accept.py::test_add_still": "skipped", "tests/test_accept.py::test_sub": "skipped"}, v

    # the same agent now implements sub() and pushes a weaker copy of the acceptance file: the attached one runs
    git(["rm", "-q", "tests/conftest.py"], wt)
    commit(wt, {"tests/test_accept.py": "def test_sub():\n    pass\n"})
    out = agent.push(fleet.client("ann"), wt, wait=120, progress=False)
    assert out["status"] == "landed", out
    assert out["verdict"]["tests"]["comparison"]["acceptance"] == {"files": ["tests/test_accept.py"], "failed": []}
    bare = fleet.bare()
    tree = bare[fleet.main()].peel(pygit2.Commit).tree
    assert bare[tree["tests/test_accept.py"].id].data.decode() == ACCEPT  # the tested tree is the landed tree
    landed = fleet.client("ann").landed(subtask=sid)
    assert landed[0]["acceptance"] == ["tests/test_accept.py"], landed
    async with httpx.AsyncClient(base_url=fleet.bot.url, timeout=30) as web:
        await web.post("/login", data={"token": fleet.tokens["ann"], "next": "/ui/queue"},
                       headers={"Origin": fleet.bot.url})
        page = (await web.get(f"/ui/landed/{landed[0]['id']}")).text
    assert "Acceptance tests" in page and "<code>tests/test_accept.py</code>" in page and "all pass" in page


async def until_probe(fleet: Fleet, sid: int) -> dict[str, Any]:
    deadline = asyncio.get_running_loop().time() + 90
    while asyncio.get_running_loop().time() < deadline:
        probe: dict[str, Any] = fleet.client("ann").get(f"/api/v1/subtasks/{sid}/acceptance")["probe"]
        if probe["status"] not in ("pending", "none"):
            return probe
        await asyncio.sleep(0.3)
    raise AssertionError("the acceptance tests' run on main did not finish")


def cli(fleet: Fleet, who: str, *args: str, **more: str) -> Any:
    import os
    import subprocess
    import sys

    env = {**os.environ, "MERGEBOT_URL": fleet.bot.url, "MERGEBOT_TOKEN": fleet.tokens[who], **more}
    return subprocess.run([sys.executable, "-m", "mergebot", *args], capture_output=True, text=True, env=env,
                          timeout=120, check=False)


def store_held_out(fleet: Fleet, tmp_path: Path, marker: str, *args: str) -> Any:
    """An operator stores one held-out test (``repo set --held-out``) whose failure message is ``marker``: the
    command's result."""
    held = tmp_path / "held"
    held.mkdir()
    (held / "test_hidden.py").write_text(f"from calc import sub\n\n\ndef test_sub_more():\n"
                                         f"    assert sub(10, 4) == 6, {marker!r}\n")
    env = {"MERGEBOT_DATABASE_URL": fleet.bot.db_url, "MERGEBOT_DATA_DIR": str(fleet.bot.data_dir)}
    return cli(fleet, "root", "repo", "set", "demo", "--held-out", str(held), *args, **env)


async def test_held_out_checks_catch_a_hard_coded_answer_and_are_never_shown(make_fleet: Callable[..., Any],
                                                                             tmp_path: Path) -> None:
    """An operator stores held-out checks (``repo set --held-out``); a candidate that hard-codes the answer its
    visible acceptance test expects passes its check and fails them (``held_out_failed``, with the failing ids and
    nothing else); an honest one lands. A reviewer reads the held-out run's log; no agent ever reads their text."""
    from tests.test_hostile import readable_by_an_agent

    fleet: Fleet = await make_fleet(check_command(), MERGEBOT_RETRY_FAILED_CHECKS="0")
    _, fleet.tokens["rita"] = await fleet.db.agents.add_agent(name="rita", role=Role.REVIEWER)
    marker = f"HELD-OUT-{uuid.uuid4().hex}"
    stored = store_held_out(fleet, tmp_path, marker, "--json")
    assert stored.returncode == 0 and json.loads(stored.stdout)["held_out_files"] == 1, stored.stderr
    local = tmp_path / "accept.py"
    local.write_text("from calc import sub\n\n\ndef test_sub():\n    assert sub(3, 1) == 2\n")
    made = cli(fleet, "root", "create", "sub()", "--accept", f"{local}:tests/test_accept.py", "--json")
    sid = json.loads(made.stdout)["subtask"]["id"]

    claim, wt = fleet.start("ann")
    assert claim.subtask_id == sid
    commit(wt, {"calc.py": "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return 2\n"})
    hacked = agent.push(fleet.client("ann"), wt, wait=120, progress=False)
    v = hacked["verdict"]
    assert (v["kind"], v["final"]) == ("held_out_failed", True), v
    assert v["failing_tests"] == ["test_hidden.py::test_sub_more"] and v["log_tail"] == "", v
    commit(wt, {"calc.py": SUB})
    honest = agent.push(fleet.client("ann"), wt, wait=120, progress=False)
    assert honest["status"] == "landed", honest
    assert honest["verdict"]["tests"]["held_out"]["outcome"] == "pass"

    jobs = fleet.client("root").get("/api/v1/verify-jobs", limit=100)["jobs"]
    held_runs = [j for j in jobs if j["purpose"] == "held_out"]
    assert len(held_runs) == 2 and marker in json.dumps(held_runs), held_runs  # an admin sees the logs
    async with httpx.AsyncClient(base_url=fleet.bot.url, timeout=30) as web:
        await web.post("/login", data={"token": fleet.tokens["rita"], "next": "/ui/queue"},
                       headers={"Origin": fleet.bot.url})
        page = await web.get(f"/ui/jobs/{held_runs[-1]['id']}/log")  # the failing one (oldest first here)
        assert page.status_code == 200 and marker in page.text  # a reviewer reads it

    seen = await readable_by_an_agent(fleet, "ann", [hacked["id"], honest["id"]], [sid])
    assert not [where for where, text in seen.items() if marker in text or "test_sub_more():" in text]
    assert any("test_hidden.py::test_sub_more" in text for text in seen.values())  # the id is told, only that
    assert seen[f"/ui/jobs/{held_runs[-1]['id']}/log"].count("reviewers and admins only") == 1


WEAKER = "from calc import add\n\n\ndef test_add():\n    assert add(2, 2) == add(2, 2)\n"


async def test_an_edited_test_is_named_and_refused_where_the_repository_says(make_fleet: Callable[..., Any]) -> None:
    """Main's version of an edited test file judges the change's code: an assertion weakened to pass broken code is a
    failure on the defaults (``flag``); an honest edit lands, named on the verdict and the landed record; with
    ``--old-tests refuse`` an edit is ``tests_changed`` unless a lead marked the subtask as changing behaviour, and
    then the edited version is what judges it."""
    fleet: Fleet = await make_fleet(check_command(), MERGEBOT_RETRY_FAILED_CHECKS="0")
    out = await push(fleet, "e1", "weaker, broken", {**BROKEN, "tests/test_calc.py": WEAKER})
    v = out["verdict"]
    assert (out["status"], v["kind"]) == ("rejected", "check_failed"), out  # main's test_add failed on its code
    assert v["failing_tests"] == ["tests/test_calc.py::test_add"] and v["tests"]["reset"]["restored"] == [
        "tests/test_calc.py"], v
    out = await push(fleet, "e1b", "weaker, flagged", {"tests/test_calc.py": WEAKER})
    assert out["status"] == "landed", out  # flag: it lands, and everyone who reads it sees what changed
    assert out["verdict"]["tests"]["comparison"]["changed"] == ["tests/test_calc.py::test_add"], out["verdict"]
    landed = fleet.client("root").landed(subtask=out["verdict"]["subtask_id"])
    assert landed[0]["tests_changed"] == ["tests/test_calc.py::test_add"], landed

    env = {"MERGEBOT_DATABASE_URL": fleet.bot.db_url, "MERGEBOT_DATA_DIR": str(fleet.bot.data_dir)}
    assert cli(fleet, "root", "repo", "set", "demo", "--old-tests", "refuse", **env).returncode == 0
    fixed = "def add(a, b):\n    return a + b\n"
    stricter = "from calc import add\n\n\ndef test_add():\n    assert add(2, 2) == 4 and add(1, 2) == 3\n"
    v = (await push(fleet, "e2", "edit, refused", {"calc.py": fixed, "tests/test_calc.py": stricter}))["verdict"]
    assert (v["kind"], v["final"]) == ("tests_changed", True), v
    assert "--behaviour-change" in v["next"] and v["tests"]["comparison"]["changed"] == ["tests/test_calc.py::test_add"]
    # a behaviour change: its edited version judges the code (main's says add(2, 2) == add(2, 2))
    doubled = {"calc.py": "def add(a, b):\n    return 2 * (a + b)\n",
               "tests/test_calc.py": "from calc import add\n\n\ndef test_add():\n    assert add(2, 2) == 8\n"}
    out = await push(fleet, "e3", "edit, behaviour changes", doubled, behaviour_change=True)
    assert out["status"] == "landed", out
    assert out["verdict"]["tests"]["reset"]["kept"] == ["tests/test_calc.py"], out["verdict"]
    # adding a test to a file edits none of the others; the new one runs apart, on the merged commit
    added = doubled["tests/test_calc.py"] + "\n\ndef test_more():\n    assert add(0, 0) == 0\n"
    out = await push(fleet, "e4", "one more", {"tests/test_calc.py": added})
    assert out["status"] == "landed" and out["verdict"]["tests"]["comparison"]["changed"] == [], out
    assert out["verdict"]["tests"]["own"]["counts"] == {"passed": 2}, out["verdict"]
    # the candidate's own version of a test file must pass too: a new test that fails is the change's failure
    failing = added + "\n\ndef test_wrong():\n    assert add(1, 1) == 3\n"
    v = (await push(fleet, "e5", "a wrong new test", {"tests/test_calc.py": failing}))["verdict"]
    assert (v["kind"], v["failing_tests"]) == ("check_failed", ["tests/test_calc.py::test_wrong"]), v
    assert v["tests"]["own"]["outcome"] == "fail" and "test_wrong" in v["log_tail"], v


async def candidate_page(fleet: Fleet, cand_id: int, who: str = "root") -> str:
    """The candidate's page (``/ui/candidates/ID``) as ``who`` sees it."""
    async with httpx.AsyncClient(base_url=fleet.bot.url, timeout=30) as web:
        r = await web.post("/login", data={"token": fleet.tokens[who], "next": "/ui/queue"},
                           headers={"Origin": fleet.bot.url})
        assert r.status_code == 303, r.text
        got = await web.get(f"/ui/candidates/{cand_id}")
        assert got.status_code == 200, got.text
        return got.text
