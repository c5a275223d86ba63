"""A repository's rules as one model (``mergebot.rules``, issue 42): defaults, the sentences its checks
say, the queue rules' fallback to the server's defaults, and, end to end, a repository added with ``--window 1
--batch 1`` landed one candidate at a time by a server whose own window is wider."""

from __future__ import annotations

import itertools
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from mergebot.auth import Role
from mergebot.cli.parser import build_parser
from mergebot.db.database import Database
from mergebot.errors import Invalid
from mergebot.landing.main.repos import repos_root
from mergebot.models import Repo
from mergebot.rules import CHECK_CONFIG, QueueRules, Rules, RulesChange, queue_rules
from tests.support.bot import BotProcess, Fleet, check_command, repo_added_by_cli


def test_a_rule_not_given_takes_its_default() -> None:
    rules = Rules.of(verifier_command="pytest -q", check_config=None, report=None)
    assert (rules.target_branch, rules.verifier_timeout_s, rules.report, rules.check_config) == (
        "main", 600, "pytest", CHECK_CONFIG)
    assert (rules.speculation_window, rules.batch_size, rules.retry_failed_checks) == (None, None, None)
    # a record built from the defaults holds the same rules (the model and the table agree)
    repo = Repo(name="x", target_branch="main", verifier_command="pytest -q", verifier_timeout_s=600,
                protected_paths=[], max_push_bytes=100 << 20, max_file_bytes=10 << 20, root_sha="a" * 40)
    assert Rules.of_repo(repo).model_dump() == rules.model_dump()


@pytest.mark.parametrize(("given", "field", "sentence"), [
    ({"disk_limit_mb": 8}, "disk_limit_mb", "the disk limit is between 16 MiB and 1 TiB"),
    ({"memory_limit_mb": 1}, "memory_limit_mb", "the memory limit is between 64 MiB and 1 TiB"),
    ({"sandbox_paths": ["relative"]}, "sandbox_paths", "sandbox path 'relative' is not an absolute path"),
    ({"sandbox_paths": ["/home"]}, "sandbox_paths", "would show a whole home directory"),
    ({"cache_paths": ["../out"]}, "cache_paths", "cache_paths '../out' is not a path inside the checkout"),
    ({"report": "xml"}, "report", "--report is pytest or junit:PATH"),
    ({"check_config": ["/etc/x"]}, "check_config", "--check-config '/etc/x' is not a glob inside the repository"),
    ({"test_paths": [" "]}, "test_paths", "--tests needs at least one glob"),
    ({"suspicious": "shout"}, "suspicious", "--suspicious is flag or refuse, not 'shout'"),
    ({"old_tests": "drop"}, "old_tests", "--old-tests is flag or refuse or run, not 'drop'"),
    ({"on_unattested": "stop"}, "on_unattested", "--on-unattested is flag or pause, not 'stop'"),
    ({"speculation_window": 65}, "speculation_window", "--window is 0 (as wide as the verifier slots) to 64"),
    ({"batch_size": 0}, "batch_size", "--batch is 1 to 64 candidates per run"),
    ({"verifier_timeout_s": "soon"}, "verifier_timeout_s", "verifier_timeout_s: input should be a valid integer"),
    ({"colour": "red"}, "colour", "'colour' is not a repository rule"),
])
def test_a_rule_that_does_not_hold_is_a_sentence_naming_it(given: dict[str, Any], field: str, sentence: str) -> None:
    for model, base in ((Rules, {"verifier_command": "true"}), (RulesChange, {})):
        with pytest.raises(Invalid) as e:
            model.of(**base, **given)
        assert sentence in e.value.message and e.value.detail["field"] == field, (model, e.value.message)
    with pytest.raises(Invalid, match="verifier_command: field required"):
        Rules.of()


def test_a_change_names_what_it_sets_and_resets() -> None:
    change = RulesChange.of(batch_size=2, risk_aware=False, reset={"speculation_window"})
    assert change.given() == ["batch_size", "risk_aware", "speculation_window"]
    assert change.params()["reset"] == ["speculation_window"] and change.params()["report"] is None
    with pytest.raises(Invalid, match="'report' has no default to go back to"):
        RulesChange.of(reset={"report"})


def test_queue_rules_fall_back_to_the_server_s_and_a_repository_s_own_win() -> None:
    server = QueueRules(window=0, batch=4, retry=True)
    unset = Repo(name="x", target_branch="main", verifier_command="true", verifier_timeout_s=60, protected_paths=[],
                 max_push_bytes=1, max_file_bytes=1, root_sha="a" * 40)
    assert queue_rules(unset, server) == server and server.width(3) == 3 and server.width(0) == 1
    own = Repo(**{**unset.__dict__, "speculation_window": 1, "batch_size": 1, "retry_failed_checks": False})
    assert queue_rules(own, server) == QueueRules(1, 1, False) and queue_rules(own, server).width(3) == 1
    assert queue_rules(Repo(**{**unset.__dict__, "batch_size": 2}), server) == QueueRules(0, 2, True)


def test_repo_add_and_repo_set_read_the_same_rules_flags() -> None:
    from mergebot.cli.repos import rules_given

    parser = build_parser()
    add = parser.parse_args(["repo", "add", "demo", "--verifier", "true", "--window", "1", "--batch", "1",
                             "--no-retry-failures", "--suspicious", "refuse", "--tests", "t/", "--risk", "off"])
    rules = Rules.of(**rules_given(add))
    assert (rules.speculation_window, rules.batch_size, rules.retry_failed_checks, rules.suspicious,
            rules.test_paths, rules.risk_aware, rules.verifier_timeout_s) == (1, 1, False, "refuse", ["t/"], False,
                                                                              600)
    change = RulesChange.of(**rules_given(parser.parse_args(["repo", "set", "demo", "--window", "3"])))
    assert change.given() == ["speculation_window"]
    assert rules.on_unattested == "flag"  # a move of main around the bot is a finding; pause only when asked
    paused = RulesChange.of(**rules_given(parser.parse_args(["repo", "set", "demo", "--on-unattested", "pause"])))
    assert paused.given() == ["on_unattested"] and paused.params()["on_unattested"] == "pause"
    assert Rules.of(**rules_given(parser.parse_args(["repo", "add", "demo", "--verifier", "true",
                                                     "--on-unattested", "pause"]))).on_unattested == "pause"


async def wait_landed(db: Database, ids: list[int], bot: BotProcess, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if [(await db.subtasks.get_subtask(i)).status for i in ids] == ["landed"] * len(ids):
            return
        time.sleep(0.2)
    raise AssertionError(f"subtasks {ids} never landed:\n" + bot.log.read_text()[-3000:])


@pytest.fixture
async def one_at_a_time(e2e_db: Database, e2e_db_url: str, tmp_path: Path) -> AsyncIterator[Fleet]:
    """A bot whose own queue is wide (a window of 3, batches of 4, 3 workers), with ``demo`` added by ``mergebot
    repo add --window 1 --batch 1``."""
    tokens, data, out = await repo_added_by_cli(
        e2e_db, e2e_db_url, tmp_path, {"root": Role.ADMIN, "ann": Role.AGENT, "bob": Role.AGENT, "cat": Role.AGENT,
                                       "rita": Role.REVIEWER},
        "--verifier", check_command(), "--timeout", "60", "--window", "1", "--batch", "1")
    said = out.stdout.splitlines()  # the rules not at their default, not a dump of every column
    assert said[0].startswith("repository demo added") and said[-1].endswith("`mergebot repo list --json`"), said
    assert {"  speculation_window: 1", "  batch_size: 1", "  verifier_timeout_s: 60"} <= set(said), said
    assert not [line for line in said if line.split(":")[0].strip() in ("max_push_bytes", "root_sha", "forge")]
    repo = await e2e_db.repos.get_repo("demo")
    assert (repo.speculation_window, repo.batch_size, repo.retry_failed_checks) == (1, 1, None)
    assert repos_root(data).joinpath("demo.git").is_dir()
    bot = BotProcess(e2e_db_url, data).start(MERGEBOT_SPECULATION_WINDOW="3", MERGEBOT_BATCH_SIZE="4",
                                              MERGEBOT_VERIFIER_WORKERS="3")
    try:
        yield Fleet(bot, e2e_db, tokens, tmp_path / "work")
    finally:
        bot.stop()


async def test_a_repository_s_window_of_one_lands_one_at_a_time_on_a_wide_server(one_at_a_time: Fleet) -> None:
    fleet = one_at_a_time
    subs = [(await fleet.db.subtasks.create_subtask(actor_id=None, title=t))[0] for t in ("one", "two", "three")]
    await fleet.db.repos.set_paused(repo="demo", paused=True, reason="collecting a queue")
    for who, name in (("ann", "one"), ("bob", "two"), ("cat", "three")):
        fleet.start_and_push(who, {f"{name}.txt": f"{name}\n"})
    await fleet.db.repos.set_paused(repo="demo", paused=False, reason=None)
    await wait_landed(fleet.db, [s.id for s in subs], fleet.bot)
    runs = sorted((j for j in await fleet.db.jobs.jobs(limit=100) if j["purpose"] == "candidate"),
                  key=lambda j: j["id"])
    # one run per candidate, each alone: a window of one (the serial queue), never overlapping the one before
    assert len(runs) == 3 and {j["window_width"] for j in runs} == {1}, runs
    assert len({j["candidate_id"] for j in runs}) == 3, runs
    for before, after in itertools.pairwise(runs):
        assert after["created_at"] >= before["finished_at"], (before, after)
    # the API changes the same rules: a rule that does not hold is a 422 naming it; reset is the server's again
    url, root = f"{fleet.bot.url}/api/v1/repos/demo/rules", {"Authorization": f"Bearer {fleet.tokens['root']}"}
    r = httpx.patch(url, json={"batch_size": 0}, headers=root)
    assert r.status_code == 422 and r.json()["error"]["field"] == "batch_size", r.text
    assert "--batch is 1 to 64" in r.json()["error"]["message"]
    r = httpx.patch(url, json={"reset": ["speculation_window", "batch_size"]}, headers=root)
    assert r.status_code == 200 and (r.json()["repo"]["speculation_window"], r.json()["repo"]["batch_size"]) == (
        None, None), r.text
    ann = {"Authorization": f"Bearer {fleet.tokens['ann']}"}
    r = httpx.patch(url, json={"retry_failed_checks": False}, headers=ann)
    assert r.status_code == 403 and (await fleet.db.repos.get_repo("demo")).retry_failed_checks is None


def test_a_run_s_spec_survives_its_json_round_trip() -> None:
    """The per-run part of the rules travels in the job as JSON and comes back the same; a job's spec from before
    (no plugins, no own tests, no caches) reads with the defaults."""
    from mergebot.landing.judge import runs
    from verifier.spec import CheckSpec, Own, Setup

    spec = CheckSpec("pytest -q", 60, memory_mb=512, sandbox_paths=("/opt/tool",), disk_limit_mb=64,
                     report="junit:out.xml", setup=Setup("make deps", network=True), cache_paths=(".venv",),
                     cache_key=("uv.lock",), cache_write=True, plugins=("mergebot",),
                     own=Own("b" * 40, ("tests/test_new.py",), whole=True))
    assert CheckSpec.from_json(spec.as_json()) == spec
    assert CheckSpec.from_json({"command": "true", "timeout_s": 5, "sandbox": None, "cache": None}) == CheckSpec(
        "true", 5.0)
    repo = Repo(name="x", target_branch="main", verifier_command="pytest", verifier_timeout_s=30, protected_paths=[],
                max_push_bytes=1, max_file_bytes=1, root_sha="a" * 40, cache_paths=[".venv"], setup_command="make",
                setup_network=True, disk_limit_mb=100)
    built = runs.check_spec(repo, "candidate")
    assert (built.command, built.timeout_s, built.disk_limit_mb, built.cache_paths, built.cache_write) == (
        "pytest", 30, 100, (".venv",), False)
    assert built.setup == Setup("make", network=False) and runs.check_spec(repo, "base").setup == Setup("make", True)
    assert CheckSpec.from_json(built.as_json()) == built
