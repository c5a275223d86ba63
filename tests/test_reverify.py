"""Re-verifying a landed record (issue 44, ``mergebot reverify LANDED``): the landed run's check run again on the
same commit, command, configuration and sandbox, compared test by test with the record, and signed. The comparison
alone first; then through a real push, a real bot and its real verifier: a deterministic suite is ``reproduced``,
a planted test that reads a file of a sandbox path the test changes afterwards ``diverged`` (a finding), by the CLI,
the API and the landed page, and an agent is refused."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import httpx

from mergebot.attest import keys, notes, statement
from mergebot.attest.envelope import IN_TOTO, open_envelope
from mergebot.db.database import Database
from mergebot.landing.main.repos import repos_root, set_rules
from mergebot.landing.main.reverify import ABSENT, PREDICATE, compare, flaky_tests, record_from_statement
from mergebot.rules import Rules, RulesChange
from tests.support.bot import PYTEST, Fleet, git, until
from verifier.outcomes import Outcomes, pack

# -- the comparison alone --------------------------------------------------------------------------------------


def test_the_same_outcomes_reproduce_and_any_difference_is_named() -> None:
    was = {"t::a": "passed", "t::b": "skipped", "t::c": "xfailed"}
    same = compare(was, True, dict(was), True)
    assert same.outcome == "reproduced" and same.differing == () and same.overall_same

    skipped_now = compare(was, True, {**was, "t::a": "skipped"}, True)  # a skip where a pass was: not the same
    assert skipped_now.outcome == "diverged" and skipped_now.differing == (("t::a", "passed", "skipped"),)
    lost = compare(was, True, {"t::a": "passed", "t::b": "skipped", "t::new": "passed"}, True)
    assert lost.outcome == "diverged"
    assert lost.differing == (("t::c", "xfailed", ABSENT), ("t::new", ABSENT, "passed"))
    overall = compare(was, True, dict(was), False)  # the tests agree, the check does not (its exit): diverged
    assert overall.outcome == "diverged" and not overall.overall_same and overall.differing == ()
    assert compare({}, True, {}, True).outcome == "reproduced"  # a check that reports no test: its result alone


def test_only_tests_known_to_flake_differing_is_flaky_only() -> None:
    was = {"t::steady": "passed", "t::flaky": "passed", "t::other": "passed"}
    now = {**was, "t::flaky": "failed"}
    flaky = compare(was, True, now, False, known_flaky={"t::flaky"})
    assert flaky.outcome == "flaky_only" and flaky.flaky == {"t::flaky"}
    assert flaky.as_json() == [{"id": "t::flaky", "was": "passed", "now": "failed", "knownFlaky": True}]
    both = compare(was, True, {**now, "t::other": "error"}, False, known_flaky={"t::flaky"})
    assert both.outcome == "diverged" and both.flaky == {"t::flaky"}  # one difference not known to flake

    # the memory: the tests that did not pass in runs whose retry on the same commit passed
    packed = pack(Outcomes({"t::flaky": "failed", "t::steady": "passed", "t::skip": "skipped"}, source="pytest"))
    record = {"source": "pytest", "packed": packed}
    assert flaky_tests([record, None]) == {"t::flaky", "t::skip"}


def test_a_record_without_its_run_is_read_from_the_landing_statement() -> None:
    summary = statement.tests_summary({"t::a": "passed", "t::b": "passed", "t::s": "skipped"})
    now = {"t::a": "passed", "t::b": "passed", "t::s": "skipped"}
    assert compare(record_from_statement(summary, now), True, now, True).outcome == "reproduced"
    fewer = {"t::a": "passed", "t::s": "skipped"}  # a passed test the statement counted is gone
    gone = compare(record_from_statement(summary, fewer), True, fewer, True)
    assert gone.outcome == "diverged" and len(gone.differing) == 1 and "does not name" in gone.differing[0][0]


# -- through a real push, bot and verifier -------------------------------------------------------------------------

PLANTED = "tests/test_planted.py::test_the_flag_is_as_it_was"


def reverify_cli(fleet: Fleet, who: str, landed_id: int) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MERGEBOT_TOKEN": fleet.tokens[who], "MERGEBOT_URL": fleet.bot.url}
    return subprocess.run([sys.executable, "-m", "mergebot", "reverify", str(landed_id), "--wait", "--timeout",
                           "120"], env=env, capture_output=True, text=True, check=False)


async def test_reverify_reproduces_a_deterministic_suite_and_diverges_on_a_planted_test(fleet: Fleet,
                                                                                        var_tmp: Path) -> None:
    db = fleet.db
    flag = var_tmp / "flag"  # outside /tmp: a sandboxed run has a private one
    flag.write_text("as landed\n")
    hidden = b"from calc import add\n\n\ndef test_hidden_add():\n    assert add(1, 2) == 3\n"  # held-out checks
    rules = RulesChange.of(sandbox_paths=[str(flag)], held_out_command=f'{PYTEST} "$VERIFIER_HELD_OUT"')
    await set_rules(db, "demo", rules, held_out=[("test_hidden.py", hidden)])
    await db.subtasks.create_subtask(actor_id=None, title="a planted test")
    test = (f"from pathlib import Path\n\n\ndef test_the_flag_is_as_it_was():\n"
            f"    assert Path({str(flag)!r}).read_text() == 'as landed\\n'\n")
    claim, _, _ = fleet.start_and_push("ann", {"tests/test_planted.py": test})

    async def landed_() -> bool:
        return (await db.subtasks.get_subtask(claim.subtask_id)).status == "landed"

    await until(landed_, timeout=90)
    landed = (await db.landing.landed(repo="demo", limit=1))[0]
    api = f"{fleet.bot.url}/api/v1/landed/{landed.id}/reverify"

    def as_(who: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {fleet.tokens[who]}"}

    refused = httpx.post(api, headers=as_("ann"), timeout=30)  # an agent does the work; it does not judge it
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
    assert httpx.get(api, headers=as_("ann"), timeout=30).json()["job"] is None  # nothing started

    # the same tree, command and sandbox: the same outcomes, by the reviewer's command line
    same = reverify_cli(fleet, "rita", landed.id)
    assert same.returncode == 0, same.stdout + same.stderr
    assert f"landed record {landed.id}: reproduced" in same.stdout
    first = httpx.get(api, headers=as_("rita"), timeout=30).json()
    job = await db.jobs.get_job(first["job"]["id"])
    assert landed.run_id is not None
    original = await db.jobs.get_job(landed.run_id)  # the judged commit, with the candidate's own tests apart
    assert job.purpose == "reverify" and job.commit_sha == original.commit_sha
    assert job.sandbox is not None and original.sandbox is not None and job.sandbox["own"] == original.sandbox["own"]
    assert job.command == landed.verifier_command and not (job.cache or {}).get("write")
    assert job.sandbox is not None and job.sandbox["paths"] == [str(flag)]
    p = first["result"]["predicate"]
    assert first["result"]["outcome"] == p["outcome"] == "reproduced" and p["differing"] == []
    assert p["landed"] == landed.id and p["run"]["tests"]["counts"] == {"passed": 2} and p["record"]["source"] == "run"
    held = await db.jobs.reverify_held_out(landed.id, job.id)  # the held-out checks ran again too, beside it
    assert held is not None and held.purpose == "held_out" and held.commit_sha == job.commit_sha
    assert p["heldOut"] == {"was": "pass", "now": "pass", "job": held.id}
    rows = await db.attest.of_landed(landed.id, "demo", landed.merged_sha)
    landing_rows = [r for r in rows if r["kind"] == "landing"]
    assert p["landingStatement"]["digest"]["sha256"] == hashlib.sha256(
        base64.b64decode(landing_rows[0]["envelope"]["payload"])).hexdigest()

    # the file the planted test reads changes: the same check no longer gives the record's result
    flag.write_text("changed since\n")
    started = httpx.post(api, headers=as_("lead"), timeout=30)
    assert started.status_code == 200 and started.json()["job"]["purpose"] == "reverify"
    new_job = started.json()["job"]["id"]

    async def signed() -> bool:
        got = httpx.get(api, headers=as_("rita"), timeout=30).json()["result"]
        return got is not None and got["job_id"] == new_job

    await until(signed, timeout=90)
    second = httpx.get(api, headers=as_("rita"), timeout=30).json()["result"]
    p = second["predicate"]
    assert p["outcome"] == "diverged" and not p["overallSame"]
    assert p["differing"] == [{"id": PLANTED, "was": "passed", "now": "failed", "knownFlaky": False}]
    seen_by_agent = httpx.get(api, headers=as_("ann"), timeout=30).text  # the held-out tests stay unnamed
    assert "diverged" in seen_by_agent and "test_hidden" not in seen_by_agent and "test_hidden" not in json.dumps(p)
    findings = [f for f in await db.landing.findings(repo="demo") if f["kind"] == "reverify_diverged"]
    assert len(findings) == 1 and findings[0]["detail"]["tests"] == [PLANTED]

    # signed with the data directory's key, and opened with the trust file alone
    trust = keys.read_trust(keys.trust_path(fleet.bot.data_dir / "attest").read_text())
    opened, keyid = open_envelope(second["envelope"], [k.key() for k in trust.keys], IN_TOTO)
    assert opened["predicateType"] == PREDICATE and keyid == second["keyid"] == trust.keys[0].keyid
    assert opened["subject"][0]["digest"] == {"gitCommit": landed.merged_sha, "gitTree": landed.tree_sha}

    # ... and in the landed commit's git note, after its landing statement and test result
    bare = repos_root(fleet.bot.data_dir) / "demo.git"

    def note() -> str:
        return git(["notes", "--ref", "mergebot", "show", landed.merged_sha], bare, check=False).stdout

    await until(lambda: len(notes.envelopes(note())) == 4, timeout=30)
    kinds = [json.loads(base64.b64decode(e["payload"]))["predicateType"] for e in notes.envelopes(note())]
    assert kinds == [statement.LANDING, statement.TEST_RESULT, PREDICATE, PREDICATE]

    # the landed page: the last result, and the button for a reviewer (an agent sees no button)
    with httpx.Client(base_url=fleet.bot.url, timeout=30) as web:
        assert web.post("/login", data={"token": fleet.tokens["ann"], "next": "/ui/landed"}).status_code in (200, 303)
        page = web.get(f"/ui/landed/{landed.id}").text
        assert 'id="reverify"' in page and "diverged" in page and 'id="reverify-form"' not in page
    with httpx.Client(base_url=fleet.bot.url, timeout=30) as web:
        web.post("/login", data={"token": fleet.tokens["rita"], "next": "/ui/landed"})
        page = web.get(f"/ui/landed/{landed.id}").text
        assert 'id="reverify-form"' in page and PLANTED in page
        csrf = re.search(r'action="/ui/landed/\d+/reverify".*?name="csrf" value="([0-9a-f]+)"', page, re.S)
        assert csrf is not None
        forged = web.post(f"/ui/landed/{landed.id}/reverify", data={"csrf": "0" * 64},
                          headers={"Origin": fleet.bot.url})
        assert forged.status_code == 403
        pressed = web.post(f"/ui/landed/{landed.id}/reverify", data={"csrf": csrf.group(1)},
                           headers={"Origin": fleet.bot.url})
        assert pressed.status_code == 303 and pressed.headers["location"].endswith("#reverify")
    third = await db.jobs.reverify_latest(landed.id)
    assert third is not None and third.id > new_job

    async def third_signed() -> bool:  # and it ends signed, as the others (the bot then stops at once)
        got = httpx.get(api, headers=as_("rita"), timeout=30).json()["result"]
        return got is not None and got["job_id"] == third.id

    await until(third_signed, timeout=90)


async def test_the_flaky_memory_is_the_runs_a_retry_on_the_same_commit_passed(db: Database) -> None:
    await db.repos.create_repo(name="demo", root_sha="0" * 40, rules=Rules.of(
        target_branch="main", verifier_command="true", verifier_timeout_s=60, protected_paths=["ci/"],
        max_push_bytes=1 << 20, max_file_bytes=1 << 20))

    async def run(sha: str, purpose: str, outcome: str, tests: dict[str, str]) -> None:
        await db.jobs.enqueue_job(repo="demo", commit_sha=sha, command="true", timeout_s=60, purpose=purpose)
        job = await db.jobs.claim_job(worker_id=None, worker_name="here")
        assert job is not None and job.purpose == purpose
        record = {"source": "pytest", "packed": pack(Outcomes(tests, source="pytest"))}
        await db.jobs.finish_job(job_id=job.id, worker_id=None, claim_version=job.claim_version, outcome=outcome,
                                 result={"commit_sha": sha, "outcome": outcome, "tests": record})

    await run("a" * 40, "candidate", "fail", {"t::flaky": "failed", "t::ok": "passed"})
    await run("a" * 40, "retry", "pass", {"t::flaky": "passed", "t::ok": "passed"})  # the same commit: flaky
    await run("b" * 40, "candidate", "fail", {"t::broken": "failed"})
    await run("b" * 40, "retry", "fail", {"t::broken": "failed"})  # failed again: broken, not flaky
    await run("c" * 40, "post_land", "fail", {"t::main": "error"})  # never run again
    await run("d" * 40, "post_land", "fail", {"t::main_flaky": "failed"})
    await run("d" * 40, "bisect", "pass", {"t::main_flaky": "passed"})  # main's red, confirmed once more: flaky
    assert flaky_tests(await db.jobs.known_flaky("demo")) == {"t::flaky", "t::main_flaky"}
