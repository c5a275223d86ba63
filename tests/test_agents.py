"""Agents that think for an hour: kept claims, typed verdicts, work they wait for, and a CLI with no tracebacks.

Everything here runs as an agent would: the real ``mergebot`` command in a fresh process per step, a real server,
real git over HTTP. Verdicts are checked as records (kind, final, next, branch, paths, hunks, failing tests),
never only as text.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from mergebot import agent
from mergebot.agent import guide, keeper
from mergebot.cli.parser import build_parser
from mergebot.landing.judge import verdicts
from mergebot.landing.judge.verdicts import KINDS
from mergebot.models import VERDICT_HEADER
from tests.support.bot import PYTEST, Fleet, check_command, commit, git, until

SHORT_LEASE = {"MERGEBOT_LEASE_SECONDS": "2", "MERGEBOT_RECOVERY_GRACE_SECONDS": "0"}


def cli(fleet: Fleet, who: str, *args: str, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    """``mergebot ARGS`` as agent ``who`` would run it: a fresh process, the token and server from the environment."""
    full = {**os.environ, "MERGEBOT_URL": fleet.bot.url, "MERGEBOT_TOKEN": fleet.tokens[who], **env}
    out = subprocess.run([sys.executable, "-m", "mergebot", *args], capture_output=True, text=True, env=full,
                         cwd=cwd or fleet.work.parent, check=False, timeout=300)
    assert "Traceback" not in out.stderr, out.stderr
    return out


async def test_a_kept_claim_outlives_five_leases_and_lands(make_fleet: Callable[..., Any]) -> None:
    fleet: Fleet = await make_fleet(check_command(), **SHORT_LEASE)
    sub, _ = await fleet.db.subtasks.create_subtask(actor_id=None, title="long thought")
    wt = fleet.work / "ann"
    out = cli(fleet, "ann", "start", "--repo", "demo", "--dir", str(wt))
    assert out.returncode == 0 and "kept alive" in out.stdout, out.stdout + out.stderr
    started = time.monotonic()
    while time.monotonic() - started < 11:  # more than five 2 s leases, with no heartbeat by hand
        await asyncio.sleep(1)
        now = await fleet.db.subtasks.get_subtask(sub.id)
        assert (now.status, now.claim_version, now.owner) == ("running", 1, "ann"), now
    status = cli(fleet, "ann", "status", "--dir", str(wt))
    assert "kept by a keeper" in status.stdout, status.stdout
    commit(wt, {"thought.txt": "after a long thought\n"})
    out = cli(fleet, "ann", "submit", "--dir", str(wt))
    assert out.returncode == 0 and out.stdout.startswith("landed"), out.stdout + out.stderr
    await until(lambda: not keeper.state(wt)["running"], timeout=15)
    assert keeper.state(wt)["stopped_because"] == "the subtask landed"
    notes = [n["body"] for n in await fleet.db.subtasks.notes(subtask_id=sub.id)]
    assert notes[-1].startswith("[keeper] stopped keeping") and notes[-1].endswith("the subtask landed"), notes


async def test_an_idle_agent_loses_its_claim_and_the_keeper_says_why(make_fleet: Callable[..., Any]) -> None:
    fleet: Fleet = await make_fleet(check_command(), **SHORT_LEASE)
    sub, _ = await fleet.db.subtasks.create_subtask(actor_id=None, title="forgotten")
    wt = fleet.work / "ann"
    started = time.monotonic()
    assert cli(fleet, "ann", "start", "--repo", "demo", "--dir", str(wt), MERGEBOT_AGENT_IDLE="2").returncode == 0

    async def ready() -> bool:
        return (await fleet.db.subtasks.get_subtask(sub.id)).status == "ready"

    await until(ready, timeout=30)
    # idle limit (2 s) + lease (2 s) + grace (0) + a keeper tick and a recovery pass
    assert time.monotonic() - started < 2 + 2 + 0 + 4
    notes = [n["body"] for n in await fleet.db.subtasks.notes(subtask_id=sub.id)]
    assert any(n.startswith("[keeper] stopped keeping") and "idle" in n for n in notes), notes
    await until(lambda: not keeper.state(wt)["running"], timeout=10)  # it exits once its note is written
    assert "idle" in keeper.state(wt)["stopped_because"]
    # Lease loss is explained to the agent that comes back: when, and what to run.
    out = cli(fleet, "ann", "heartbeat", str(sub.id), "--version", "1")
    assert out.returncode == 3 and "lapsed at" in out.stderr and "went back to ready" in out.stderr, out.stderr
    assert "version 1 no longer owns it" not in out.stderr


async def test_commits_are_never_switched_away_silently(fleet: Fleet) -> None:
    sub, _ = await fleet.db.subtasks.create_subtask(actor_id=None, title="carry me")
    wt = fleet.work / "ann"
    assert cli(fleet, "ann", "start", "--repo", "demo", "--dir", str(wt), "--no-keeper").returncode == 0
    work = commit(wt, {"carried.txt": "mine\n"})
    fleet.client("ann").post(f"/api/v1/subtasks/{sub.id}/release", {"claim_version": 1})
    refused = cli(fleet, "ann", "start", "--repo", "demo", "--dir", str(wt), "--no-keeper")
    assert refused.returncode == 2 and "--carry" in refused.stderr and "1 commit(s)" in refused.stderr
    assert (await fleet.db.subtasks.get_subtask(sub.id)).status == "ready"  # refused before it claimed
    carried = cli(fleet, "ann", "start", "--repo", "demo", "--dir", str(wt), "--no-keeper", "--carry")
    assert carried.returncode == 0 and "carried 1 commit(s) from subtasks/" in carried.stdout, carried.stdout
    claim = agent.current_claim(wt)
    assert (claim.subtask_id, claim.claim_version) == (sub.id, 2)
    assert git(["rev-parse", "HEAD"], wt).stdout.strip() == work


async def test_start_checks_the_repository_before_it_claims(fleet: Fleet) -> None:
    sub, _ = await fleet.db.subtasks.create_subtask(actor_id=None, title="not orphaned")
    out = cli(fleet, "ann", "start", "--repo", "nope", "--dir", str(fleet.work / "nope"))
    assert out.returncode == 2 and "no repository named 'nope'" in out.stderr and "demo" in out.stderr
    assert (await fleet.db.subtasks.get_subtask(sub.id)).status == "ready"
    assert not (fleet.work / "nope").exists()


async def test_bad_input_gets_a_sentence_and_a_nonzero_exit(fleet: Fleet, tmp_path: Path,
                                                          e2e_db_url: str) -> None:
    (tmp_path / "tree.yaml").write_text("subtasks:\n  - key: a\n    title: A\n    prio: 3\n")
    plain = tmp_path / "plain"
    plain.mkdir()
    cases: list[tuple[list[str], dict[str, str], str]] = [
        (["submit", "--dir", str(plain)], {}, "is not in a git worktree"),
        (["submit", "--dir", str(tmp_path / "no" / "such")], {}, f"{tmp_path / 'no' / 'such'} does not exist"),
        (["create", "--file", str(tmp_path / "none.yaml")], {}, "cannot read the task tree"),
        (["stop", "--dir", str(plain)], {}, "is not in a git worktree"),
        (["heartbeat", "999", "--version", "1"], {}, "subtask 999 does not exist"),
        (["show", "999"], {}, "subtask 999 does not exist"),
        (["create", "--file", str(tmp_path / "tree.yaml")], {}, "unknown key 'prio'"),
        (["create"], {}, "give a TITLE or --file"),
        (["start"], {}, "the following arguments are required: --repo"),
        (["nosuchcommand"], {}, "invalid choice"),
        (["agent", "add", "ann"], {"MERGEBOT_DATABASE_URL": e2e_db_url}, "an agent named 'ann' already exists"),
        (["--json", "landed", "--server", "http://127.0.0.1:9"], {}, "cannot reach the server"),
    ]
    for args, env, words in cases:
        out = cli(fleet, "lead", *args, cwd=plain, **env)
        assert out.returncode != 0, (args, out.stdout)
        assert words in out.stderr, (args, out.stderr)
        if args[0] == "create" and "--file" in args:  # bad input, whatever is wrong with the file: exit 2
            assert out.returncode == 2, (args, out.returncode, out.stderr)
    assert cli(fleet, "lead", "--json", "landed").returncode == 0  # the flag before the command is accepted


def every_command() -> list[list[str]]:
    """Each command of the parser with its required arguments filled in, as a user might type them."""
    def walk(parser: argparse.ArgumentParser, prefix: list[str]) -> list[list[str]]:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                return [c for name, sub in action.choices.items() for c in walk(sub, [*prefix, name])]
        args = list(prefix)
        for action in parser._actions:
            value = "999" if action.type is int else "x"
            if not action.option_strings and action.dest != "help" and action.nargs != "?":
                args.append(value)
            elif action.required:
                args += [action.option_strings[0], value]
        return [args]

    return walk(build_parser(), [])


def test_no_command_shows_a_traceback(tmp_path: Path) -> None:
    """Every command, run with no server and no database to reach (and in a directory that is no worktree):
    a sentence on stderr and a non-zero exit, never a traceback."""
    commands = every_command()
    assert len(commands) >= 40 and ["submit"] in commands and ["serve"] in commands
    env = {**os.environ, "MERGEBOT_URL": "http://127.0.0.1:9", "MERGEBOT_TOKEN": "bogus",
           "MERGEBOT_DATABASE_URL": f"host={tmp_path}/nowhere dbname=x", "MERGEBOT_DATA_DIR": str(tmp_path / "d")}
    def run(args: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "mergebot", *args], capture_output=True, text=True, env=env,
                              cwd=tmp_path, input="not json-rpc\n", check=False, timeout=60)

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:  # each is a fresh process: run them side by side
        outs = list(pool.map(run, commands))
    for args, out in zip(commands, outs, strict=True):
        assert "Traceback" not in out.stderr + out.stdout, (args, out.stderr[-2000:])
        if args[0] in ("guide", "mcp"):  # no input of theirs to get wrong (mcp reads JSON-RPC: EOF ends it)
            continue
        assert out.returncode != 0, (args, out.stdout[-500:])
        last = out.stderr.strip().splitlines()[-1] if out.stderr.strip() else ""
        assert last.startswith("mergebot"), (args, out.stderr[-1000:])


async def test_a_claim_waits_for_work_instead_of_polling(fleet: Fleet) -> None:
    answers: dict[str, Any] = {}

    def wait_for_work(who: str, seconds: float) -> None:
        started = time.monotonic()
        answers[who] = (fleet.client(who).post("/api/v1/subtasks/claim", {"wait": seconds}),
                        time.monotonic() - started)

    waiting = [threading.Thread(target=wait_for_work, args=(who, 6.0)) for who in ("ann", "bob")]
    for t in waiting:
        t.start()
    await asyncio.sleep(1.0)  # both are waiting now
    sub, _ = await fleet.db.subtasks.create_subtask(actor_id=None, title="arrives later")
    for t in waiting:
        t.join(20)
    got = [(who, body, took) for who, (body, took) in answers.items() if body is not None]
    assert len(got) == 1, answers  # one subtask, one claim: the other waiter was not all woken for nothing
    who, body, took = got[0]
    assert body["handle"]["id"] == sub.id and took < 4, (who, took)
    other = next(w for w in answers if w != who)
    assert answers[other][0] is None and answers[other][1] >= 5.5  # 204 after its whole wait


async def test_submit_again_requeues_the_tip_once(make_fleet: Callable[..., Any], tmp_path: Path) -> None:
    flag = tmp_path / "flaky-once"
    fleet: Fleet = await make_fleet(f"test ! -e x.txt || test -e {flag} || {{ touch {flag}; exit 1; }}",
                                    MERGEBOT_VERIFIER_SANDBOX="none", MERGEBOT_RETRY_FAILED_CHECKS="0")
    sub, _ = await fleet.db.subtasks.create_subtask(actor_id=None, title="flaky")
    claim, wt = fleet.start("ann")
    commit(wt, {"x.txt": "x\n"})
    first = agent.push(fleet.client("ann"), wt, wait=90, progress=False)
    assert first["status"] == "rejected" and first["verdict"]["kind"] == "check_failed", first
    assert first["verdict"]["final"] is True and first["verdict"]["branch"] == f"refs/heads/{claim.branch}"
    same = agent.push(fleet.client("ann"), wt, wait=30, progress=False)  # the same commit: git pushes nothing
    assert same["status"] == "unchanged" and same["verdict"]["kind"] == "unchanged" and "--again" in same["reason"]
    await fleet.db.repos.set_paused(repo="demo", paused=True, reason="holding the queue")
    again = [fleet.client("ann").post(f"/api/v1/subtasks/{sub.id}/submit-again", {"claim_version": 1})
             for _ in range(2)]
    assert again[0]["candidate"]["id"] == again[1]["candidate"]["id"] != first["id"]  # twice is once
    await fleet.db.repos.set_paused(repo="demo", paused=False, reason=None)
    landed = agent.push(fleet.client("ann"), wt, wait=90, progress=False, again=True)
    assert landed["status"] == "landed" and landed["id"] == again[0]["candidate"]["id"], landed
    assert landed["verdict"]["kind"] == "landed" and landed["verdict"]["final"] is True


async def test_push_refusals_are_typed_records(fleet: Fleet) -> None:
    s1, _ = await fleet.db.subtasks.create_subtask(actor_id=None, title="ann's")
    await fleet.db.subtasks.create_subtask(actor_id=None, title="bob's")
    claim, wt = fleet.start("ann")
    bob_claim, bob_wt = fleet.start("bob")

    def refused(wt: Path, ref: str) -> dict[str, Any]:
        out = subprocess.run(["git", "-c", f"http.extraHeader={VERDICT_HEADER}: 1", "push", "--force", "origin",
                              f"HEAD:{ref}"], cwd=wt, capture_output=True, text=True, check=False)
        assert out.returncode != 0
        verdict: dict[str, Any] = agent.submit.refused(0, 0, "", "\n".join(
            line.removeprefix("remote:").strip() for line in out.stderr.splitlines()))["verdict"]
        return verdict

    commit(wt, {"ci/check.sh": "exit 0\n"})
    v = agent.push(fleet.client("ann"), wt, wait=5, progress=False)["verdict"]
    assert (v["kind"], v["paths"], v["final"], v["branch"]) == ("protected_path", ["ci/check.sh"], True,
                                                                f"refs/heads/{claim.branch}")
    assert "git restore" in v["next"]
    git(["reset", "-q", "--hard", "HEAD~1"], wt)
    commit(wt, {"a.txt": "a\n"})
    assert refused(wt, "refs/heads/main")["kind"] == "protected_ref"
    assert refused(wt, "refs/heads/subtasks/999999/v1")["kind"] == "unknown_subtask"
    assert refused(wt, f"refs/heads/subtasks/{bob_claim.subtask_id}/v1")["kind"] == "not_owner"
    future = refused(wt, f"refs/heads/subtasks/{s1.id}/v9")
    assert future["kind"] == "not_claimed" and "mergebot start" in future["next"] and "--carry" not in future["next"]
    git(["reset", "-q", "--hard", "origin/main"], bob_wt)
    assert refused(bob_wt, f"refs/heads/{bob_claim.branch}")["kind"] == "nothing_to_land"
    git(["checkout", "-q", "--orphan", "stray"], bob_wt)
    commit(bob_wt, {"stray.txt": "no history\n"})
    assert refused(bob_wt, f"refs/heads/{bob_claim.branch}")["kind"] == "history_anomaly"
    fleet.client("ann").post(f"/api/v1/subtasks/{claim.subtask_id}/release", {"claim_version": claim.claim_version})
    fleet.start("ann", "ann2")  # claimed again, at version 2: the first claim's branch is stale
    stale = refused(wt, f"refs/heads/{claim.branch}")
    assert stale["kind"] == "stale_claim" and "--carry" in stale["next"]


async def test_a_conflict_verdict_names_its_paths_and_hunks(fleet: Fleet) -> None:
    bob, bob_wt = await fleet.bob_conflicts_with_ann()
    rejected = agent.push(fleet.client("bob"), bob_wt, wait=60, progress=False)
    v = rejected["verdict"]
    assert (v["kind"], v["paths"], v["final"], v["branch"]) == ("conflict", ["notes.txt"], True,
                                                                f"refs/heads/{bob.branch}")
    [hunk] = v["hunks"]
    assert hunk["path"] == "notes.txt" and "ANN" in hunk["hunks"][0] and "BOB" in hunk["hunks"][0]
    assert hunk["hunks"][0].startswith("<<<<<<<") and "git rebase origin/main" in v["next"]
    # the subtask carries the latest verdict and its branch too
    sub = fleet.client("bob").get(f"/api/v1/subtasks/{bob.subtask_id}")["subtask"]
    assert sub["verdict"]["kind"] == "conflict" and sub["candidate_id"] == rejected["id"]
    assert sub["branch"] == bob.branch
    # mergebot serve says it in its log, at info, with the candidate, the subtask and the kind
    logged = [json.loads(line) for line in fleet.bot.log.read_text().splitlines() if line.startswith("{")]
    assert any(r["level"] == "info" and r.get("kind") == "conflict" and r.get("candidate") == rejected["id"]
               and r.get("subtask") == bob.subtask_id for r in logged), logged[-20:]


async def test_a_failed_check_names_the_failing_test(make_fleet: Callable[..., Any]) -> None:
    fleet: Fleet = await make_fleet(f"{PYTEST} --junitxml=report.xml tests",
                                    MERGEBOT_VERIFIER_SANDBOX="none")
    await fleet.db.subtasks.create_subtask(actor_id=None, title="a bug")
    _, wt = fleet.start("ann")
    commit(wt, {"calc.py": "def add(a, b):\n    return a - b\n"})
    v = agent.push(fleet.client("ann"), wt, wait=120, progress=False)["verdict"]
    assert v["kind"] == "check_failed" and v["failing_tests"] == ["tests.test_calc::test_add"], v
    assert "assert" in v["log_tail"] and v["final"] is True


async def test_a_pre_existing_failure_is_not_final(make_fleet: Callable[..., Any]) -> None:
    fleet: Fleet = await make_fleet(check_command(), broken_main=True, MERGEBOT_RETRY_FAILED_CHECKS="0")
    await fleet.db.subtasks.create_subtask(actor_id=None, title="docs")
    _, wt = fleet.start("ann")
    commit(wt, {"docs.txt": "docs\n"})
    out = agent.push(fleet.client("ann"), wt, wait=120, progress=False)
    v = out["verdict"]
    assert out["status"] == "parked" and v["kind"] == "pre_existing" and v["final"] is False, out
    assert "mergebot wait" in v["next"]


def test_every_kind_the_code_can_produce_is_in_the_guide() -> None:
    root = Path(__file__).resolve().parents[1] / "mergebot"
    codes = set(re.findall(r'Refusal\(ref, "(\w+)"', (root / "landing" / "intake" / "checks.py").read_text()))
    assert len(codes) >= 9  # the push rules' codes, read from the rules themselves
    produced = {verdicts.for_refusal(c, "", 1, 1, None, "main", None).kind for c in codes}
    produced |= {kind for kind in KINDS}  # the queue records only kinds of KINDS (verdicts.recorded checks it)
    assert produced <= set(KINDS), produced - set(KINDS)
    text = guide.text()
    missing = [k for k in sorted(produced) if f"`{k}`" not in text]
    assert missing == [], f"the guide does not explain: {missing}"
