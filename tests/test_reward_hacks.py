"""Main's tests judge the candidate's code (issue 41): each reward hack pushed for real, run by the real verifier under
bubblewrap, refused with its kind.

Every push here breaks ``add()`` (or leaves ``sub()`` unwritten) and then tries to pass another way: from a new test
module or a ``tests/__init__.py``, from an existing test file edited outside its functions or down to ``assert True``,
from a file Python or pytest reads at start-up or a module that shadows one of the interpreter's. None lands; what an
honest agent does still lands.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pygit2
import pytest

from mergebot import agent
from mergebot.auth import Role
from tests.support.bot import Fleet, check_command, commit
from tests.test_judged import BROKEN, cli, push, store_held_out
from verifier import sandbox as sb
from verifier.outcomes import unpack

pytestmark = pytest.mark.skipif(not sb.bwrap_usable(), reason="the verifier's sandbox needs a usable bubblewrap")

FIX = "import calc\n\ncalc.add = lambda a, b: a + b\n"  # what every hack wants to run before main's tests
MAIN_TEST = "from calc import add\n\n\ndef test_add():\n    assert add(2, 2) == 4\n"
REWRITE = ("import atexit, pathlib\n\n"  # rewrites main's test while pytest collects, and puts it back at exit
           "_p = pathlib.Path(__file__).parent / 'test_calc.py'\n_old = _p.read_text()\n"
           "_p.write_text('def test_add():\\n    pass\\n')\natexit.register(_p.write_text, _old)\n")


def main_blob(fleet: Fleet, path: str) -> bytes:
    bare = fleet.bare()
    return bytes(bare[bare[fleet.main()].peel(pygit2.Commit).tree[path].id].data)


def kind(out: dict[str, Any]) -> tuple[str, str]:
    return out["status"], out["verdict"]["kind"]


async def test_new_or_edited_test_files_cannot_change_what_mains_tests_see(make_fleet: Callable[..., Any]) -> None:
    """A new test module, a ``tests/__init__.py``, a plugin a new module names, a test file rewritten during
    collection, a module-level rebinding in main's test file, an ``assert True``: main's ``test_add`` runs on the
    broken code every time, as main has it, and fails. The candidate's own new tests run apart."""
    fleet: Fleet = await make_fleet(check_command(), MERGEBOT_RETRY_FAILED_CHECKS="0")
    hacks = {
        "a new test module first": {"tests/test_aaa.py": FIX + "\n\ndef test_nothing():\n    pass\n"},
        "tests/__init__.py": {"tests/__init__.py": FIX},
        "a plugin named by a new module": {"calc_fix.py": FIX,
                                           "tests/test_plugins.py": "pytest_plugins = ['calc_fix']\n"},
        "rewrite during collection": {"tests/test_aaa.py": REWRITE},
        "rebind the name under test": {"tests/test_calc.py": MAIN_TEST + "\n\nadd = lambda a, b: a + b\n"},
        "rebind the test": {"tests/test_calc.py": MAIN_TEST + "\n\ntest_add = lambda: None\n"},
        "assert True": {"tests/test_calc.py": "from calc import add\n\n\ndef test_add():\n    assert True\n"},
    }
    for i, (title, files) in enumerate(hacks.items()):
        out = await push(fleet, f"h{i}", title, {**BROKEN, **files})
        v = out["verdict"]
        assert kind(out) == ("rejected", "check_failed"), (title, v)
        assert v["failing_tests"] == ["tests/test_calc.py::test_add"], (title, v)
        reset = v["tests"]["reset"]
        assert set(files) - {"calc_fix.py"} <= set(reset["restored"]) | set(reset["dropped"]), (title, reset)
    assert main_blob(fleet, "calc.py") == b"def add(a, b):\n    return a + b\n"
    assert main_blob(fleet, "tests/test_calc.py") == MAIN_TEST.encode()

    # under --old-tests refuse the module-level edit is refused the same way: main's test judges the code
    env = {"MERGEBOT_DATABASE_URL": fleet.bot.db_url, "MERGEBOT_DATA_DIR": str(fleet.bot.data_dir)}
    assert cli(fleet, "root", "repo", "set", "demo", "--old-tests", "refuse", **env).returncode == 0
    out = await push(fleet, "h9", "rebind under refuse", {**BROKEN, **hacks["rebind the name under test"]})
    assert kind(out) == ("rejected", "check_failed"), out

    # honest: a new function and its tests lands; its tests ran apart, on the merged commit, and count for main
    mul = {"calc.py": "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n",
           "tests/test_mul.py": "from calc import mul\n\n\ndef test_mul():\n    assert mul(3, 4) == 12\n"}
    out = await push(fleet, "honest", "mul", mul)
    assert out["status"] == "landed", out
    assert out["verdict"]["tests"]["own"] == {"outcome": "pass", "files": ["tests/test_mul.py"],
                                              "counts": {"passed": 1}, "failing": [],
                                              "commit": out["verdict"]["merged_sha"]}, out["verdict"]
    assert main_blob(fleet, "tests/test_mul.py") == mul["tests/test_mul.py"].encode()  # the landed commit has them
    # a test helper too: main's tests never ran with it, so the run apart is the whole suite on the merged commit
    sq = {"calc.py": mul["calc.py"] + "\n\ndef square(a):\n    return a * a\n",
          "tests/helpers.py": "CASES = [(2, 4), (3, 9)]\n",
          "tests/test_square.py": "from calc import square\nfrom helpers import CASES\n\n\ndef test_square():\n"
                                  "    assert all(square(a) == b for a, b in CASES)\n"}
    out = await push(fleet, "honest2", "square", sq)
    assert out["status"] == "landed", out
    own = out["verdict"]["tests"]["own"]
    assert own["whole"] and own["counts"] == {"passed": 3} and out["verdict"]["tests"]["reset"]["whole"], own


async def test_acceptance_tests_judge_the_code_without_the_candidates_tests(make_fleet: Callable[..., Any],
                                                                            tmp_path: Path) -> None:
    """A subtask with acceptance tests for ``sub()``: a candidate that leaves ``sub`` wrong and patches it right from
    a new test module (or a ``tests/__init__.py``) fails its acceptance tests, which run without that module."""
    fleet: Fleet = await make_fleet(check_command(), MERGEBOT_RETRY_FAILED_CHECKS="0")
    local = tmp_path / "accept.py"
    local.write_text("from calc import sub\n\n\ndef test_sub():\n    assert sub(3, 1) == 2\n")
    wrong = {"calc.py": "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return 0\n"}
    patch = "import calc\n\ncalc.sub = lambda a, b: a - b\n"
    for i, files in enumerate(({"tests/test_aaa.py": patch + "\n\ndef test_x():\n    pass\n"},
                               {"tests/__init__.py": patch})):
        _, fleet.tokens[f"a{i}"] = await fleet.db.agents.add_agent(name=f"a{i}", role=Role.AGENT)
        made = cli(fleet, "root", "create", f"sub() {i}", "--accept", f"{local}:tests/test_accept.py", "--json")
        sid = json.loads(made.stdout)["subtask"]["id"]
        claim, wt = fleet.start(f"a{i}")
        assert claim.subtask_id == sid
        commit(wt, {**wrong, **files})
        out = agent.push(fleet.client(f"a{i}"), wt, wait=120, progress=False)
        v = out["verdict"]
        assert kind(out) == ("rejected", "check_failed"), v
        assert "tests/test_accept.py::test_sub" in v["failing_tests"], v


PAYLOAD = {"calc_fix.py": FIX}  # the module each start-up file tries to load
STARTUP = {
    ".pytest.ini": "[pytest]\naddopts = -p calc_fix\n",
    "pytest.toml": "[pytest]\naddopts = ['-p', 'calc_fix']\n",
    ".pytest.toml": "[pytest]\naddopts = ['-p', 'calc_fix']\n",
    "sitecustomize.py": FIX,
    "usercustomize.py": FIX,
    "calc_fix.pth": "import calc_fix\n",
    "fix-1.0.dist-info/entry_points.txt": "[pytest11]\nfix = calc_fix\n",
    "fix.egg-info/entry_points.txt": "[pytest11]\nfix = calc_fix\n",
    "__pycache__/calc.cpython-311.pyc": "not really byte code\n",
    "lib/calc_fix.pyc": "not really byte code\n",
}
SHADOWING = {
    "pytest.py": "import sys\nsys.exit(0)\n",  # `python -m pytest` would run this instead of pytest
    "json.py": "raise ImportError('no json today')\n",  # our plugin imports json
    "_pytest/__init__.py": "",
    "pluggy.py": "",
    "typing.py": "",
    "src/json.py": "",  # src/ is no package: a `pythonpath = src` or pytest's rootdir insertion puts it first
    "src/_pytest/__init__.py": "",
}


async def test_start_up_files_and_shadowing_modules_are_refused_at_push(make_fleet: Callable[..., Any]) -> None:
    """Every file Python or pytest reads at start-up, and every module named like one of the check's interpreter
    where it can come first on ``sys.path``, is refused at push as ``check_config``. A module inside a package, or
    among the test paths (a judging run takes those from main), or in a folder nothing puts on ``sys.path``, is not.
    Where a lead allowed check changes, the
    start still holds: ``pytest.py`` does not replace pytest, ``json.py`` does not replace the plugin's json, and a
    ``*.dist-info`` that declares a plugin is not loaded: main's test judges the broken code each time."""
    fleet: Fleet = await make_fleet(check_command(), MERGEBOT_RETRY_FAILED_CHECKS="0")
    for i, (path, text) in enumerate({**STARTUP, **SHADOWING}.items()):
        out = await push(fleet, f"s{i}", f"start-up {path}", {**BROKEN, **PAYLOAD, path: text})
        v = out["verdict"]
        assert (out["status"], v["kind"], v["paths"]) == ("refused", "check_config", [path]), (path, out)
        if path in SHADOWING:
            assert "would be imported instead of the module" in v["message"], v
    # honest neighbours land: a package's own json module, a helper among the test paths
    out = await push(fleet, "n1", "a package with a json module",
                     {"calc_ext/__init__.py": "", "calc_ext/json.py": "def dump(x):\n    return str(x)\n"})
    assert out["status"] == "landed", out
    out = await push(fleet, "n2", "a test helper named like a module",
                     {"tests/helpers/json.py": "DATA = {}\n"})
    assert out["status"] == "landed", out
    out = await push(fleet, "n3", "a script folder nothing imports from", {"scripts/secrets.py": "print('hi')\n"})
    assert out["status"] == "landed", out
    # allowed to change the check: the verifier's start holds all the same
    for i, files in enumerate(({"pytest.py": SHADOWING["pytest.py"]}, {"json.py": SHADOWING["json.py"]},
                               {**PAYLOAD, "fix-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: fix\n"
                                                                         "Version: 1.0\n",
                                "fix-1.0.dist-info/entry_points.txt": STARTUP["fix-1.0.dist-info/entry_points.txt"]})):
        out = await push(fleet, f"c{i}", f"allowed {sorted(files)}", {**BROKEN, **files}, check_changes=True)
        v = out["verdict"]
        assert kind(out) == ("rejected", "check_failed"), (files, v)
        assert v["failing_tests"] == ["tests/test_calc.py::test_add"] and v["tests"]["counts"] == {"failed": 1}, v


SUB = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"
SILENT = SUB + ("\n\nimport os\n\nif os.path.exists('/held-out') or os.environ.get('VERIFIER_HELD_OUT'):\n"
                "    os._exit(0)\n")
# It skips with the held-out files' text as the skip's message: the verifier keeps skip messages now (issue 44), so
# the message is one more way out for that text, and it must reach nothing an agent reads either.
SKIPS = SUB.replace("a - b", "2") + (
    "\n\nimport os\nimport pytest\n\n_sub = sub\n\n\ndef sub(a, b):\n    if os.path.exists('/held-out'):\n"
    "        pytest.skip(' '.join(open(os.path.join('/held-out', n)).read() for n in os.listdir('/held-out')))\n"
    "    return _sub(a, b)\n")
TALKS = SUB.replace("a - b", "2") + r'''

import json, os
if os.path.isdir("/held-out"):
    for name in os.listdir("/held-out"):
        text = open(os.path.join("/held-out", name)).read()
        ids = [text, f"{name}::{text}", f"{name}::test_sub_more[{text}]", f"../held-out/{name}::test_sub_more"]
        lines = "".join(json.dumps({"t": "r", "id": i, "when": w, "o": "failed" if w == "call" else "passed"}) + "\n"
                        for i in ids for w in ("setup", "call", "teardown"))
        print(text)
        for fd in range(3, 64):
            try:
                os.write(fd, lines.encode())
            except OSError:
                pass
'''


async def test_the_held_out_run_cannot_be_silenced_or_made_to_talk(make_fleet: Callable[..., Any],
                                                                   tmp_path: Path) -> None:
    """Code that exits 0 when it sees the held-out mount is ``no_report``; code that skips the held-out tests fails
    them; code that reads the held-out files and reports their text as failing test ids is ``held_out_failed`` with
    the ids the bot itself finds in the files, and no text of theirs reaches anything the agent's token reads."""
    from tests.test_hostile import readable_by_an_agent

    fleet: Fleet = await make_fleet(check_command(), MERGEBOT_RETRY_FAILED_CHECKS="0")
    marker = f"HELD-OUT-{tmp_path.name}-{id(fleet)}"
    assert store_held_out(fleet, tmp_path, marker).returncode == 0
    cands, subs = [], []
    for who, code, want in (("quiet", SILENT, "no_report"), ("skips", SKIPS, "held_out_failed"),
                            ("talks", TALKS, "held_out_failed")):
        out = await push(fleet, who, f"sub() by {who}", {"calc.py": code})
        v = out["verdict"]
        assert kind(out) == ("rejected", want), (who, v)
        cands.append(out["id"])
        subs.append(v["subtask_id"])
        if who == "talks":
            assert v["failing_tests"] == ["test_hidden.py::test_sub_more"], v  # named by the bot, from the files
            assert v["tests"]["held_out"]["unnamed"] == "a held-out test failed", v  # the forged ids: no word of them
    # the skipper's message (the held-out text) was kept with its held-out run, where only reviewers look
    held = [j for j in await fleet.db.jobs.jobs(limit=100) if j["purpose"] == "held_out" and j["result"]]
    assert any(marker in why for j in held for why in unpack(j["result"].get("tests")).reasons.values()), held
    seen = await readable_by_an_agent(fleet, "talks", cands, subs)
    assert not [where for where, text in seen.items() if marker in text or "test_sub_more():" in text]
    out = await push(fleet, "honest", "sub()", {"calc.py": SUB})
    assert out["status"] == "landed" and out["verdict"]["tests"]["held_out"]["outcome"] == "pass", out


EXIT_EARLY = ("import os\n\nif 'PYTEST_CURRENT_TEST' in os.environ or os.environ.get('PYTEST_ADDOPTS'):\n"
              "    os._exit(0)\n\n\ndef add(a, b):\n    return a - b\n")


async def test_the_tamper_signal_names_or_refuses_code_that_reaches_into_the_checks(
        make_fleet: Callable[..., Any]) -> None:
    """Non-test code that notices pytest and exits: on the defaults it is judged (its test never reported:
    ``tests_weakened``) and its lines are named on the verdict and the candidate's page; with ``--suspicious
    refuse`` the push is refused (``suspicious``), unless a lead allowed the subtask to change the check. An honest
    change is named nothing."""
    from tests.test_judged import candidate_page

    fleet: Fleet = await make_fleet(check_command(), MERGEBOT_RETRY_FAILED_CHECKS="0")
    out = await push(fleet, "t1", "exit when tested", {"calc.py": EXIT_EARLY})
    v = out["verdict"]
    assert kind(out) == ("rejected", "tests_weakened"), v
    assert {(f["path"], f["rule"]) for f in v["suspicious"]} >= {("calc.py", "exit_at_import"),
                                                                   ("calc.py", "pytest_env")}, v["suspicious"]
    page = await candidate_page(fleet, out["id"])
    assert 'id="suspicious"' in page and "os._exit(0)" in page and "exit_at_import" in page
    out = await push(fleet, "t2", "honest", {"calc.py": "import os\n\nDEBUG = os.environ.get('APP_DEBUG')\n\n\n"
                                                       "def add(a, b):\n    return a + b\n"})
    assert out["status"] == "landed" and out["verdict"]["suspicious"] == [], out

    env = {"MERGEBOT_DATABASE_URL": fleet.bot.db_url, "MERGEBOT_DATA_DIR": str(fleet.bot.data_dir)}
    assert cli(fleet, "root", "repo", "set", "demo", "--suspicious", "refuse", **env).returncode == 0
    out = await push(fleet, "t3", "exit when tested, refused", {"calc.py": EXIT_EARLY})
    v = out["verdict"]
    assert (out["status"], v["kind"], v["paths"]) == ("refused", "suspicious", ["calc.py"]), out
    assert "os._exit(0)" in v["message"] and "--check-changes" in v["next"], v
    out = await push(fleet, "t4", "allowed", {"calc.py": EXIT_EARLY}, check_changes=True)
    assert kind(out) == ("rejected", "tests_weakened"), out


async def test_named_checks_hold_the_first_checks_tests_to_mains_whatever_the_others_say(
        make_fleet: Callable[..., Any]) -> None:
    """The same trick under named checks (issue 43): code that exits 0 as soon as pytest imports it. The pytest
    check is one of a group whose other check passes honestly; the group's combined result still holds that check's
    tests to main's (also a group run), so nothing lands, and what the agent's token reads (the API's record, the
    candidate page) names the trick and shows each check, never a pass for the silenced one."""
    from tests.test_judged import candidate_page

    fleet: Fleet = await make_fleet(check_command(), MERGEBOT_RETRY_FAILED_CHECKS="0", repo={"checks": [
        {"name": "unit", "command": check_command()}, {"name": "lint", "command": "! grep -rq LINTBAD ."}]})
    before = fleet.main()
    out = await push(fleet, "n1", "exit when tested, among named checks", {"calc.py": EXIT_EARLY})
    v = out["verdict"]
    assert kind(out) == ("rejected", "tests_weakened"), v
    assert ("calc.py", "exit_at_import") in {(f["path"], f["rule"]) for f in v["suspicious"]}, v["suspicious"]
    record = fleet.client("ann").get(f"/api/v1/candidates/{out['id']}")
    checks = {c["name"]: c["outcome"] for c in record["verifier"]["checks"]}
    assert set(checks) == {"unit", "lint"} and checks["lint"] == "pass", record["verifier"]["checks"]
    assert record["status"] == "rejected" and record["verdict"]["kind"] == "tests_weakened", record
    page = await candidate_page(fleet, out["id"])
    assert 'id="checks"' in page and "<td><code>unit</code></td>" in page and "exit_at_import" in page
    assert fleet.main() == before  # nothing of it reached main
