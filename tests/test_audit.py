"""The audit of main in the reconciler (issue 44): a move of main that no landing statement explains (an admin's
push into the bare repository, a push to the forge's main around the bot) is a finding within one reconcile pass,
shown on ``/healthz``, the queue page and ``/metrics``; a repository whose rule is ``--on-unattested pause`` is
paused with a reason naming the commit, until an admin resumes it. Real server, git and PostgreSQL; the forge is the
GitHub stand-in with a real bare repository as its git remote."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pygit2

from mergebot.auth import Role
from mergebot.landing.context import Context
from mergebot.landing.main.audit import audit
from mergebot.landing.main.reconcile import reconcile_repo
from mergebot.landing.main.repos import repos_root
from tests.support.bot import Fleet, check_command, commit, git, until
from tests.support.forge_fleet import ZERO, ForgeFleet, final
from tests.test_metrics import parse, value


def sneak(bare: pygit2.Repository, message: str = "pushed around the bot") -> str:
    """A commit on main's head, and main set to it, straight in ``bare``: what an admin's push does."""
    head = bare[bare.references["refs/heads/main"].target]
    sneaked = bare.create_commit(None, head.author, head.committer, message, head.tree_id, [head.id])
    bare.references["refs/heads/main"].set_target(sneaked)
    return str(sneaked)


def api(url: str, token: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60)


def shown(url: str, token: str) -> tuple[dict[str, Any], dict[Any, float], str]:
    """What /healthz, /metrics and the queue page (as ``token``'s agent, logged in) show now."""
    health = httpx.get(f"{url}/healthz", timeout=30).json()
    with api(url, token) as c:
        metrics = parse(c.get("/metrics").text)
    with httpx.Client(base_url=url, timeout=30) as web:
        r = web.post("/login", data={"token": token, "next": "/ui/queue"}, headers={"Origin": url})
        assert r.status_code == 303, r.text
        page = web.get("/ui/queue").text
    return health, metrics, page


async def test_main_moved_in_the_bare_repository_is_found_in_one_pass(make_fleet: Callable[..., Any]) -> None:
    fleet: Fleet = await make_fleet(check_command())
    db, url, root = fleet.db, fleet.bot.url, fleet.tokens["root"]
    await db.subtasks.create_subtask(actor_id=None, title="one")
    claim, _, _ = fleet.start_and_push("ann", {"ann.txt": "ann\n"})

    async def landed() -> bool:
        return (await db.subtasks.get_subtask(claim.subtask_id)).status == "landed"

    await until(landed, timeout=90)
    fleet.bot.stop()  # one reconcile pass, here, while nothing else reconciles
    ctx = Context(db, repos_root(fleet.bot.data_dir))
    clean = await reconcile_repo(ctx, await db.repos.get_repo("demo"))
    assert clean.clean and clean.unattested == []  # a landing through the bot is explained by its statement
    repo = await db.repos.get_repo("demo")
    assert repo.audited_head == fleet.main() and repo.unattested is None

    landed_head = fleet.main()
    sneaked = sneak(fleet.bare())
    report = await reconcile_repo(ctx, await db.repos.get_repo("demo"))
    assert report.unattested == [sneaked] and not report.clean
    repo = await db.repos.get_repo("demo")
    assert repo.unattested is not None and repo.unattested["commits"] == [sneaked] and not repo.paused  # flag
    assert "no landing statement" in repo.unattested["why"][sneaked]
    findings = [f for f in await db.landing.findings(repo="demo", limit=10) if f["kind"] == "unattested_main"]
    assert len(findings) == 1 and findings[0]["detail"]["commits"] == [sneaked]
    again = await reconcile_repo(ctx, await db.repos.get_repo("demo"))  # the next pass walks nothing again
    assert again.unattested == [] and (await db.repos.get_repo("demo")).unattested == repo.unattested
    bare_path = repos_root(fleet.bot.data_dir) / "demo.git"
    assert (await audit(ctx, await db.repos.get_repo("demo"), bare_path)).walked == 0

    fleet.bot.start()
    health, metrics, page = shown(url, root)
    assert health["ok"] and health["unattested"]["demo"]["commits"] == [sneaked]
    assert sneaked[:12] in health["unattested"]["demo"]["message"]
    assert value(metrics, "mergebot_unattested_commits", repo="demo") == 1
    assert value(metrics, "mergebot_unattested_findings_total", repo="demo") == 1
    assert 'id="unattested-demo"' in page and sneaked[:12] in page

    with api(url, root) as c:  # the rule, through the API's rules route; a resume says an admin has looked
        r = c.patch("/api/v1/repos/demo/rules", json={"on_unattested": "pause"})
        assert r.status_code == 200 and r.json()["repo"]["on_unattested"] == "pause", r.text
        assert c.post("/api/v1/repos/demo/resume").status_code == 200
    health, metrics, page = shown(url, root)
    assert "unattested" not in health and value(metrics, "mergebot_unattested_commits", repo="demo") == 0
    assert 'id="unattested-demo"' not in page

    second = sneak(fleet.bare(), "another push around the bot")
    with api(url, root) as c:  # one pass of the bot's own reconciler (its idle audit may find it first)
        reports = c.post("/api/v1/reconcile").json()["reports"]
    assert [r["unattested"] for r in reports if r["repo"] == "demo"] in ([[second]], [[]])
    repo = await db.repos.get_repo("demo")
    assert repo.paused and second[:12] in (repo.paused_reason or "") and "resumes" in (repo.paused_reason or "")
    assert repo.unattested is not None and repo.unattested["commits"] == [second]
    health, metrics, _ = shown(url, root)
    assert health["unattested"]["demo"]["commits"] == [second]
    assert value(metrics, "mergebot_unattested_findings_total", repo="demo") == 2

    with api(url, root) as c:  # until an admin resumes it
        assert c.post("/api/v1/repos/demo/resume").json()["repo"]["paused"] is False
        c.post("/api/v1/reconcile")
    repo = await db.repos.get_repo("demo")
    assert not repo.paused and repo.unattested is None and repo.audited_head == second

    # main set back to the bot's last landing: every commit on it is attested, but the move back is not
    fleet.bare().references["refs/heads/main"].set_target(landed_head)
    await reconcile_repo(ctx, await db.repos.get_repo("demo"))  # (or the bot's idle audit, first)
    repo = await db.repos.get_repo("demo")
    assert repo.unattested is not None and repo.unattested["commits"] == [landed_head], repo.unattested
    assert f"from {second[:12]}" in repo.unattested["why"][landed_head] and repo.paused


async def test_a_forge_main_moved_around_the_bot_is_found(forge_fleet: ForgeFleet) -> None:
    f = forge_fleet
    _, root = await f.db.agents.add_agent(name="root", role=Role.ADMIN)
    claim = await f.claimed("subtract")
    wt = f.clone("ann")
    branch, sha = f.push_claim(wt, claim, {"calc.py": "def add(a, b):\n    return a + b\n\n\n"
                                                      "def sub(a, b):\n    return a - b\n"})
    assert f.deliver(branch, ZERO, sha, "ann-gh").status_code == 202
    assert f.wait_status(sha, final)[-1].state == "success"
    landed = (await f.db.landing.landed(subtask_id=claim.id))[0]
    assert f.forge_main() == landed.merged_sha

    other = f.clone("admin")  # someone with write access on the forge pushes to main directly
    git(["fetch", "-q", "origin", "main"], other)
    git(["checkout", "-q", "-B", "main", "FETCH_HEAD"], other)
    around = commit(other, {"hotfix.txt": "pushed to the forge's main around the bot\n"})
    git(["push", "-q", "origin", "HEAD:refs/heads/main"], other)
    assert f.forge_main() == around

    with api(f.bot.url, root) as c:
        reports = c.post("/api/v1/reconcile").json()["reports"]
    assert [r["unattested"] for r in reports if r["repo"] == "calc"] in ([[around]], [[]])
    repo = await f.db.repos.get_repo("calc")
    assert repo.unattested is not None and repo.unattested["commits"] == [around], repo.unattested
    assert landed.merged_sha not in repo.unattested["commits"]  # the bot's own landing is explained
    health = httpx.get(f"{f.bot.url}/healthz", timeout=30).json()
    assert health["unattested"]["calc"]["commits"] == [around] and not repo.paused
