"""How verdicts become landings: flaky checks, failures that main already has, the post-land check on main,
and a red main that parks candidates until a fix lands. Real server, real git pushes, real workers.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from mergebot import agent
from mergebot.client import Client
from mergebot.landing.main.repos import repos_root
from mergebot.models import Subtask
from mergebot.verify.worker import private_paths, psycopg_host
from tests.support.bot import Fleet, check_command, commit, git, until


def fails_once(tmp_path: Path) -> str:
    """A check that fails the first time it runs on the candidate and passes after: a flaky check, not the
    candidate's fault. (Only the candidate has x.txt: main's baseline run, which may run first, must not take the
    one failure.)"""
    flag = tmp_path / "flaky-once"
    return f"test ! -e x.txt || test -e {flag} || {{ touch {flag}; exit 1; }}"


async def push_x(fleet: Fleet) -> tuple[int, dict[str, Any]]:
    """ann claims a new subtask, adds x.txt and pushes, waiting for the verdict: the subtask and the push's
    result."""
    sub, _ = await fleet.db.subtasks.create_subtask(actor_id=None, title="t")
    _, wt = fleet.start("ann")
    commit(wt, {"x.txt": "x\n"})
    return sub.id, agent.push(fleet.client("ann"), wt, wait=90, progress=False)


async def test_flaky_check_lands_with_both_runs(make_fleet: Callable[..., object], tmp_path: Path) -> None:
    """A repository whose queue runs one candidate at a time (its rules: a window one wide, batches of one): the
    failed run is retried in place and the candidate lands on that retry. (The defaults' path, the failed head
    judged apart and verified again, is test_under_speculation_a_flaky_check_lands_as_flaky.)"""
    fleet: Fleet = await make_fleet(fails_once(tmp_path), MERGEBOT_VERIFIER_SANDBOX="none",  # type: ignore[operator]
                                    repo={"speculation_window": 1, "batch_size": 1})
    sub_id, result = await push_x(fleet)
    assert result["status"] == "landed", result
    landed = (await fleet.db.landing.landed(subtask_id=sub_id))[0]
    assert landed.verifier_result == "flaky"
    jobs = await fleet.db.jobs.jobs(candidate_id=result["id"])
    assert sorted(j["purpose"] for j in jobs) == ["candidate", "retry"], jobs
    assert {j["purpose"]: j["outcome"] for j in jobs} == {"candidate": "fail", "retry": "pass"}
    assert {j["purpose"]: j["window_width"] for j in jobs} == {"candidate": 1, "retry": None}  # serial: one wide
    evidence = (await fleet.db.landing.get_candidate(result["id"])).verifier or {}
    assert evidence["outcome"] == "flaky" and evidence["runs"]["first"]["outcome"] == "fail"
    # mixed evidence is not main's status: a post-land run on main's new head decides it
    await until(lambda: _main_status(fleet, sub_id, "pass"))
    post = [j for j in await fleet.db.jobs.jobs() if j["purpose"] == "post_land"]
    assert len(post) == 1 and post[0]["commit_sha"] == fleet.main() and post[0]["outcome"] == "pass"


async def test_without_retries_the_first_failure_is_the_verdict(make_fleet: Callable[..., object],
                                                                 tmp_path: Path) -> None:
    """MERGEBOT_RETRY_FAILED_CHECKS=0: the same once-failing check rejects, after one run on the candidate."""
    fleet: Fleet = await make_fleet(fails_once(tmp_path), MERGEBOT_VERIFIER_SANDBOX="none",  # type: ignore[operator]
                                    MERGEBOT_RETRY_FAILED_CHECKS="0")
    _, result = await push_x(fleet)
    assert result["status"] == "rejected", result
    assert "does not retry failed checks" in result["reason"]  # the agent knows flakiness was not ruled out
    jobs = await fleet.db.jobs.jobs(candidate_id=result["id"])
    assert "retry" not in [j["purpose"] for j in jobs]
    assert [j["outcome"] for j in jobs if j["purpose"] == "candidate"] == ["fail"]
    evidence = (await fleet.db.landing.get_candidate(result["id"])).verifier or {}
    assert evidence["outcome"] == "fail" and "retry" not in evidence["runs"]


async def test_without_retries_a_failure_main_has_too_still_parks(make_fleet: Callable[..., object]) -> None:
    """Trusting the first failure skips only the retry: the comparison with main still runs, so a failure main
    already has is not blamed on the candidate."""
    fleet: Fleet = await make_fleet(check_command(), broken_main=True,  # type: ignore[operator]
                                    MERGEBOT_RETRY_FAILED_CHECKS="0")
    await fleet.db.subtasks.create_subtask(actor_id=None, title="docs")
    _, wt = fleet.start("ann")
    commit(wt, {"docs.txt": "docs\n"})
    result = agent.push(fleet.client("ann"), wt, wait=120, progress=False)
    assert result["status"] == "parked", result
    assert "pre-existing" in result["reason"]
    assert (await fleet.db.repos.get_repo("demo")).red_since == fleet.main()
    jobs = await fleet.db.jobs.jobs(candidate_id=result["id"])
    assert sorted(j["purpose"] for j in jobs) == ["base", "candidate"]


async def test_without_retries_a_run_that_could_not_judge_is_still_tried_again(
        make_fleet: Callable[..., object], tmp_path: Path) -> None:
    """An "error" (here: the first run rewrites a tracked file) is no verdict on the change: it runs again."""
    flag = tmp_path / "broke-once"
    fleet: Fleet = await make_fleet(  # type: ignore[operator]
        f"test ! -e x.txt || test -e {flag} || {{ touch {flag}; echo changed > calc.py; }}",
        MERGEBOT_VERIFIER_SANDBOX="none", MERGEBOT_RETRY_FAILED_CHECKS="0")
    sub, _ = await fleet.db.subtasks.create_subtask(actor_id=None, title="t")
    _, wt = fleet.start("ann")
    commit(wt, {"x.txt": "x\n"})
    result = agent.push(fleet.client("ann"), wt, wait=90, progress=False)
    assert result["status"] == "landed", result
    jobs = await fleet.db.jobs.jobs(candidate_id=result["id"])
    assert {j["purpose"]: j["outcome"] for j in jobs} == {"candidate": "error", "retry": "pass"}
    assert (await fleet.db.landing.landed(subtask_id=sub.id))[0].verifier_result == "flaky"


async def _land_and_wait_for_green(fleet: Fleet) -> Subtask:
    """Ann lands one change; returns its subtask once main's post-land status says pass."""
    sub, _ = await fleet.db.subtasks.create_subtask(actor_id=None, title="t")
    _, wt = fleet.start("ann")
    commit(wt, {"y.txt": "y\n"})
    assert agent.push(fleet.client("ann"), wt, wait=90, progress=False)["status"] == "landed"

    async def main_is_green() -> bool:
        return (await fleet.db.landing.landed(subtask_id=sub.id))[0].main_status == "pass"

    await until(main_is_green)
    return sub

async def test_post_land_status_comes_from_the_run_that_landed_main_s_exact_head(
        make_fleet: Callable[..., object]) -> None:
    """Main moved to exactly the commit a run of the same check passed on: that run is main's status. Running
    it again on the same tree could only measure flakiness, and would take a worker from the queue."""
    fleet: Fleet = await make_fleet(check_command())  # type: ignore[operator]
    sub = await _land_and_wait_for_green(fleet)
    landed = (await fleet.db.landing.landed(subtask_id=sub.id))[0]
    assert landed.main_sha == fleet.main() and landed.verifier_result == "pass"
    jobs = await fleet.db.jobs.jobs()
    # one run on main's new head (no second one), and the imported main's baseline: its tests' outcomes
    assert sorted(j["purpose"] for j in jobs) == ["baseline", "candidate"]
    on_head = [j for j in jobs if j["commit_sha"] == fleet.main()]
    assert [(j["purpose"], j["outcome"]) for j in on_head] == [("candidate", "pass")]
    assert [j["commit_sha"] for j in jobs if j["purpose"] == "baseline"] == [landed.base_sha]


async def test_post_land_check_runs_again_when_asked(make_fleet: Callable[..., object]) -> None:
    fleet: Fleet = await make_fleet(check_command(), MERGEBOT_POST_LAND_RERUN="1")  # type: ignore[operator]
    await _land_and_wait_for_green(fleet)
    post = [j for j in await fleet.db.jobs.jobs() if j["purpose"] == "post_land"]
    assert len(post) == 1 and post[0]["commit_sha"] == fleet.main() and post[0]["outcome"] == "pass"


async def test_red_main_parks_candidates_until_a_fix_lands(make_fleet: Callable[..., object]) -> None:
    fleet: Fleet = await make_fleet(check_command(), broken_main=True)  # type: ignore[operator]
    unrelated, _ = await fleet.db.subtasks.create_subtask(actor_id=None, title="unrelated", priority=5)
    fix, _ = await fleet.db.subtasks.create_subtask(actor_id=None, title="fix add")
    _, wt1 = fleet.start("ann")
    commit(wt1, {"docs.txt": "docs\n"})
    result = agent.push(fleet.client("ann"), wt1, wait=120, progress=False)
    assert result["status"] == "parked", result  # fails, but main fails too: not ann's fault
    assert "pre-existing" in result["reason"]
    repo = await fleet.db.repos.get_repo("demo")
    assert repo.red_since == fleet.main() and not repo.paused
    notes = Client(fleet.bot.url, fleet.tokens["root"]).get("/api/v1/announcements")["announcements"]
    assert any("is red" in n["body"] and n["author"] == "mergebot" for n in notes)
    assert (await fleet.db.subtasks.get_subtask(unrelated.id)).status == "submitted"  # not bounced back to ann

    _, wt2 = fleet.start("bob")
    commit(wt2, {"calc.py": "def add(a, b):\n    return a + b\n"})
    assert agent.push(fleet.client("bob"), wt2, wait=120, progress=False)["status"] == "landed"  # the fix lands
    # main's post-land check passes, main is green, and the parked candidate lands on top of the fix
    await until(lambda: _is_status(fleet, unrelated.id, "landed"), timeout=120)
    assert (await fleet.db.repos.get_repo("demo")).red_since is None
    assert (await fleet.db.subtasks.get_subtask(fix.id)).status == "landed"


async def _main_status(fleet: Fleet, subtask_id: int, status: str) -> bool:
    return (await fleet.db.landing.landed(subtask_id=subtask_id))[0].main_status == status


async def _is_status(fleet: Fleet, subtask_id: int, status: str) -> bool:
    return (await fleet.db.subtasks.get_subtask(subtask_id)).status == status


async def test_admin_pause_and_resume(make_fleet: Callable[..., object]) -> None:
    fleet: Fleet = await make_fleet(check_command())  # type: ignore[operator]
    root = Client(fleet.bot.url, fleet.tokens["root"])
    assert root.post("/api/v1/repos/demo/pause")["repo"]["paused"] is True
    sub, _ = await fleet.db.subtasks.create_subtask(actor_id=None, title="t")
    _, wt = fleet.start("ann")
    commit(wt, {"z.txt": "z\n"})
    result = agent.push(fleet.client("ann"), wt, wait=3, progress=False)
    assert result["status"] in ("waiting", "queued")  # held while paused
    ann = Client(fleet.bot.url, fleet.tokens["ann"])
    with pytest.raises(Exception, match="403"):
        ann.post("/api/v1/repos/demo/resume")
    assert root.post("/api/v1/repos/demo/resume")["repo"]["paused"] is False
    await until(lambda: _is_status(fleet, sub.id, "landed"))


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_every_socket_directory_of_a_multi_host_url_is_private(tmp_path: Path) -> None:
    """A libpq multi-host URL (a primary and its standby, each on its own socket directory) hides both from a
    check, as a URL or as keywords; a TCP host hides nothing more than the data directory."""
    a, b = tmp_path / "pg-a", tmp_path / "pg-b"
    for url in (f"postgresql://u@/mergebot?host={a},{b}&target_session_attrs=read-write",
                f"host={a},{b} dbname=mergebot target_session_attrs=read-write"):
        assert private_paths(tmp_path / "data", url) == [(tmp_path / "data").resolve(), a.resolve(), b.resolve()]
    assert private_paths(tmp_path / "data", "postgresql://u@db1,db2:5432/x") == [(tmp_path / "data").resolve()]
    # the signing key's folder is private too where it lies outside the data directory (MERGEBOT_ATTEST_DIR)
    data = (tmp_path / "data").resolve()
    assert private_paths(tmp_path / "data", attest=tmp_path / "keys") == [data, (tmp_path / "keys").resolve()]
    assert private_paths(tmp_path / "data", attest=tmp_path / "data" / "attest") == [data]


async def test_check_cannot_see_the_database_or_other_repositories(make_fleet: Callable[..., object],
                                                                    e2e_db_url: str, tmp_path: Path) -> None:
    socket_dir = psycopg_host(e2e_db_url)
    assert socket_dir and socket_dir.startswith("/")
    repos = repos_root(tmp_path / "data")
    # The check passes only if both are invisible (empty) inside the sandbox.
    fleet: Fleet = await make_fleet(  # type: ignore[operator]
        f'test -z "$(ls -A {socket_dir} 2>/dev/null)" && test -z "$(ls -A {repos} 2>/dev/null)"')
    await fleet.db.subtasks.create_subtask(actor_id=None, title="t")
    _, wt = fleet.start("ann")
    commit(wt, {"q.txt": "q\n"})
    result = agent.push(fleet.client("ann"), wt, wait=90, progress=False)
    assert result["status"] == "landed", (result["verifier"]["log_head"], result["verifier"]["command"])
    assert result["verifier"]["sandbox"] == "bwrap"


async def test_a_push_git_finished_unannounced_lands_instead_of_the_older_candidate(
        make_fleet: Callable[..., object]) -> None:
    """A push whose post-receive never reached the bot (its git process outlived a killed bot) moves the branch
    while the older candidate is being verified. The older one must not land (the crash drill once caught it
    landing, and the newer push lost); the branch's tip is queued and lands instead."""
    fleet: Fleet = await make_fleet("sleep 2; test -f calc.py",  # type: ignore[operator]
                                    MERGEBOT_VERIFIER_SANDBOX="none")
    sub, _ = await fleet.db.subtasks.create_subtask(actor_id=None, title="t")
    claim, wt = fleet.start("ann")
    commit(wt, {"a.txt": "a\n"})
    git(["push", "-q", "origin", f"HEAD:refs/heads/{claim.branch}"], wt)
    first = (await fleet.db.landing.candidates(subtask_id=sub.id))[0]

    async def verifying() -> bool:
        return (await fleet.db.landing.get_candidate(first["id"])).status == "verifying"

    await until(verifying, timeout=30)
    newer = commit(wt, {"b.txt": "b\n"})
    bare = repos_root(fleet.bot.data_dir) / "demo.git"  # git's side of a push, without its hooks
    git(["--git-dir", str(bare), "fetch", "-q", str(wt), f"+HEAD:refs/heads/{claim.branch}"], wt)
    await until(lambda: _is_status(fleet, sub.id, "landed"), timeout=60)
    landed = (await fleet.db.landing.landed(subtask_id=sub.id))[0]
    assert landed.candidate_sha == newer
    older = await fleet.db.landing.get_candidate(first["id"])
    assert older.status == "superseded" and "newer push" in (older.reason or "")


async def _queue_page(fleet: Fleet, who: str) -> str:
    import httpx

    async with httpx.AsyncClient(base_url=fleet.bot.url, timeout=30) as web:
        r = await web.post("/login", data={"token": fleet.tokens[who], "next": "/ui/queue"},
                           headers={"Origin": fleet.bot.url})
        assert r.status_code == 303, r.text
        return (await web.get("/ui/queue")).text


async def test_without_bubblewrap_every_check_is_refused_and_says_how_to_install_it(
        make_fleet: Callable[..., object]) -> None:
    """Fail closed: the server's bubblewrap is missing (MERGEBOT_BWRAP names a program that does not exist), so
    the candidate's check never runs; the verdict says why and how, the queue page and the log say so once."""
    fleet: Fleet = await make_fleet(check_command(), MERGEBOT_BWRAP="/nonexistent/bwrap")  # type: ignore[operator]
    await fleet.db.subtasks.create_subtask(actor_id=None, title="t")
    main = fleet.main()
    _, wt = fleet.start("ann")
    commit(wt, {"x.txt": "x\n"})
    result = agent.push(fleet.client("ann"), wt, wait=90, progress=False)
    v = result["verdict"]
    assert (result["status"], v["kind"]) == ("rejected", "verifier_error"), result
    assert "bubblewrap" in v["message"] and "apt-get install -y bubblewrap" in v["log_tail"], v
    assert "MERGEBOT_SANDBOX=none" in v["log_tail"] and v["next"] == "`mergebot submit --again`"
    assert fleet.main() == main  # nothing was judged, so nothing landed
    page = await _queue_page(fleet, "root")
    assert 'id="sandbox-warning"' in page and "checks refused" in page and "/nonexistent/bwrap" in page
    said = [line for line in fleet.bot.log.read_text().splitlines() if "every check is refused" in line]
    assert len(said) == 1, said  # said once, at start


async def test_with_sandbox_none_checks_run_and_every_record_says_so(make_fleet: Callable[..., object]) -> None:
    fleet: Fleet = await make_fleet(check_command(), MERGEBOT_SANDBOX="none")  # type: ignore[operator]
    sub, _ = await fleet.db.subtasks.create_subtask(actor_id=None, title="t")
    _, wt = fleet.start("ann")
    commit(wt, {"x.txt": "x\n"})
    result = agent.push(fleet.client("ann"), wt, wait=90, progress=False)
    assert result["status"] == "landed" and result["verdict"]["sandbox"] == "none", result
    landed = fleet.client("ann").landed(subtask=sub.id)
    assert [r["verifier_sandbox"] for r in landed] == ["none"], landed
    assert "disk=poll" in landed[0]["verifier_limits"], landed  # no sandbox: the disk limit is polled
    page = await _queue_page(fleet, "root")
    assert 'id="sandbox-warning"' in page and "sandbox: none" in page
    said = [line for line in fleet.bot.log.read_text().splitlines() if "MERGEBOT_SANDBOX=none" in line]
    assert len(said) == 1, said


async def test_under_speculation_a_flaky_check_lands_as_flaky(make_fleet: Callable[..., object],
                                                              tmp_path: Path) -> None:
    """A window of two: the failed run is judged apart, its retry passes, the candidate goes back to the queue and
    is verified again on the current main; it lands recorded as ``flaky`` with the first two runs as evidence, as
    on the serial path, and the flaky landings counter counts it."""
    fleet: Fleet = await make_fleet(fails_once(tmp_path), MERGEBOT_VERIFIER_SANDBOX="none",  # type: ignore[operator]
                                    MERGEBOT_SPECULATION_WINDOW="2", MERGEBOT_VERIFIER_WORKERS="2")
    sub_id, result = await push_x(fleet)
    assert result["status"] == "landed", result
    landed = (await fleet.db.landing.landed(subtask_id=sub_id))[0]
    assert landed.verifier_result == "flaky" and landed.policy == "speculative+risk-aware", landed
    jobs = await fleet.db.jobs.jobs(candidate_id=result["id"])
    assert [(j["purpose"], j["outcome"]) for j in sorted(jobs, key=lambda j: j["id"])] == [
        ("candidate", "fail"), ("retry", "pass"), ("candidate", "pass")], jobs
    evidence = (await fleet.db.landing.get_candidate(result["id"])).verifier or {}
    assert evidence["outcome"] == "flaky" and evidence["runs"]["first"]["outcome"] == "fail", evidence
    assert evidence["runs"]["retry"]["outcome"] == "pass"
    metrics = httpx.get(f"{fleet.bot.url}/metrics", headers={"Authorization": f"Bearer {fleet.tokens['ann']}"},
                        timeout=30).text
    assert 'mergebot_landings_total{repo="demo",result="flaky"} 1' in metrics, metrics[-2000:]
