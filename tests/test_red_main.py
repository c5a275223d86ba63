"""A red main that mends itself, end to end: a real ``mergebot serve``, real pushes, real pytest runs.

The candidates' check is the quick suite (``tests``); main's check after each landing is the full one (``tests``
and ``full``), as teams run it. Two changes each pass both alone, but the full suite fails with both on main. The
bot confirms the failure, bisects the landings since the last green check, lands a revert of the second one (a
landed row of kind ``revert``), sends that subtask back to its owner with the evidence and the next command, and
main is green again with the other landings kept. A flaky failure of main's check reverts nothing.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from mergebot.auth import Role
from mergebot.db.database import Database
from mergebot.drill.gather import stable_check
from mergebot.drill.invariants import Push
from mergebot.landing.main.mend import next_probe
from mergebot.landing.main.repos import add_repo, repos_root, set_rules
from mergebot.protocol.replay import replay
from mergebot.protocol.trace import Move
from mergebot.rules import Rules, RulesChange
from tests.support.bot import PYTEST, Fleet, commit, git, make_project, start_fleet, stop_keepers
from tests.test_metrics import Samples, parse

QUICK = f"{PYTEST} tests"
FULL = f"{PYTEST} tests full"
TOGETHER = '''import pytest


def test_the_values_stay_small_together():
    a = pytest.importorskip("a")
    b = pytest.importorskip("b")
    assert a.VALUE + b.VALUE < 3
'''


async def fleet_with(db: Database, url: str, tmp: Path, post_land: str, verifier: str = QUICK) -> Fleet:
    src = make_project(tmp / "src")
    (src / "full").mkdir()
    (src / "full" / "test_together.py").write_text(TOGETHER)
    git(["add", "-A"], src)
    git(["commit", "-qm", "the full suite"], src)
    rules = Rules.of(verifier_command=verifier, verifier_timeout_s=60, post_land_command=post_land)
    return await start_fleet(db, url, src, tmp, rules, MERGEBOT_VERIFIER_SANDBOX="none")


@pytest.fixture
async def red_fleet(e2e_db: Database, e2e_db_url: str, tmp_path: Path) -> AsyncIterator[Fleet]:
    fleet = await fleet_with(e2e_db, e2e_db_url, tmp_path, FULL)
    try:
        yield fleet
    finally:
        stop_keepers(fleet.work)
        fleet.bot.stop()


async def until(pred: object, what: str, fleet: Fleet, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not await pred():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"never: {what}\n{fleet.bot.log.read_text()[-4000:]}"
        time.sleep(0.2)


class Counters:
    """/metrics scraped at each step of a story, with the cost view's charges beside: every counter must only go
    up, while the charges may move both ways (a run re-charged to rework when its subtask lands, a landing's runs
    to thrown away by a revert): which is why no counter is a charge."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self.scrapes: list[tuple[str, Samples, dict[tuple[str, str], float]]] = []

    async def scrape(self, step: str) -> None:
        got = httpx.get(f"{self.fleet.bot.url}/metrics", timeout=30,
                        headers={"Authorization": f"Bearer {self.fleet.tokens['root']}"})
        assert got.status_code == 200, got.text
        counted = {k: v for k, v in parse(got.text).items() if k[0].endswith(("_total", "_bucket", "_count", "_sum"))}
        charges: dict[tuple[str, str], float] = {}
        window = await self.fleet.db.views.cost(since=datetime.min.replace(tzinfo=UTC),
                                                until=datetime.max.replace(tzinfo=UTC))
        for r in window["runs"]:
            key = (str(r["charge"]), str(r["agent"] or ""))
            charges[key] = charges.get(key, 0.0) + float(r["seconds"])
        self.scrapes.append((step, counted, charges))

    def falls(self) -> tuple[list[str], list[str]]:
        """The counter samples that went down between two scrapes, and the charges that did."""
        counters, charges = [], []
        for (a, before, was), (b, after, now) in zip(self.scrapes, self.scrapes[1:], strict=False):
            counters += [f"{k} {v} -> {after.get(k)} ({a} -> {b})" for k, v in before.items()
                         if after.get(k, -1.0) < v]
            charges += [f"{k} {v:.2f} -> {now.get(k, 0.0):.2f} ({a} -> {b})" for k, v in was.items()
                        if now.get(k, 0.0) < v - 1e-9]
        return counters, charges


def land(fleet: Fleet, who: str, name: str, files: dict[str, str]) -> tuple[Push, Path]:
    claim, wt = fleet.start(who, name)
    sha = commit(wt, files)
    git(["push", "-q", "origin", f"HEAD:refs/heads/{claim.branch}"], wt)
    return Push(who, claim.subtask_id, claim.claim_version, sha, "accepted"), wt


async def test_two_landings_that_break_main_together_the_second_is_reverted_and_sent_back(red_fleet: Fleet) -> None:
    f, db = red_fleet, red_fleet.db
    a_sub, _ = await db.subtasks.create_subtask(actor_id=None, title="add a")
    b_sub, _ = await db.subtasks.create_subtask(actor_id=None, title="add b")
    c_sub, _ = await db.subtasks.create_subtask(actor_id=None, title="add c")
    status = lambda sid: db.subtasks.get_subtask(sid)  # noqa: E731

    async def landed(sid: int) -> bool:
        return (await status(sid)).status == "landed"

    metrics = Counters(f)
    pushes = [land(f, "ann", "ann-a", {"a.py": "VALUE = 1\n"})[0]]
    await until(lambda: landed(a_sub.id), "a landed", f)
    await metrics.scrape("a landed")
    push_b, wt_b = land(f, "bob", "bob-b", {"b.py": "VALUE = 2\n"})  # passes the quick suite; with a, not the full
    pushes.append(push_b)
    await until(lambda: landed(b_sub.id), "b landed", f)
    await metrics.scrape("b landed")
    pushes.append(land(f, "ann", "ann-c", {"c.py": "VALUE = 0\n"})[0])  # lands while main is red: it passes

    async def reverted() -> bool:
        return any(r.kind == "revert" for r in await db.landing.landed(repo="demo"))
    await until(reverted, "a revert landed", f)
    await until(lambda: landed(c_sub.id), "c landed", f)

    async def green() -> bool:
        return (await db.repos.get_repo("demo")).red_since is None
    await until(green, "main green again", f)
    await metrics.scrape("b reverted")

    rows = {r.subtask_id: r for r in await db.landing.landed(repo="demo") if r.kind == "land"}
    revert = next(r for r in await db.landing.landed(repo="demo") if r.kind == "revert")
    assert revert.reverts == rows[b_sub.id].id  # the second landing is the culprit, named on the revert's row
    assert revert.owner == "mergebot" and revert.verifier_result == "pass"
    bare = f.bare()
    head = bare[f.main()]
    assert "b.py" not in head.tree and "a.py" in head.tree and "c.py" in head.tree  # the rest stays
    # the revert commit names the landing it reverts (when c landed first, the revert was merged onto it: the
    # landed commit is then the merge, and the revert commit its second parent)
    message = bare[revert.candidate_sha].message
    assert f"Mergebot-Reverts-Landed: {rows[b_sub.id].id}" in message
    assert bare.descendant_of(f.main(), revert.merged_sha) or f.main() == revert.merged_sha

    b_now = await status(b_sub.id)  # sent back to its owner, with the evidence and what to run next
    assert (b_now.status, b_now.owner, b_now.claim_version) == ("running", "bob", 2)
    reason = b_now.status_reason or ""
    assert "reverted" in reason and "test_the_values_stay_small_together" in reason, reason
    assert f"subtasks/{b_sub.id}/v2" in reason
    bisect = [j for j in await db.jobs.jobs(limit=1000) if j["purpose"] == "bisect"]
    assert bisect and all(j["command"] == FULL for j in bisect)  # main's own check judged main
    statuses = {r.subtask_id: r.main_status for r in await db.landing.landed(repo="demo") if r.kind == "land"}
    assert statuses[a_sub.id] in ("pass", "superseded")
    events = [e["kind"] for e in await db.subtasks.events(subtask_id=b_sub.id, limit=1000)]
    assert "revert_queued" in events
    with httpx.Client(base_url=f.bot.url, timeout=30) as web:  # the reviewer's pages link the two rows
        assert web.post("/login", data={"token": f.tokens["root"], "next": "/ui/landed"},
                        headers={"Origin": f.bot.url}).status_code == 303
        page = web.get(f"/ui/landed/{revert.id}").text
        assert f'id="reverts">the bot\'s revert of landing <a href="/ui/landed/{rows[b_sub.id].id}"' in page
        culprit_page = web.get(f"/ui/landed/{rows[b_sub.id].id}").text
        assert f'id="reverted-by">by landing <a href="/ui/landed/{revert.id}"' in culprit_page
        cost = re.search(r'id="cost">(.*?) of verifier time in (\d+) runs?:', culprit_page)  # what it cost
        assert cost is not None and int(cost.group(2)) >= 1, culprit_page[-3000:]

    # The owner follows the instructions it was given, word for word, fixes the change, and it lands again.
    command = re.search(r"`(git fetch [^`]+)`", reason)
    assert command is not None, reason
    ran = subprocess.run(command.group(1), shell=True, cwd=wt_b, capture_output=True, text=True, env={
        **os.environ, "GIT_AUTHOR_NAME": "Bob", "GIT_AUTHOR_EMAIL": "bob@example.com", "GIT_COMMITTER_NAME": "Bob",
        "GIT_COMMITTER_EMAIL": "bob@example.com"})
    assert ran.returncode == 0, ran.stdout + ran.stderr
    # a first try that fails its check: its run is thrown away until the subtask lands, then it is rework
    broken = commit(wt_b, {"calc.py": "def add(a, b):\n    return a - b\n"}, "b, a wrong turn")
    git(["push", "-q", "origin", f"HEAD:refs/heads/subtasks/{b_sub.id}/v2"], wt_b)
    pushes.append(Push("bob", b_sub.id, 2, broken, "accepted"))

    async def refused() -> bool:
        return any(c["sha"] == broken and c["status"] == "rejected" for c in await db.landing.candidates(repo="demo"))
    await until(refused, "b's wrong turn refused", f)
    await metrics.scrape("b's wrong turn refused")
    fixed = commit(wt_b, {"b.py": "VALUE = 1\n", "calc.py": "def add(a, b):\n    return a + b\n"},
                   "b, small enough with a")
    git(["push", "-q", "origin", f"HEAD:refs/heads/subtasks/{b_sub.id}/v2"], wt_b)
    pushes.append(Push("bob", b_sub.id, 2, fixed, "accepted"))
    await until(lambda: landed(b_sub.id), "b landed again", f)
    again = [r for r in await db.landing.landed(repo="demo") if r.subtask_id == b_sub.id]
    assert sorted(r.claim_version for r in again) == [1, 2]
    await until(green, "main green after the fix", f)
    await metrics.scrape("b landed again")
    fell, recharged = metrics.falls()
    assert fell == [], fell  # every counter only went up, across the revert and the re-charge ...
    assert recharged, metrics.scrapes  # ... while the charges moved down somewhere: the story re-charged runs

    violations = stable_check(f.client("root"), f.bot.url, f.tokens["root"], "demo", f.work / "check", pushes,
                              attempts=3)
    assert violations == [], violations
    assert f.client("root").get("/api/v1/findings", repo="demo")["findings"] == []

    # What it all cost (`mergebot cost`): every run's seconds charged once, the bisection's to main's checks. Read
    # once no run is queued or running: a post-land run finishing between the command and the count below once
    # made them differ by one (CI).
    async def idle() -> bool:
        async with db.pool.connection() as conn:
            cur = await conn.execute("SELECT count(*) FROM verify_jobs WHERE status IN ('queued', 'running')")
            row = await cur.fetchone()
            return row is not None and row[0] == 0

    await until(idle, "no run queued or running", f)
    out = subprocess.run([sys.executable, "-m", "mergebot", "cost", "--json", "--since", "1h"], capture_output=True,
                         text=True, check=True, env={**os.environ, "MERGEBOT_URL": f.bot.url,
                                                     "MERGEBOT_TOKEN": f.tokens["root"]})
    cost = json.loads(out.stdout)
    async with db.pool.connection() as conn:
        cur = await conn.execute("SELECT coalesce(sum(extract(epoch FROM finished_at - started_at)), 0)::float8, "
                                 "count(*) FROM verify_jobs WHERE started_at IS NOT NULL AND finished_at IS NOT NULL")
        total, runs = await cur.fetchone() or (0.0, 0)
    assert cost["runs"] == runs and abs(cost["total_seconds"] - total) < 0.01
    parts = cost["charged_to_landings_seconds"] + cost["thrown_away_seconds"] + cost["other_seconds"]
    assert abs(parts - cost["total_seconds"]) < 0.01 and cost["charged_to_landings_seconds"] > 0
    judged = sum((j["finished_at"] - j["started_at"]).total_seconds() for j in bisect
                 if j["started_at"] and j["finished_at"])  # the confirming run and the bisection
    assert sum(c["seconds"]["main_check"] for c in cost["landings"]) >= judged - 0.01
    assert {a["agent"] for a in cost["agents"]} >= {"ann", "bob"}
    f.bot.stop()  # and the whole run, its revert and mending included, is one the protocol's model allows
    verdict = await replay(db)
    assert verdict.accepted and verdict.reverts == 1, verdict


async def test_a_mend_cut_short_by_a_crash_is_done_by_the_next_start(e2e_db: Database, e2e_db_url: str,
                                                                      tmp_path: Path) -> None:
    f = await fleet_with(e2e_db, e2e_db_url, tmp_path, FULL)
    try:
        a_sub, _ = await e2e_db.subtasks.create_subtask(actor_id=None, title="add a")
        b_sub, _ = await e2e_db.subtasks.create_subtask(actor_id=None, title="add b")
        f.bot.stop()
        f.bot.start(MERGEBOT_CRASH_AT="before_revert_queued")  # dies once the culprit is found, before its revert

        async def landed(sid: int) -> bool:
            return (await e2e_db.subtasks.get_subtask(sid)).status == "landed"
        land(f, "ann", "ann-a", {"a.py": "VALUE = 1\n"})
        await until(lambda: landed(a_sub.id), "a landed", f)
        land(f, "bob", "bob-b", {"b.py": "VALUE = 2\n"})
        assert f.bot.wait_exit(120) == -9
        assert (await e2e_db.repos.get_repo("demo")).red_since is not None  # red and parked, nothing reverted
        assert not any(r.kind == "revert" for r in await e2e_db.landing.landed(repo="demo"))
        f.bot.start()

        async def mended() -> bool:
            rows = await e2e_db.landing.landed(repo="demo")
            return any(r.kind == "revert" for r in rows) and (await e2e_db.repos.get_repo("demo")).red_since is None
        await until(mended, "the restart's mend landed the revert and main is green", f)
        b_now = await e2e_db.subtasks.get_subtask(b_sub.id)
        assert (b_now.status, b_now.owner, b_now.claim_version) == ("running", "bob", 2)
        reverts = [r for r in await e2e_db.landing.landed(repo="demo") if r.kind == "revert"]
        assert len(reverts) == 1  # once, however many starts
    finally:
        stop_keepers(f.work)
        f.bot.stop()


async def test_a_red_main_found_by_the_next_candidates_base_check_is_mended_like_a_post_land_red(
        e2e_db: Database, e2e_db_url: str, tmp_path: Path) -> None:
    """On the serial path a landing's own run is main's post-land check, and a base check reuses a recorded pass on
    main; main is found red by the next candidate's base check when no run of the current check has passed there,
    here because the team made the check stricter. The candidate's check fails, its retry too, and the base check
    on main fails as well: the candidate is parked, and main is mended as after a red post-land check (the landing
    since main was last green is reverted, its subtask goes back to its owner) and the parked push lands."""
    f = await fleet_with(e2e_db, e2e_db_url, tmp_path, QUICK)
    try:
        x_sub, _ = await e2e_db.subtasks.create_subtask(actor_id=None, title="add x")
        a_sub, _ = await e2e_db.subtasks.create_subtask(actor_id=None, title="add a")
        b_sub, _ = await e2e_db.subtasks.create_subtask(actor_id=None, title="add b")

        async def landed(sid: int) -> bool:
            return (await e2e_db.subtasks.get_subtask(sid)).status == "landed"
        for sub, name in ((x_sub, "x"), (a_sub, "a")):
            land(f, "ann", f"ann-{name}", {f"{name}.py": "VALUE = 0\n"})
            await until(lambda sid=sub.id: landed(sid), f"{name} landed", f)
        rows = await e2e_db.landing.landed(repo="demo")
        assert [(r.subtask_id, r.main_status) for r in rows] == [(a_sub.id, "pass"), (x_sub.id, "pass")]
        stricter = f"sh -c 'if [ -e a.py ]; then exit 1; fi; {QUICK}'"  # a's change does not hold up to it
        await set_rules(e2e_db, "demo", RulesChange.of(verifier_command=stricter, post_land_command=stricter))
        land(f, "bob", "bob-b", {"b.py": "VALUE = 0\n"})
        await until(lambda: landed(b_sub.id), "b landed after the revert", f)
        rows = await e2e_db.landing.landed(repo="demo")
        reverts = [r for r in rows if r.kind == "revert"]
        culprit = next(r for r in rows if r.subtask_id == a_sub.id and r.kind == "land")
        assert len(reverts) == 1 and reverts[0].reverts == culprit.id, rows
        assert culprit.main_status == "fail"  # what the base check found, on the culprit's row
        assert (await e2e_db.repos.get_repo("demo")).red_since is None
        a_now = await e2e_db.subtasks.get_subtask(a_sub.id)
        assert (a_now.status, a_now.owner, a_now.claim_version) == ("running", "ann", 2)
        assert "reverted" in (a_now.status_reason or "")
        head = f.bare()[f.main()].tree
        assert "a.py" not in head and "x.py" in head and "b.py" in head
        b_cands = [c for c in await e2e_db.landing.candidates(repo="demo") if c["subtask_id"] == b_sub.id]
        assert len(b_cands) == 1 and b_cands[0]["status"] == "landed"  # parked, then landed: the same push
        base_runs = [j for j in await e2e_db.jobs.jobs(limit=1000) if j["purpose"] == "base"]
        assert [j["outcome"] for j in base_runs] == ["fail"] and base_runs[0]["commit_sha"] == culprit.merged_sha
    finally:
        stop_keepers(f.work)
        f.bot.stop()


async def test_a_flaky_red_is_recorded_and_reverts_nothing(e2e_db: Database, e2e_db_url: str,
                                                          tmp_path: Path) -> None:
    marker = tmp_path / "failed-once"  # main's check fails the first time it runs, then passes: a flaky main
    flaky = f"sh -c 'if [ -e {marker} ]; then {FULL}; else touch {marker}; exit 1; fi'"
    f = await fleet_with(e2e_db, e2e_db_url, tmp_path, flaky)
    try:
        sub, _ = await e2e_db.subtasks.create_subtask(actor_id=None, title="add a")
        land(f, "ann", "ann-a", {"a.py": "VALUE = 1\n"})

        async def checked() -> bool:
            rows = await e2e_db.landing.landed(repo="demo")
            return bool(rows) and rows[0].main_status not in ("pending",)
        await until(checked, "main's check recorded", f)
        rows = await e2e_db.landing.landed(repo="demo")
        assert [(r.subtask_id, r.kind, r.main_status) for r in rows] == [(sub.id, "land", "flaky")]
        assert (await e2e_db.repos.get_repo("demo")).red_since is None
        assert (await e2e_db.subtasks.get_subtask(sub.id)).status == "landed"
        assert marker.exists()
    finally:
        stop_keepers(f.work)
        f.bot.stop()


def test_bisection_finds_the_first_red_landing_in_log2_runs() -> None:
    for n in range(1, 40):
        for first_red in range(n):
            lo, hi, runs = 0, n - 1, 0
            while (mid := next_probe(lo, hi)) is not None:
                runs += 1
                if mid < first_red:  # passes
                    lo = mid + 1
                else:
                    hi = mid
            assert lo == first_red and runs <= max(0, (n - 1).bit_length())


async def test_a_mend_that_gave_up_stays_given_up_until_main_moves_or_an_admin_resumes(e2e_db: Database,
                                                                                        tmp_path: Path) -> None:
    """Mending never reverts a revert: with the bot's own revert among the red landings it gives up, announced once.
    A restart (``mend.resume``) does not try again at the same red commit; a new red commit, or an admin's
    resume, does."""
    from mergebot.landing.context import Context
    from mergebot.landing.main import mend
    from mergebot.landing.main.repos import hold
    from tests.test_views import land as land_directly
    from verifier.runner import Result

    db = e2e_db
    root = repos_root(tmp_path / "data")
    await add_repo(db, root, name="demo", source=str(make_project(tmp_path / "src")),
                   rules=Rules.of(verifier_command="true"))
    ann, _ = await db.agents.add_agent(name="ann", role=Role.AGENT)
    admin, _ = await db.agents.add_agent(name="root", role=Role.ADMIN)
    for title in ("landed", "its revert"):
        await db.subtasks.create_subtask(actor_id=None, title=title)
        await land_directly(db, ann.id)
    async with db.pool.connection() as conn:  # as if the second landing were the bot's own revert of the first
        await conn.execute("UPDATE landed SET kind = 'revert', reverts = (SELECT min(id) FROM landed) "
                           "WHERE id = (SELECT max(id) FROM landed)")
    red = (await db.landing.landed(repo="demo"))[0]  # the newest
    ctx = Context(db, root)
    failed = Result("r" * 40, "", "true", "fail", 1, 10, "", "", 0, "d" * 64)

    async def gave_up() -> int:
        return sum("stays red" in a["body"] or "gave up" in a["body"]
                   for a in await db.subtasks.announcements(limit=50))

    await mend.mend(ctx, await db.repos.get_repo("demo"), red, "r" * 40, failed)
    assert (await db.repos.get_repo("demo")).mend_given_up == "r" * 40 and await gave_up() == 1
    await mend.resume(ctx, await db.repos.get_repo("demo"), red, "r" * 40)  # a restart: nothing again
    assert await gave_up() == 1 and await db.jobs.jobs() == []
    await mend.resume(ctx, await db.repos.get_repo("demo"), red, "s" * 40)  # main moved: tried again
    assert await gave_up() == 2 and (await db.repos.get_repo("demo")).mend_given_up == "s" * 40
    tried: list[str] = []

    async def remend() -> None:
        tried.append("reconcile")

    repo = await hold(db, "demo", "resume", admin, lambda: None, remend)  # an admin says so
    assert repo.mend_given_up is None and tried == ["reconcile"]


async def test_what_builds_on_a_reverted_landing_waits_until_it_lands_again(red_fleet: Fleet) -> None:
    """d depends on b. b lands and breaks main, d is pushed, b's landing is reverted: d's candidate waits in the queue
    (its reason and a note from the bot say why) instead of landing on a main without b, until b lands again."""
    f, db = red_fleet, red_fleet.db
    a_sub, _ = await db.subtasks.create_subtask(actor_id=None, title="add a")
    b_sub, _ = await db.subtasks.create_subtask(actor_id=None, title="add b")
    d_sub, _ = await db.subtasks.create_subtask(actor_id=None, title="build on b", depends_on=[b_sub.id])
    _, f.tokens["cat"] = await db.agents.add_agent(name="cat", role=Role.AGENT)

    async def status_is(sid: int, want: str) -> bool:
        return (await db.subtasks.get_subtask(sid)).status == want

    land(f, "ann", "ann-a", {"a.py": "VALUE = 1\n"})
    await until(lambda: status_is(a_sub.id, "landed"), "a landed", f)
    _, wt_b = land(f, "bob", "bob-b", {"b.py": "VALUE = 2\n"})  # breaks the full suite with a
    await until(lambda: status_is(b_sub.id, "landed"), "b landed", f)
    await until(lambda: status_is(b_sub.id, "running"), "b's landing reverted and b sent back", f)
    land(f, "cat", "cat-d", {"d.py": "VALUE = 0\n"})  # d stayed released: its push is queued ...

    async def held() -> bool:
        cands = await db.landing.candidates(repo="demo", subtask_id=d_sub.id)
        return bool(cands) and cands[0]["status"] == "queued" and "waits: subtask" in (cands[0]["reason"] or "")
    await until(held, "d's candidate waits for b", f)  # ... and waits
    notes = await db.subtasks.notes(subtask_id=d_sub.id)
    assert any(f"subtask {b_sub.id}" in n["body"] and "reverted" in n["body"] for n in notes), notes
    time.sleep(3)  # main is green again and the queue is idle: d still waits
    assert (await db.subtasks.get_subtask(d_sub.id)).status == "submitted"

    git(["fetch", "-q", "origin", "main"], wt_b)  # b again, on the main that no longer has it
    git(["reset", "-q", "--hard", "FETCH_HEAD"], wt_b)
    fixed = commit(wt_b, {"b.py": "VALUE = 1\n"}, "b, small enough with a")
    git(["push", "-q", "origin", f"{fixed}:refs/heads/subtasks/{b_sub.id}/v2"], wt_b)
    await until(lambda: status_is(b_sub.id, "landed"), "b landed again", f)
    await until(lambda: status_is(d_sub.id, "landed"), "d landed after it", f)
    rows = [(r.subtask_id, r.id) for r in await db.landing.landed(repo="demo") if r.kind == "land"]
    assert min(i for s, i in rows if s == d_sub.id) > max(i for s, i in rows if s == b_sub.id)  # d after b's return
    f.bot.stop()  # the run, revert and hold included, is one the protocol's model allows (mergebot.protocol.trace)
    verdict = await replay(db)
    assert verdict.accepted and verdict.reverts == 1, verdict
    assert verdict.used[Move("landed", "running", 1, "taken")] == 1
