"""The charts and the run timeline in headless Chromium, against a real ``mergebot serve`` that has just done a
speculative run with failures, so that every series has something to draw.

The server runs a speculation window of 3 with 3 verifier workers, unsandboxed (the check reads flag files
outside the checkout). Its check is the project's pytest suite, plus: the flaky change's merge fails the first
time it is checked; a commit holding a ``slow-*.txt`` file waits until the test lets it go. The
fleet then, in order:
  1. pushes a change onto a main that is broken: its run and the retry fail, main's base check fails too
     (a pre-existing failure), it is parked and main turns red; a fix lands, then the parked change;
  2. pushes four changes at once: one good, one flaky (fails, passes on the retry), one that breaks the
     suite (rejected), one good; the window speculates on all of them;
  3. pushes two slow changes that the window verifies at once, pauses landing while they run, and pushes one
     more, which waits.
With that frozen, every bar and point of every chart is read back from the browser and compared with what a
computation of its own, in this file, makes of the rows in the database; the timeline has a bar per run, in
lanes that never overlap, each linking to its candidate's log.
"""

from __future__ import annotations

import itertools
import math
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from mergebot.auth import Role
from mergebot.db.database import Database
from mergebot.landing.main.repos import add_repo, repos_root
from mergebot.rules import Rules, RulesChange
from tests.support.bot import BotProcess, Fleet, check_command, commit, git, make_project, stop_keepers
from tests.support.pg import Server
from tests.test_browser import CHROMIUM, browser_db, login, shot, shots_folder
from tests.test_browser import browser as browser  # the fixture, shared with the other browser tests

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium")

if CHROMIUM.exists():
    from playwright.async_api import Browser

FIVE_MINUTES = timedelta(minutes=5)
# every bar and point of the charts a selector picks: [chart, series, bucket, value, drawn height]
MARKS = """(sel => Array.from(document.querySelectorAll(sel)).flatMap(svg =>
    Array.from(svg.querySelectorAll('rect.bar, circle.point')).map(m => [svg.id.slice(6),
        m.getAttribute('class').split(' ')[1], m.dataset.t, Number(m.dataset.v),
        m.getBoundingClientRect().height])))"""


@dataclass
class Speculated:
    fleet: Fleet
    shots: Path
    candidates: dict[str, int]  # what each push was for -> its candidate id

    @property
    def url(self) -> str:
        return self.fleet.bot.url

    @property
    def tokens(self) -> dict[str, str]:
        return self.fleet.tokens


def the_check(flags: Path) -> str:
    # Only the flaky change's own merge fails once: the merges the window builds on top of it hold flaky.txt too
    # (with the breaking change, then four.txt), and must not be the ones to take that one failure.
    flaky = (f'test -e flaky.txt && ! test -e four.txt && grep -qx "    return a + b" calc.py && '
             f"! test -e {flags}/flaky-seen && {{ touch {flags}/flaky-seen; exit 1; }}")
    slow = f'while test -n "$(ls slow-*.txt 2>/dev/null)" && ! test -e {flags}/go; do sleep 0.1; done'
    return f"{flaky}; {slow}; {check_command()}"


@pytest.fixture(scope="module")
async def speculated(servers: dict[str, Server], tmp_path_factory: pytest.TempPathFactory
                     ) -> AsyncIterator[Speculated]:
    tmp = tmp_path_factory.mktemp("speculated")
    shots = shots_folder(tmp)
    flags = tmp / "flags"
    flags.mkdir()
    async with browser_db(servers, tmp, rita=Role.REVIEWER, ann=Role.AGENT, bob=Role.AGENT, cat=Role.AGENT,
                          dan=Role.AGENT) as (settings, db, tokens):
        src = make_project(tmp / "src")
        (src / "calc.py").write_text("def add(a, b):\n    return a - b\n")
        git(["commit", "-qam", "a bug on main"], src)
        await add_repo(db, repos_root(settings.data_dir), name="demo", source=str(src),
                       rules=Rules.of(verifier_command=the_check(flags), verifier_timeout_s=120))
        # The flaky check fails only the flaky change's own merge, which needs the window in arrival order: a
        # risk-aware queue puts the breaking change (its author's fix landed) ahead of it, and then which run
        # takes the one failure depends on which run finishes first. Batches of one: each change its own run, so
        # the charts draw two runs at once (a batch would verify both slow ones in one run).
        await db.repos.update_repo("demo", RulesChange.of(risk_aware=False, batch_size=1))
        bot = BotProcess(settings.database_url, settings.data_dir, MERGEBOT_SPECULATION_WINDOW="3",
                         MERGEBOT_VERIFIER_WORKERS="3", MERGEBOT_VERIFIER_SANDBOX="none").start()
        fleet = Fleet(bot, db, tokens, tmp / "work")
        try:
            yield Speculated(fleet, shots, await _speculate(fleet))
        finally:
            (flags / "go").touch()
            stop_keepers(tmp / "work")
            bot.stop()


async def _speculate(fleet: Fleet) -> dict[str, int]:
    db, pushed = fleet.db, {}

    async def push(who: str, phase: str, what: str, files: dict[str, str]) -> None:
        await db.subtasks.create_subtask(actor_id=None, title=what)
        claim, wt = fleet.start(who, f"{who}-{phase}")
        commit(wt, files)
        git(["push", "-q", "origin", f"HEAD:refs/heads/{claim.branch}"], wt)
        pushed[what] = (await until_one(db, claim.subtask_id))

    # 1. a failure main already has, then its fix
    await push("ann", "a", "docs", {"docs.txt": "docs\n"})
    await settle(fleet, lambda: _red(db))
    await push("bob", "a", "the fix", {"calc.py": "def add(a, b):\n    return a + b\n"})
    await settle(fleet, lambda: _statuses(db, pushed, {"docs": "landed", "the fix": "landed"}))
    # 2. four at once into the window
    await db.repos.set_paused(repo="demo", paused=True, reason="collecting a window")
    for who, what, files in (("ann", "one", {"one.txt": "1\n"}), ("cat", "flaky", {"flaky.txt": "f\n"}),
                             ("bob", "breaks", {"calc.py": "def add(a, b):\n    return a + b + 1\n"}),
                             ("dan", "four", {"four.txt": "4\n"})):
        await push(who, "b", what, files)
    await db.repos.set_paused(repo="demo", paused=False, reason=None)
    await settle(fleet, lambda: _statuses(db, pushed, {"one": "landed", "flaky": "landed", "breaks": "rejected",
                                                       "four": "landed"}))
    # 3. two slow ones verified at once; landing paused while they run; one more waits
    await db.repos.set_paused(repo="demo", paused=True, reason="collecting a window")
    await push("ann", "c", "slow one", {"slow-1.txt": "1\n"})
    await push("cat", "c", "slow two", {"slow-2.txt": "2\n"})
    await db.repos.set_paused(repo="demo", paused=False, reason=None)
    await settle(fleet, lambda: _running(db, 2))
    await db.repos.set_paused(repo="demo", paused=True, reason="frozen for the charts")
    await push("dan", "c", "waits", {"five.txt": "5\n"})
    await settle(fleet, lambda: _running(db, 2, queued=0))
    return pushed


async def until_one(db: Database, subtask_id: int) -> int:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        cands = [c for c in await db.landing.candidates(repo="demo") if c["subtask_id"] == subtask_id]
        if cands:
            return int(cands[-1]["id"])
        time.sleep(0.1)
    raise AssertionError(f"no candidate for subtask {subtask_id}")


async def settle(fleet: Fleet, done: Any, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await done():
            return
        time.sleep(0.2)
    raise AssertionError("the fleet never got there:\n" + fleet.bot.log.read_text()[-4000:])


async def _red(db: Database) -> bool:
    return (await db.repos.get_repo("demo")).red_since is not None


async def _statuses(db: Database, pushed: dict[str, int], want: dict[str, str]) -> bool:
    for what, status in want.items():
        if (await db.landing.get_candidate(pushed[what])).status != status:
            return False
    return await _running(db, 0, queued=0)


async def _running(db: Database, running: int, queued: int | None = None) -> bool:
    async with db.pool.connection() as conn:
        row = await (await conn.execute("SELECT count(*) FILTER (WHERE status = 'running'), count(*) FILTER "
                                        "(WHERE status = 'queued') FROM verify_jobs")).fetchone()
    assert row is not None
    return row[0] == running and (queued is None or row[1] == queued)


async def _rows(db: Database, sql: str) -> list[dict[str, Any]]:
    async with db.pool.connection() as conn:
        cur = await conn.execute(sql)
        names = [d.name for d in cur.description or []]
        return [dict(zip(names, r, strict=True)) for r in await cur.fetchall()]


def percentile(values: list[float], p: float) -> float:
    """PostgreSQL's percentile_cont: linear between the two nearest ranks."""
    v = sorted(values)
    pos = p * (len(v) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def expected(starts: list[datetime], landed: list[dict[str, Any]], cands: list[dict[str, Any]],
             jobs: list[dict[str, Any]]) -> dict[str, dict[tuple[str, datetime], float]]:
    """chart -> {(series, bucket start): value}, worked out here from the rows (not by the page's query)."""
    out: dict[str, dict[tuple[str, datetime], float]] = {k: {} for k in
                                                          ("landings", "wait", "depth", "failures", "runs", "window")}
    never = datetime.max.replace(tzinfo=starts[0].tzinfo)
    for t in starts:
        stop = t + FIVE_MINUTES

        def inside(when: datetime | None, t: datetime = t, stop: datetime = stop) -> bool:
            return when is not None and t <= when < stop

        here = [r for r in landed if inside(r["landed_at"])]
        waits = [(c["finished_at"] - c["queued_at"]).total_seconds() for c in cands
                 if c["status"] == "landed" and inside(c["finished_at"])]  # push to landed
        if here:
            out["landings"][("landed", t)] = float(len(here))  # a count per five-minute bucket
        if waits:
            out["wait"][("p50", t)] = percentile(waits, 0.5)
            out["wait"][("p95", t)] = percentile(waits, 0.95)
        out["depth"][("waiting", t)] = sum(
            1 for c in cands if c["queued_at"] <= stop and (c["finished_at"] or never) > stop
            and (c["started_at"] is None or c["started_at"] > stop) and c["status"] != "parked")
        out["depth"][("in-flight", t)] = sum(
            1 for c in cands if c["started_at"] is not None and c["started_at"] <= stop
            and (c["finished_at"] or never) > stop)
        ended = [j for j in jobs if inside(j["finished_at"]) and j["started_at"] is not None]
        for series, n in (
                ("failed", sum(j["purpose"] in ("candidate", "retry") and j["outcome"] in ("fail", "timeout")
                               for j in ended)),
                ("flaky", sum(j["purpose"] == "retry" and j["outcome"] == "pass" for j in ended)),
                ("pre-existing", sum(j["purpose"] == "base" and j["outcome"] in ("fail", "timeout") for j in ended))):
            if n:
                out["failures"][(series, t)] = float(n)
        if here:
            out["runs"][("runs", t)] = len(ended) / len(here)
        widths = [j["window_width"] for j in jobs if inside(j["created_at"]) and j["window_width"] is not None]
        if widths:
            out["window"][("width", t)] = float(max(widths))
    return out


async def test_every_chart_draws_the_speculative_run_with_failures(browser: Browser, speculated: Speculated) -> None:
    db = speculated.fleet.db
    page = await login(browser, speculated, "rita", "/ui/charts")
    for _ in range(2):  # the charts page, the queue page, the charts page again: the same buckets unless the
        # window moved on (a five-minute boundary passed) in between, which cannot happen twice in a few seconds
        await page.goto(speculated.url + "/ui/charts?span=hour")
        drawn = await page.evaluate(f"{MARKS}('svg.chart')")
        await page.goto(speculated.url + "/ui/queue")
        await page.wait_for_selector("#live-status.on", timeout=10_000)
        on_queue = await page.evaluate(f"""{MARKS}('#queue-trend svg.chart')""")
        await page.goto(speculated.url + "/ui/charts?span=hour")
        if await page.evaluate(f"{MARKS}('svg.chart')") == drawn:
            break
    landed = await _rows(db, "SELECT subtask_id, claim_version, landed_at FROM landed")
    cands = await _rows(db, "SELECT id, subtask_id, claim_version, status::text AS status, queued_at, started_at, "
                            "finished_at FROM candidates")
    jobs = await _rows(db, "SELECT purpose, outcome, created_at, started_at, finished_at, window_width "
                           "FROM verify_jobs")
    starts = sorted({datetime.fromisoformat(t) for key, series, t, _, _ in drawn if key == "depth"})
    assert len(starts) == 12 and all(b - a == FIVE_MINUTES for a, b in itertools.pairwise(starts))
    want = expected(starts, landed, cands, jobs)
    got: dict[str, dict[tuple[str, datetime], float]] = {k: {} for k in want}
    for key, series, t, v, height in drawn:
        got[key][(series, datetime.fromisoformat(t))] = v
        if key in ("landings", "failures"):
            assert height > 0  # drawn, not just present
    for key in want:
        assert got[key].keys() == want[key].keys(), key
        for mark, v in want[key].items():
            assert math.isclose(got[key][mark], v, rel_tol=1e-5), (key, mark, got[key][mark], v)
    # every series has something to show: the run had failures, a flaky pass, a pre-existing failure, a queue
    for key, series in (("landings", "landed"), ("wait", "p50"), ("wait", "p95"), ("depth", "waiting"),
                        ("depth", "in-flight"), ("failures", "failed"), ("failures", "flaky"),
                        ("failures", "pre-existing"), ("runs", "runs"), ("window", "width")):
        assert any(v > 0 for (s, _), v in got[key].items() if s == series), (key, series)
    assert max(got["window"].values()) == 3  # the window was full
    assert int(await page.inner_text("#total-landings")) == len(landed) == 5  # docs, the fix, one, flaky, four
    await shot(page, speculated, "charts")
    # the queue page draws the last hour's depth, landings and failures: the same marks
    assert {(k, s, t, v) for k, s, t, v, _ in on_queue} == {
        (k, s, t, v) for k, s, t, v, _ in drawn if k in ("depth", "landings", "failures")}
    await page.goto(speculated.url + "/ui/queue")
    await page.locator("#queue-trend").scroll_into_view_if_needed()
    await shot(page, speculated, "queue-trend")
    await page.context.close()


RUN_BAR = "svg#timeline rect.run"


async def test_the_timeline_shows_the_speculation_at_work(browser: Browser, speculated: Speculated) -> None:
    """A bar per run a worker started, by purpose and outcome; a worker's bars never overlap in its lane; the
    two slow runs, verified at once, are still running; a bar links to its candidate's log."""
    db = speculated.fleet.db
    page = await login(browser, speculated, "rita", "/ui/timeline")
    await page.goto(speculated.url + "/ui/timeline?span=10min")
    assert await page.locator("#fitted").count() == 1  # the whole run took a minute or two: drawn from its start
    jobs = {j["id"]: j for j in await _rows(
        db, "SELECT id, purpose, status::text AS status, outcome, worker_name, started_at, "
            "coalesce(finished_at, now()) AS finished_at FROM verify_jobs WHERE started_at IS NOT NULL")}
    bars = await page.evaluate(f"""Array.from(document.querySelectorAll('{RUN_BAR}')).map(b => [
        Number(b.dataset.job), b.getAttribute('class'), b.closest('g.lane').dataset.worker,
        b.closest('g.lane').dataset.slot])""")
    assert sorted(b[0] for b in bars) == sorted(jobs) and int(await page.inner_text("#run-count")) == len(jobs)
    for job, css, worker, _ in bars:
        j = jobs[job]
        assert f"purpose-{j['purpose']}" in css and f"outcome-{j['outcome'] or j['status']}" in css
        assert worker == j["worker_name"]
    assert {"candidate", "retry", "base"} <= {j["purpose"] for j in jobs.values()}
    assert sum(j["status"] == "running" for j in jobs.values()) == 2
    lanes: dict[tuple[str, str], list[tuple[datetime, datetime]]] = {}
    for job, _, worker, slot in bars:
        lanes.setdefault((worker, slot), []).append((jobs[job]["started_at"], jobs[job]["finished_at"]))
    for spans in lanes.values():  # a lane's runs never overlap in time
        spans.sort()
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans))
    assert len({w for w, _ in lanes}) == 3  # the three workers all ran something
    await shot(page, speculated, "timeline")
    flaky = speculated.candidates["flaky"]
    # a click on the bar of the flaky candidate's passing retry opens that candidate's log
    await page.locator(f"svg#timeline a[href$='/ui/candidates/{flaky}/log']:has(rect.purpose-retry.outcome-pass)"
                       ).click()
    await page.wait_for_url(re.compile(rf"/ui/candidates/{flaky}/log$"))
    assert "1 passed" in await page.inner_text("main")
    await page.context.close()


async def test_what_the_speculative_run_cost_adds_up(browser: Browser, speculated: Speculated) -> None:
    """``/api/v1/cost`` over the run: its total is every finished run's wall time (the cancelled ones included),
    the charges add up to it, what the rejected change cost is thrown away, and the flaky change's landing is
    charged its deciding run plus every other run of its push; its landed record says so in Chromium."""
    db, fleet = speculated.fleet.db, speculated.fleet
    runs = await _rows(db, "SELECT j.id, c.subtask_id, extract(epoch FROM j.finished_at - j.started_at)::float8 AS s "
                           "FROM verify_jobs j LEFT JOIN candidates c ON c.id = j.candidate_id "
                           "WHERE j.started_at IS NOT NULL AND j.finished_at IS NOT NULL")
    landed = {r["subtask_id"]: r for r in await _rows(db, "SELECT id, subtask_id, run_id FROM landed")}
    out = fleet.client("rita").get("/api/v1/cost", since=(datetime.now(UTC) - timedelta(hours=1)).isoformat())
    total = sum(r["s"] for r in runs)
    assert out["runs"] == len(runs) and math.isclose(out["total_seconds"], total, abs_tol=0.01)
    assert math.isclose(out["charged_to_landings_seconds"] + out["thrown_away_seconds"] + out["other_seconds"],
                        out["total_seconds"], abs_tol=0.01)
    breaks = (await db.landing.get_candidate(speculated.candidates["breaks"])).subtask_id
    assert math.isclose(out["thrown_away_seconds"], sum(r["s"] for r in runs if r["subtask_id"] == breaks),
                        abs_tol=0.01) and out["thrown_away_seconds"] > 0
    flaky = (await db.landing.get_candidate(speculated.candidates["flaky"])).subtask_id
    row = landed[flaky]
    cost = next(c for c in out["landings"] if c["landed_id"] == row["id"])
    mine = [r for r in runs if r["subtask_id"] == flaky]
    assert cost["runs"] >= len(mine) >= 3  # its failed first run, the passing retry, the run that landed it
    # the run that decided its landing: its own merge's, or (when its own run took the flaky failure and a run
    # stacked on it passed first) a later candidate's run whose commit holds it; every other run of its own is rework
    # landed together with the candidates ahead of it (the window lands a prefix on its last slot's run), it shares
    # that run with them: each landed row naming the run is charged its share (CI once landed two on one run)
    sharing = sum(1 for r in landed.values() if r["run_id"] == row["run_id"])
    deciding = next(r["s"] for r in runs if r["id"] == row["run_id"]) / sharing
    own_deciding = sum(r["s"] for r in mine if r["id"] == row["run_id"])
    assert math.isclose(cost["seconds"]["landing_run"], deciding, abs_tol=0.01)
    assert math.isclose(cost["seconds"]["rework"], sum(r["s"] for r in mine) - own_deciding, abs_tol=0.01)
    assert cost["pushes"] == 1 and cost["rejections"] == {}
    page = await login(browser, speculated, "rita", f"/ui/landed/{row['id']}")
    text = await page.inner_text("#cost")
    assert f"in {cost['runs']} runs" in text and "1 push" in text, text
    await page.context.close()
