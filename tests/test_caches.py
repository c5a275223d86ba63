"""Warm, poison-proof caches (``verifier.cache``): generations only a run on main writes, every run reads.

The sandbox tests run the real check under bubblewrap (skipped where it is not usable; CI installs it): the
cache generation is a read-only lower layer of the checkout's overlay, so whatever a candidate's check writes
at a cache path is thrown away with its run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pygit2
import pytest

from mergebot import agent, models
from mergebot.landing.judge import runs
from mergebot.rules import Rules, RulesChange
from tests.support.bot import PYTEST, Fleet, commit
from tests.test_verifier import BWRAP, PASSING_SUITE, Repo
from verifier import cache as caches
from verifier.runner import CheckSpec, Setup, run_check

# The check: it reports what the cache holds, counts its runs there, and passes when asked to by a file at the
# cache path (what a poisoned cache would hold), else runs the real suite.
CHECK = ("mkdir -p .cache; echo \"cache held: $(ls .cache | tr '\\n' ' ')\"; "
         "if [ -f .cache/always-pass ]; then echo poisoned; exit 0; fi; "
         "echo run >> .cache/runs; PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 python -m pytest -q -p no:cacheprovider tests")


def run(repo: Repo, sha: str, root: Path, slot: Path, *, write: bool) -> dict[str, object]:
    result = run_check(repo.path, sha, CheckSpec(CHECK, 60), slot=slot, sandbox="bwrap",
                       cache=caches.Request(root, (".cache",), ("pyproject.toml",), write=write))
    assert result.cache is not None
    return {"outcome": result.outcome, "log": result.log_head + result.log_tail, **result.cache}


@BWRAP
def test_a_candidate_never_changes_what_a_later_run_sees(tmp_path: Path) -> None:
    """A run on main writes generation 1. A candidate whose check plants a poison at the cache path (a file that
    makes every later check pass) fails on its own merits; its writes die with its run, the generation is
    unchanged, and the next candidate, which should fail, still fails. Each run names the generation it read."""
    repo, root, slot = Repo(tmp_path / "src.git"), tmp_path / "caches", tmp_path / "slot"
    main = repo.commit(PASSING_SUITE, "main")
    first = run(repo, main, root, slot, write=False)
    assert (first["outcome"], first["generation"], first["wrote"]) == ("pass", None, None)
    assert "cache miss" in str(first["note"])  # a miss is never a failure: it ran from scratch
    on_main = run(repo, main, root, slot, write=True)
    assert (on_main["outcome"], on_main["generation"], on_main["wrote"]) == ("pass", None, 1)
    key = str(on_main["key"])
    gen = caches.newest(root, key)
    assert gen is not None and gen[0] == 1 and (gen[1] / ".cache" / "runs").read_text() == "run\n"
    before = sorted(str(p.relative_to(gen[1])) for p in gen[1].rglob("*"))

    poison = {**PASSING_SUITE, "tests/test_calc.py": PASSING_SUITE["tests/test_calc.py"] + (
        b"\n\ndef test_plant():\n    open('.cache/always-pass', 'w').write('x')\n    assert False\n")}
    planted = run(repo, repo.commit(poison, "a poisoner"), root, slot, write=False)
    assert planted["outcome"] == "fail" and planted["generation"] == 1 and planted["wrote"] is None
    assert "cache held: runs" in str(planted["log"])  # it read generation 1

    broken = {**PASSING_SUITE, "calc/__init__.py": b"def add(a, b):\n    return a - b\n"}
    after = run(repo, repo.commit(broken, "a bug"), root, slot, write=False)
    assert after["outcome"] == "fail" and "poisoned" not in str(after["log"]), after["log"]
    gen = caches.newest(root, key)
    assert gen is not None and gen[0] == 1
    assert sorted(str(p.relative_to(gen[1])) for p in gen[1].rglob("*")) == before


@BWRAP
def test_main_runs_warm_the_next_generation_and_a_new_key_starts_afresh(tmp_path: Path) -> None:
    repo, root, slot = Repo(tmp_path / "src.git"), tmp_path / "caches", tmp_path / "slot"
    main = repo.commit(PASSING_SUITE, "main")
    assert run(repo, main, root, slot, write=True)["wrote"] == 1
    second = run(repo, main, root, slot, write=True)
    assert (second["generation"], second["wrote"]) == (1, 2)  # it read 1 and wrote 2 from it
    gen = caches.newest(root, str(second["key"]))
    assert gen is not None and (gen[1] / ".cache" / "runs").read_text() == "run\nrun\n"
    relocked = {**PASSING_SUITE, "pyproject.toml": PASSING_SUITE["pyproject.toml"] + b"# a new lock\n"}
    fresh = run(repo, repo.commit(relocked, "new lockfile"), root, slot, write=False)
    assert fresh["key"] != second["key"] and fresh["generation"] is None  # a changed key file: a new line


def test_a_generation_that_was_not_completed_is_never_used(tmp_path: Path) -> None:
    """Integrity: a generation is used only with its COMPLETE record, naming its own key and number; a harvest
    that died half-way is swept by the next one."""
    root, key = tmp_path / "caches", "k" * 32
    upper = tmp_path / "upper"
    (upper / ".cache").mkdir(parents=True)
    (upper / ".cache" / "a").write_text("one")
    assert caches.harvest(upper, None, [".cache"], root, key, "c" * 40) == 1
    (root / key / "gen-2" / "tree").mkdir(parents=True)  # died before its record
    (root / key / "tmp-3-99").mkdir()
    found = caches.newest(root, key)
    assert found is not None and found[0] == 1
    (root / key / "gen-2" / caches.COMPLETE).write_text(json.dumps({"key": "other", "generation": 2}))
    found = caches.newest(root, key)
    assert found is not None and found[0] == 1  # a record that is not its own does not count
    (root / key / "gen-2" / caches.COMPLETE).write_text("{not json")
    assert caches.newest(root, key) == found
    assert caches.harvest(upper, found[1], [".cache"], root, key, "c" * 40) in (2, 3)
    assert not (root / key / "tmp-3-99").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="whiteouts are character devices: making one needs root")
def test_harvest_applies_the_overlay_s_deletions_and_replacements(tmp_path: Path) -> None:
    root, key = tmp_path / "caches", "k" * 32
    base = tmp_path / "base"
    for rel in (".cache/keep", ".cache/gone", ".cache/dir/old"):
        (base / rel).parent.mkdir(parents=True, exist_ok=True)
        (base / rel).write_text(rel)
    upper = tmp_path / "upper"
    (upper / ".cache" / "dir").mkdir(parents=True)
    os.mknod(upper / ".cache" / "gone", 0o600 | 0o020000, os.makedev(0, 0))  # overlay's whiteout
    os.setxattr(upper / ".cache" / "dir", "trusted.overlay.opaque", b"y")  # the directory was replaced
    (upper / ".cache" / "dir" / "new").write_text("new")
    (upper / ".cache" / "added").write_text("added")
    number = caches.harvest(upper, base, [".cache"], root, key, "c" * 40)
    tree = root / key / f"gen-{number}" / "tree" / ".cache"
    assert sorted(str(p.relative_to(tree)) for p in tree.rglob("*")) == ["added", "dir", "dir/new", "keep"]


def test_a_cache_key_follows_the_key_files_and_the_paths(tmp_path: Path) -> None:
    repo = Repo(tmp_path / "src.git")
    one = repo.commit({"lock": b"a\n", "x": b"1\n"})
    two = repo.commit({"lock": b"a\n", "x": b"2\n"})
    three = repo.commit({"lock": b"b\n", "x": b"2\n"})
    git = pygit2.Repository(str(repo.path))
    req = caches.Request(tmp_path, (".venv",), ("lock",))
    assert caches.key_of(git, one, req) == caches.key_of(git, two, req) != caches.key_of(git, three, req)
    other = caches.Request(tmp_path, (".mypy_cache",), ("lock",))
    assert caches.key_of(git, one, req) != caches.key_of(git, one, other)
    assert not caches.valid_path("../x") and not caches.valid_path("/abs") and caches.valid_path(".venv")


@BWRAP
async def test_a_poisoned_cache_never_reaches_the_next_candidate_through_the_bot(
        make_fleet: Callable[..., Any]) -> None:
    """Through real pushes: ann's change plants a file at the cache path that would make every later check pass,
    and fails on its own merits. Only main's base check (a commit on main) writes a generation; bob's change, which
    breaks add, reads that generation and still fails. Each verdict's evidence names the generation it read."""
    check = ("mkdir -p .cache; if [ -f .cache/always-pass ]; then echo poisoned; exit 0; fi; "
             f"echo run >> .cache/runs; {PYTEST} tests")
    fleet: Fleet = await make_fleet(check, repo={"cache_paths": [".cache"]})
    for title in ("plant a poison", "break add"):
        await fleet.db.subtasks.create_subtask(actor_id=None, title=title)
    _, ann_wt = fleet.start("ann")
    _, bob_wt = fleet.start("bob")
    commit(ann_wt, {"tests/test_plant.py": "def test_plant():\n    open('.cache/always-pass', 'w').write('x')\n"
                                           "    assert False\n"})
    planted = agent.push(fleet.client("ann"), ann_wt, wait=120, progress=False)
    assert planted["verdict"]["kind"] == "check_failed", planted
    assert planted["verdict"]["tests"]["own"]["outcome"] == "fail", planted  # its new test ran apart, and failed
    # what it read was a miss, or the generation main's baseline run wrote meanwhile: never a candidate's
    assert planted["verifier"]["cache"]["generation"] in (None, 1), planted["verifier"]["cache"]
    caches_dir = fleet.bot.data_dir / "slots" / "caches" / "demo"
    generations = sorted(caches_dir.glob("*/gen-*"))
    assert generations, "main's base check wrote no generation"
    assert not list(caches_dir.rglob("always-pass"))
    commit(bob_wt, {"calc.py": "def add(a, b):\n    return a - b\n"})
    broken = agent.push(fleet.client("bob"), bob_wt, wait=120, progress=False)
    assert broken["verdict"]["kind"] == "check_failed", broken
    run = broken["verifier"]
    assert run["cache"]["generation"] is not None and "poisoned" not in run["log_head"] + run["log_tail"]
    assert not list(caches_dir.rglob("always-pass"))
    commit(bob_wt, {"calc.py": "def add(a, b):\n    return a + b  # fixed\n"})  # as the verdict says
    fixed = agent.push(fleet.client("bob"), bob_wt, wait=120, progress=False)
    assert fixed["status"] == "landed", fixed
    [row] = await fleet.db.landing.landed(subtask_id=fixed["subtask_id"])
    assert row.verifier_cache is not None and row.verifier_cache["generation"] is not None  # on the landed row
    # a reviewer's re-run reproduces the landed run with the same generation
    env = {**os.environ, "MERGEBOT_URL": fleet.bot.url, "MERGEBOT_TOKEN": fleet.tokens["ann"],
           "MERGEBOT_DATA_DIR": str(fleet.bot.data_dir)}
    out = subprocess.run([sys.executable, "-m", "mergebot", "verify", row.merged_sha, "--repo", "demo", "--cache",
                          "--json"], env=env, capture_output=True, text=True, check=False)
    rerun = json.loads(out.stdout)
    assert rerun["outcome"] == "pass" and rerun["tree_sha"] == row.tree_sha, out.stderr
    assert rerun["cache"]["generation"] == row.verifier_cache["generation"], rerun["cache"]


@BWRAP
def test_a_setup_step_runs_first_and_its_failure_is_the_run_s(tmp_path: Path) -> None:
    """The setup runs in the same checkout before the check (what it installs, the check finds); a setup that
    fails is the run's failure, saying so, and the check does not run."""
    repo, slot = Repo(tmp_path / "src.git"), tmp_path / "slot"
    sha = repo.commit(PASSING_SUITE)
    ok = run_check(repo.path, sha, CheckSpec("cat .deps/installed", 60,
                   setup=Setup("mkdir -p .deps && echo numpy > .deps/installed")), slot=slot, sandbox="bwrap")
    assert ok.outcome == "pass" and "numpy" in ok.log_head and ok.setup is not None and ok.setup["exit_code"] == 0
    bad = run_check(repo.path, sha, CheckSpec("echo the check ran", 60, setup=Setup("echo no wheel for that; exit 3")),
                    slot=slot, sandbox="bwrap")
    assert bad.outcome == "fail" and "the setup step" in bad.log_head and "exit 3" in bad.log_head
    assert "no wheel for that" in bad.log_head and "the check ran" not in bad.log_head


HOST_INTERFACES = "grep -vE '^ *(lo|Inter-| face)' /proc/net/dev | grep -q :"


@BWRAP
@pytest.mark.skipif(subprocess.run(["sh", "-c", HOST_INTERFACES]).returncode != 0,
                    reason="this machine has no network interface but loopback")
def test_only_a_setup_given_the_network_sees_it(tmp_path: Path) -> None:
    """The check never has the network; the setup has it only when the caller gives it (a commit on main), and the
    queue gives it to no candidate's run."""
    repo, slot = Repo(tmp_path / "src.git"), tmp_path / "slot"
    sha = repo.commit(PASSING_SUITE)
    online = run_check(repo.path, sha, CheckSpec(f"! sh -c \"{HOST_INTERFACES}\"", 60,
                       setup=Setup(HOST_INTERFACES, network=True)), slot=slot, sandbox="bwrap")
    assert online.outcome == "pass", online.log_head  # the setup saw the host's interfaces, the check did not
    offline = run_check(repo.path, sha, CheckSpec("true", 60, setup=Setup(HOST_INTERFACES)), slot=slot, sandbox="bwrap")
    assert offline.outcome == "fail"
    repo_row = models.Repo(name="r", target_branch="main", verifier_command="true", verifier_timeout_s=1,
                           protected_paths=[], max_push_bytes=1, max_file_bytes=1, root_sha="a" * 40,
                           setup_command="pip install -r requirements.txt", setup_network=True)
    wants = {p: runs.check_spec(repo_row, p).as_json()["cache"] for p in ("candidate", "retry", "base", "post_land")}
    assert {p: (w or {}).get("setup_network") for p, w in wants.items()} == {
        "candidate": False, "retry": False, "base": True, "post_land": True}


@BWRAP
def test_the_sandbox_s_promises_hold_with_a_cache_mounted(tmp_path: Path) -> None:
    """With a generation mounted: a tracked file changed is still an error, the system is still read-only, /tmp
    still private, and there is still no network."""
    repo, root, slot = Repo(tmp_path / "src.git"), tmp_path / "caches", tmp_path / "slot"
    main = repo.commit(PASSING_SUITE)
    assert run(repo, main, root, slot, write=True)["wrote"] == 1
    req = caches.Request(root, (".cache",), ("pyproject.toml",))

    def check(command: str) -> Any:
        result = run_check(repo.path, main, CheckSpec(command, 60), slot=slot, sandbox="bwrap", cache=req)
        assert result.cache is not None and result.cache["generation"] == 1, result.cache
        return result

    tracked = check("echo x >> calc/__init__.py")
    assert tracked.outcome == "error" and "modified tracked files" in tracked.log_head
    assert check("touch /usr/mergebot-cache-probe").outcome == "fail"
    leak = f"/tmp/mergebot-cache-leak-{os.getpid()}"
    assert check(f"echo secret > {leak}").outcome == "pass" and not os.path.exists(leak)
    assert check(HOST_INTERFACES).outcome == "fail"  # no interface but loopback
    assert check("cat .cache/runs").outcome == "pass"  # and the cache is there


async def test_a_repository_s_rules_change_with_repo_set(e2e_db: Any, tmp_path: Path) -> None:
    """``mergebot repo set`` changes only the rules it is given, checks cache paths as ``repo add`` does, clears a
    setup step when asked, and names a repository that does not exist."""
    from mergebot.errors import Invalid, NotFound
    from mergebot.landing.main.repos import add_repo, repos_root, set_rules
    from tests.support.bot import make_project

    await add_repo(e2e_db, repos_root(tmp_path / "data"), name="demo", source=str(make_project(tmp_path / "src")),
                   rules=Rules.of(verifier_command="pytest -q", cache_paths=[".venv"], setup_command="make deps"))
    repo = await set_rules(e2e_db, "demo", RulesChange.of(cache_paths=[".venv", ".mypy_cache"], cache_key=["uv.lock"],
                           setup_network=True))
    assert (repo.cache_paths, repo.cache_key, repo.setup_command, repo.setup_network, repo.verifier_command) == (
        [".venv", ".mypy_cache"], ["uv.lock"], "make deps", True, "pytest -q")
    repo = await set_rules(e2e_db, "demo", RulesChange.of(footprint_refuse=True, reset={"setup_command"}))
    assert (repo.setup_command, repo.footprint_refuse, repo.cache_paths) == (None, True, [".venv", ".mypy_cache"])
    with pytest.raises(Invalid):
        await set_rules(e2e_db, "demo", RulesChange.of(cache_paths=["../outside"]))
    with pytest.raises(NotFound):
        await set_rules(e2e_db, "nope", RulesChange.of(verifier_command="true"))
