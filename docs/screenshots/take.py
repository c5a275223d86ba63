"""Screenshots of the pages issue 43 (item 14) changed, from a real server after real pushes.

    python docs/screenshots/take.py [OUT_DIR]        (default: this folder; needs Debian's chromium)

It plays ``mergebot demo`` in a temporary data directory (real ``git push`` over HTTP, the real verifier: two
landings after a conflict, a failing check whose verdict quotes pytest's output, a stale push refused, more
landings), adds a small plan whose subtasks have long titles and wait on one another, serves that state on
the embedded database, and shoots with headless Chromium (as ``tests/test_browser.py`` does):
  queue.png                   the queue: each repository idle (grey) with nothing queued, the last hour's charts,
                              the refusals as one line and a link each
  candidate-check-failed.png  the failing check's candidate: its sentence, then pytest's output as it was
  charts.png                  the charts: round ticks, units on the axes, landings counted per bucket
  timeline.png                the run timeline: rows "worker HOST · slot N", a legend with the grey runs
  blockers.png                what still blocks a subtask: boxes that wrap their titles
  queue-awaiting-approval.png the queue once ``calc`` wants an approval for ``ops/``: dana's candidate waits
  candidate-awaiting-approval.png  its candidate page: what it waits for and the command that approves it
  landed-approved.png         lee approved it with ``mergebot approve``; the landed record names the approver
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mergebot.auth import Role
from mergebot.db.database import open_database
from mergebot.demo import free_port, run_demo, serve_in_thread
from mergebot.rules import RulesChange
from mergebot.settings import Settings
from mergebot.tree import Node, plan
from verifier.sandbox import bwrap_problem

CHROMIUM = "/usr/bin/chromium"
TOKENS: dict[str, str] = {}

# a plan with long titles: the blocker graph's boxes must show them
PLAN = [("release", "Ship the calculator's second release with docs, packaging and a command line", None, []),
        ("cli", "Add a command line that reads an expression and prints its value", "release", []),
        ("parser", "Parse infix expressions with precedence and parentheses", "cli", []),
        ("errors", "Report a division by zero with the position of the operator", "cli", ["parser"]),
        ("docs", "Write the user guide with one worked example per operation", "release", []),
        ("wheel", "Build a wheel and check that it installs into a clean virtual environment", "release",
         ["docs"])]


async def prepare(settings: Settings) -> tuple[str, int, int]:
    """A reviewer's token, the plan's root and the failing check's candidate; ``calc`` now wants an approval for a
    change to ``ops/``, and dana (an agent) and lee (a lead) have tokens in ``TOKENS``."""
    async with open_database(settings) as db:
        _, token = await db.agents.add_agent(name="reviewer", role=Role.REVIEWER)
        for name, role in (("dana", Role.AGENT), ("lee", Role.LEAD)):
            TOKENS[name] = (await db.agents.add_agent(name=name, role=role))[1]
        await db.repos.update_repo("calc", RulesChange.of(require_approval=["ops/*"]))
        nodes = {key: Node(key=key, title=title, parent=parent, depends_on=list(deps))
                 for key, title, parent, deps in PLAN}
        for node in nodes.values():
            if node.parent is not None:
                nodes[str(node.parent)].children.append(node.key)
        made = await db.subtasks.create_tree(actor_id=None, nodes=plan(list(nodes.values())))
        failed = next(c["id"] for c in await db.pages.queue_rejected() if c["kind"] == "check_failed")
        return token, made["release"].id, failed


async def shoot(url: str, token: str, out: Path, root: int, failed: int) -> None:
    from playwright.async_api import async_playwright

    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, headless=True)
        page = await (await browser.new_context(viewport={"width": 1440, "height": 900})).new_page()
        await page.goto(url + "/login?next=/ui/queue")
        await page.fill("input[name=token]", token)
        await page.click("button[type=submit]")
        await page.wait_for_url(url + "/ui/queue")
        for name, path in (("queue", "/ui/queue"), ("candidate-check-failed", f"/ui/candidates/{failed}"),
                           ("charts", "/ui/charts?span=hour"), ("timeline", "/ui/timeline?span=10min"),
                           ("blockers", f"/ui/subtasks/{root}")):
            await page.goto(url + path)
            if name == "blockers":
                await page.locator("#blockers").scroll_into_view_if_needed()
            await page.screenshot(path=str(out / f"{name}.png"), full_page=name != "blockers")
            print(f"wrote {out / f'{name}.png'}")
        # an approval: dana's change to ops/ passes and waits; lee approves it and it lands
        cand = push_for_approval(url, out)
        for name, path in (("queue-awaiting-approval", "/ui/queue"),
                           ("candidate-awaiting-approval", f"/ui/candidates/{cand}")):
            await page.goto(url + path)
            await page.screenshot(path=str(out / f"{name}.png"), full_page=True)
            print(f"wrote {out / f'{name}.png'}")
        landed = approve(url, cand)
        await page.goto(url + f"/ui/landed/{landed}")
        await page.screenshot(path=str(out / "landed-approved.png"), full_page=True)
        print(f"wrote {out / 'landed-approved.png'}")
        await browser.close()


def mergebot(url: str, who: str, *args: str, cwd: Path | None = None) -> str:
    env = {**os.environ, "MERGEBOT_URL": url, "MERGEBOT_TOKEN": TOKENS[who], "GIT_AUTHOR_NAME": who,
           "GIT_AUTHOR_EMAIL": f"{who}@example.com", "GIT_COMMITTER_NAME": who,
           "GIT_COMMITTER_EMAIL": f"{who}@example.com"}
    out = subprocess.run([sys.executable, "-m", "mergebot", *args], env=env, cwd=cwd, capture_output=True,
                         text=True, check=False, timeout=300)
    return out.stdout + out.stderr


def push_for_approval(url: str, _: Path) -> int:
    """dana starts a subtask, adds ops/double.py and submits: the candidate's id, once it waits for an approval."""
    wt = Path(tempfile.mkdtemp(prefix="mergebot-shots-wt-")) / "wt"
    said = mergebot(url, "dana", "start", "--repo", "calc", "--dir", str(wt), "--no-keeper")
    assert wt.is_dir(), said
    (wt / "ops" / "double.py").write_text("def double(a):\n    return 2 * a\n")
    env = {**os.environ, "GIT_AUTHOR_NAME": "dana", "GIT_AUTHOR_EMAIL": "dana@example.com",
           "GIT_COMMITTER_NAME": "dana", "GIT_COMMITTER_EMAIL": "dana@example.com"}
    subprocess.run(["git", "add", "-A"], cwd=wt, check=True)
    subprocess.run(["git", "commit", "-qm", "Add double"], cwd=wt, env=env, check=True)
    said = mergebot(url, "dana", "submit", cwd=wt)
    found = re.search(r"candidate (\d+) awaiting_approval", said)
    assert found, said
    return int(found.group(1))


def approve(url: str, cand: int) -> int:
    """lee approves the candidate; the landed row's id once it landed."""
    print(mergebot(url, "lee", "approve", str(cand)).strip())
    for _ in range(600):
        got = json.loads(mergebot(url, "lee", "landed", "--repo", "calc", "--json"))
        rows = got["landed"] if isinstance(got, dict) else got
        if rows and rows[0].get("approved_by"):
            return int(rows[0]["id"])
        time.sleep(0.2)
    raise SystemExit("the approved candidate did not land")


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="mergebot-shots-") as tmp:
        data = Path(tmp) / "data"
        run_demo(data)
        settings = Settings(data_dir=data, port=free_port())
        if settings.sandbox_mode == "bwrap" and bwrap_problem(settings.bwrap) is not None:
            settings.sandbox = "none"  # as the demo did: nothing is checked from here on
        token, root, failed = asyncio.run(prepare(settings))
        server, thread = serve_in_thread(settings)
        try:
            asyncio.run(shoot(f"http://127.0.0.1:{settings.port}", token, out, root, failed))
        finally:
            server.should_exit = True
            thread.join(15)


if __name__ == "__main__":
    main()
