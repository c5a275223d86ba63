"""The pages in a real browser: headless Chromium (Debian's, at /usr/bin/chromium; Playwright never downloads
one) against one real ``mergebot serve`` for the whole module, with a real repository, a real ``git push`` over
HTTP and the real verifier, and the seeds' 2,418-subtask tree (10 levels) loaded.

A reviewer logs in, watches the queue update by itself while a push lands, opens the landed record and
follows it to its log, and walks the tree. Screenshots of every page are written to ``$MERGEBOT_SCREENSHOTS``
(``MERGEBOT_SCREENSHOTS=docs/screenshots pytest tests/test_browser.py tests/test_browser_charts.py`` refreshes
the README's; the charts, the timeline and the queue's last hour come from the speculative run of
``test_browser_charts.py``), else to a temporary directory.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pytest

from mergebot import agent
from mergebot.auth import Role
from mergebot.client import Client
from mergebot.db.connect import open_pool
from mergebot.db.database import Database
from mergebot.landing.main.repos import add_repo, repos_root
from mergebot.models import Handle
from mergebot.rules import Rules
from mergebot.settings import Settings
from mergebot.web.sample import seeds_tree
from tests.conftest import SERVERS, fresh_database
from tests.support.bot import BotProcess, check_command, commit, make_project
from tests.support.pg import Server

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium")

if CHROMIUM.exists():
    from playwright.async_api import Browser, Page, async_playwright, expect


@dataclass
class World:
    bot: BotProcess
    db: Database
    tokens: dict[str, str]
    work: Path
    shots: Path
    ids: dict[str, int]  # the seeds tree: key -> subtask id
    deepest: list[str]  # keys from the deepest node up to the root
    landed: dict[str, Any] = field(default_factory=dict)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def url(self) -> str:
        return self.bot.url


def shots_folder(tmp: Path) -> Path:
    """Where screenshots go: ``$MERGEBOT_SCREENSHOTS``, else a folder of the test's own."""
    shots = Path(os.environ.get("MERGEBOT_SCREENSHOTS") or tmp / "shots").resolve()
    shots.mkdir(parents=True, exist_ok=True)
    return shots


@asynccontextmanager
async def browser_db(servers: dict[str, Server], tmp: Path, **roles: Role
                     ) -> AsyncIterator[tuple[Settings, Database, dict[str, str]]]:
    """A fresh database with each named agent added with its role: the settings, the store and the agents'
    tokens by name. The pool closes on the way out."""
    with fresh_database(servers, SERVERS[0]) as url:
        settings = Settings(database_url=url, data_dir=tmp / "data")
        pool = await open_pool(url, settings, statement_timeout_ms=30_000)
        try:
            db = Database(pool, lease_seconds=600)
            yield settings, db, {name: (await db.agents.add_agent(name=name, role=role))[1]
                                 for name, role in roles.items()}
        finally:
            await pool.close()


@pytest.fixture(scope="module")
async def world(servers: dict[str, Server], tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    tmp = tmp_path_factory.mktemp("browser")
    shots = shots_folder(tmp)
    async with browser_db(servers, tmp, root=Role.ADMIN, lead=Role.LEAD, ann=Role.AGENT, bob=Role.AGENT,
                          rita=Role.REVIEWER) as (settings, db, tokens):
        await add_repo(db, repos_root(settings.data_dir), name="demo", source=str(make_project(tmp / "src")),
                       rules=Rules.of(verifier_command=check_command(), verifier_timeout_s=120,
                       protected_paths=["ci/"]))
        nodes = seeds_tree()
        made = await db.subtasks.create_tree(actor_id=None, nodes=nodes)
        ids = {k: s.id for k, s in made.items()}
        by_key = {n.key: n for n in nodes}
        chain = [max(nodes, key=lambda n: int(n.title.split()[0][1:])).key]
        while by_key[chain[-1]].parent is not None:
            chain.append(str(by_key[chain[-1]].parent))
        await _activity(db, tokens)
        bot = BotProcess(settings.database_url, settings.data_dir).start()
        try:
            yield World(bot, db, tokens, tmp / "work", shots, ids, chain)
        finally:
            bot.stop()


async def _activity(db: Database, tokens: dict[str, str]) -> None:
    """Some of what a fleet leaves behind: claims in the tree, a plan, a handoff, a refusal, a finding."""
    lead = await db.agents.agent_by_name("lead")
    bob = await db.agents.agent_by_name("bob")
    await db.agents.assign(agent_name="bob", group_name="direction-1", actor_id=lead.id)
    held = [s for s in [await db.subtasks.claim(agent_id=bob.id) for _ in range(12)] if s is not None]
    for s in held[:3]:
        await db.subtasks.submit(agent_id=bob.id, handle=Handle(s.id, s.claim_version), sha=f"{s.id:040x}")
    await db.subtasks.add_note(author_id=bob.id, subtask_id=held[-1].id, claim_version=held[-1].claim_version,
                               body="## Handoff\nDone: the base case.\nRemains: the induction step.\nTried: a direct "
                               "bound (too weak).")
    await db.subtasks.announce(author_id=lead.id, body="Plan: each direction proves its lemmas bottom-up; integration "
                               "steps wait for their children. Open groups at 10% landed.")
    await db.subtasks.add_note(author_id=lead.id, group_name="direction-1", body="direction-1: start from the leaves.")
    await db.subtasks.log_event(actor_id=bob.id, kind="push_refused", subtask_id=held[0].id,
                                detail={"repo": "demo", "ref": "refs/heads/main", "code": "protected_ref",
                                        "message": "only Mergebot moves main; push to your subtask's branch"})
    await db.landing.add_finding(repo="demo", kind="unexplained_commits",
                                 detail={"commits": ["0123456789abcdef0123456789abcdef01234567"], "count": 1})


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as p:
        b = await p.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        try:
            yield b
        finally:
            await b.close()


class Site(Protocol):
    """What a page needs of a world: its server, its agents' tokens, where screenshots go."""

    @property
    def url(self) -> str: ...

    tokens: dict[str, str]
    shots: Path


async def login(browser: Browser, world: Site, who: str, path: str = "/ui/landed") -> Page:
    context = await browser.new_context(viewport={"width": 1440, "height": 900})
    page = await context.new_page()
    await page.goto(world.url + path)
    assert "/login" in page.url
    await page.fill("input[name=token]", world.tokens[who])
    await page.click("button[type=submit]")
    await page.wait_for_url(re.compile(re.escape(world.url + path) + "$"))
    return page


async def land_a_change(world: World, wait: bool = True) -> tuple[int, asyncio.Task[dict[str, Any]]]:
    """ann claims a fresh subtask, commits and pushes with the real git client; the task ends with the verdict."""
    sub, _ = await world.db.subtasks.create_subtask(actor_id=None, title="add subtract to calc", priority=1000)
    client = Client(world.url, world.tokens["ann"])
    got = await asyncio.to_thread(agent.start, client, world.url, world.tokens["ann"], "demo", world.work / "ann")
    assert got is not None and got[0].subtask_id == sub.id
    commit(world.work / "ann", {"calc.py": "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"})
    return sub.id, asyncio.create_task(asyncio.to_thread(agent.push, client, world.work / "ann", wait=120,
                                                         progress=False))


async def ensure_landed(world: World) -> dict[str, Any]:
    async with world.lock:
        if not world.landed:
            sid, task = await land_a_change(world)
            assert (await task)["status"] == "landed"
            world.landed["subtask"] = sid
        rows = await world.db.landing.landed(subtask_id=world.landed["subtask"])
        assert len(rows) == 1
        return {"subtask": world.landed["subtask"], "row": rows[0]}


async def shot(page: Page, world: Site, name: str, full: bool = True) -> None:
    await page.screenshot(path=str(world.shots / f"{name}.png"), full_page=full)
    assert (world.shots / f"{name}.png").stat().st_size > 10_000


async def test_a_visitor_sees_only_the_login_prompt(browser: Browser, world: World) -> None:
    context = await browser.new_context(viewport={"width": 1440, "height": 900})
    page = await context.new_page()
    for path in ("/ui/queue", "/ui/subtasks?root=1", "/ui/landed/1", "/ui/agents"):
        await page.goto(world.url + path)
        assert re.search(r"/login\?next=", page.url), page.url
        text = await page.inner_text("body")
        assert "Token" in text and "direction-" not in text and "bob" not in text and "demo" not in text
        assert await page.locator("nav").count() == 0
    await page.goto(world.url + "/login")
    await page.fill("input[name=token]", "mb_not_a_token")
    await page.click("button[type=submit]")
    assert "Unknown or revoked token" in await page.inner_text("body")
    await shot(page, world, "login")
    await context.close()


async def test_the_queue_updates_live_when_a_push_arrives(browser: Browser, world: World) -> None:
    page = await login(browser, world, "rita", "/ui/queue")
    await page.wait_for_selector("#live-status.on", timeout=10_000)  # the event stream is open
    await page.evaluate("window.__stayed = 42")
    live = page.locator("#queue-live")
    assert "add subtract to calc" not in await live.inner_text()
    async with world.lock:
        # Paused while the push arrives, so it shows waiting first and landed after: two updates however fast the
        # landing is (a quick one reached the page in a single update)
        await world.db.repos.set_paused(repo="demo", paused=True, reason="the push shows waiting first")
        try:
            sid, task = await land_a_change(world)
            # the push shows up without a reload: first waiting, then in "recently landed"
            await expect(live).to_contain_text("add subtract to calc", timeout=60_000)
        finally:
            await world.db.repos.set_paused(repo="demo", paused=False, reason=None)
        recent = live.locator("section:has(h2:text-is('Recently landed'))")
        await expect(recent).to_contain_text("add subtract to calc", timeout=90_000)
        result = await task
        assert result["status"] == "landed", result
        world.landed["subtask"] = sid
    assert await page.evaluate("window.__stayed") == 42  # the same document: updated in place, not reloaded
    assert int(await live.get_attribute("data-updates") or 0) >= 2
    await expect(live).to_contain_text("Nothing is being verified", timeout=30_000)
    await shot(page, world, "queue")
    await page.context.close()


async def test_a_reviewer_opens_a_landed_record_and_its_log(browser: Browser, world: World) -> None:
    landed = await ensure_landed(world)
    row = landed["row"]
    page = await login(browser, world, "rita", "/ui/landed")
    first = page.locator("table.landed tbody tr").first
    assert "add subtract to calc" in await first.inner_text()
    assert "1 file" in await first.inner_text() and "+4" in await first.inner_text()
    await shot(page, world, "landed")
    await first.locator("a.record").click()
    await page.wait_for_url(f"{world.url}/ui/landed/{row.id}")
    facts = await page.inner_text("table.facts")
    for value in (row.merged_sha, row.base_sha, row.candidate_sha, row.verifier_command, "ann at claim version 1"):
        assert value in facts, value
    assert row.merged_sha == (await asyncio.to_thread(_main_head, world))
    await shot(page, world, "landed-record")
    await page.click("#log-link")
    await page.wait_for_url(re.compile(r"/ui/candidates/\d+/log$"))
    log = await page.inner_text("main")
    assert "1 passed" in log and row.log_digest[:16] in log and "sandbox" in log
    await shot(page, world, "log")
    # the filters narrow the list
    await page.goto(world.url + "/ui/landed")
    await page.fill("input[name=agent]", "bob")
    await page.click(".filters button[type=submit]")
    await page.wait_for_url(re.compile(r"agent=bob"))
    assert "Nothing landed that matches" in await page.inner_text("main")
    await page.context.close()


def _main_head(world: World) -> str:
    import pygit2

    bare = pygit2.Repository(str(repos_root(world.bot.data_dir) / "demo.git"))
    return str(bare.references["refs/heads/main"].target)


async def test_the_seeds_tree_opens_in_windows(browser: Browser, world: World) -> None:
    page = await login(browser, world, "rita", "/ui/subtasks")
    counts = await page.inner_text(".counts")
    total = sum(int(n) for n in re.findall(r"\b(\d+)\b", counts))
    assert total >= 2418
    nodes = page.locator("li.node")
    assert 11 <= await nodes.count() <= 400  # the root, its 10 directions and their children: not a wall
    timing = await page.evaluate("(() => { const t = performance.getEntriesByType('navigation')[0];"
                                 " return t.responseStart - t.requestStart; })()")
    assert timing < 1500, f"the tree page took {timing:.0f} ms to start answering"
    badges = await page.evaluate("""Array.from(document.querySelectorAll('#tree .badge')).map(
        b => [b.textContent, getComputedStyle(b).backgroundColor])""")
    colour_of = dict(badges)
    assert {"ready", "blocked"} <= colour_of.keys()
    assert all(colour_of[status] == colour for status, colour in badges)  # one colour per status
    assert len(set(colour_of.values())) == len(colour_of)  # and a different one for each
    await shot(page, world, "subtasks", full=False)
    # open the root's subtree, then walk down to the deepest level (10), one window at a time
    root_id = world.ids[world.deepest[-1]]
    await page.click(f'li.node[data-id="{root_id}"] > .line a.open')
    await page.wait_for_url(re.compile(rf"root={root_id}"))
    assert "Under it: 2417 subtasks" in await page.inner_text(".focus")
    for key in reversed(world.deepest[1:-1]):
        sid = world.ids[key]
        link = page.locator(f'li.node[data-id="{sid}"] > .line a.open')
        started = time.monotonic()
        await link.click()
        await page.wait_for_url(re.compile(rf"root={sid}&"))
        assert time.monotonic() - started < 5
    deepest = world.ids[world.deepest[0]]
    leaf = page.locator(f'li.node[data-id="{deepest}"]')
    assert await leaf.count() == 1 and "L10 " in await leaf.inner_text()
    assert await page.locator("nav.crumbs a").count() == 10  # top and nine ancestors
    await shot(page, world, "subtasks-deep", full=False)
    await page.click(f'li.node[data-id="{deepest}"] > .line a[href="/ui/subtasks/{deepest}"]')
    await page.wait_for_url(f"{world.url}/ui/subtasks/{deepest}")
    needed_by = await page.inner_text("section:has(h2:text-matches('Needed by'))")
    assert f"#{world.ids[world.deepest[1]]}" in needed_by  # its parent integrates it
    await page.context.close()


async def test_agents_board_and_reconciliation_pages(browser: Browser, world: World) -> None:
    await ensure_landed(world)
    page = await login(browser, world, "rita", "/ui/agents")
    bob = await page.inner_text("table.agents tr:has(td:text-is('bob'))")
    assert "direction-1" in bob and "#" in bob
    ann = await page.inner_text("table.agents tr:has(td:text-is('ann'))")
    assert re.search(r"\b1\b", ann)  # one landing
    await shot(page, world, "agents")
    await page.goto(world.url + "/ui/board")
    board = await page.inner_text("main")
    assert "Open groups at 10% landed" in board and "Remains: the induction step." in board
    await shot(page, world, "board")
    await page.goto(world.url + "/ui/reconcile")
    rec = await page.inner_text("main")
    assert "unexplained_commits" in rec and "Submitted, with nothing in the queue" in rec
    await shot(page, world, "reconcile")
    # a reviewer sees no admin button on the queue, and the pause endpoint refuses it
    await page.goto(world.url + "/ui/queue")
    assert await page.locator("form[action$='/pause']").count() == 0
    await page.context.close()


async def test_the_seeds_root_at_a_glance(browser: Browser, world: World) -> None:
    """The seeds' root: a progress bar per direction counting its subtree, and the blocking graph bounded to the
    nearest 60 open subtasks, with an edge for each open dependency among them."""
    root = world.ids[world.deepest[-1]]
    page = await login(browser, world, "rita", f"/ui/subtasks/{root}")
    totals = await page.evaluate("""Array.from(document.querySelectorAll('#glance svg.progress')).map(
        s => Number(s.dataset.total))""")
    assert len(totals) == 10 and sum(totals) == 2417
    boxes = page.locator("svg#blocking g.gnode")
    assert await boxes.count() == 60
    shown = [int(i) for i in await page.evaluate(
        "Array.from(document.querySelectorAll('svg#blocking g.gnode')).map(g => g.dataset.id)")]
    async with world.db.pool.connection() as conn:
        row = await (await conn.execute("SELECT count(*) FROM subtask_deps WHERE subtask_id = ANY(%s) "
                                        "AND depends_on_id = ANY(%s)", (shown, shown))).fetchone()
    assert row is not None and await page.locator("svg#blocking line.edge").count() == row[0] > 0
    # every box's title fits inside its box, as drawn (the whole title is its hover text)
    fits = await page.evaluate("""Array.from(document.querySelectorAll('svg#blocking g.gnode')).map(g => {
        const box = g.querySelector('rect').getBBox(), text = g.querySelector('text').getBBox();
        return [text.x >= box.x && text.x + text.width <= box.x + box.width
                && text.y + text.height <= box.y + box.height
                && g.querySelector('title').textContent.startsWith(g.querySelector('text tspan').textContent),
                g.querySelector('title').textContent, text.width, box.width];
    })""")
    assert len(fits) == 60 and not [f for f in fits if not f[0]], [f for f in fits if not f[0]]
    await page.locator("#blockers").scroll_into_view_if_needed()
    await shot(page, world, "subtask-glance")
    await page.context.close()
