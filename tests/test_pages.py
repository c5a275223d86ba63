"""The web pages over HTTP against a real PostgreSQL: login and CSRF, what a visitor cannot see, the filters,
the tree's windows, the admin action's 403s. The live queue stream is in ``test_pages_live.py``, the pure parts
(``mergebot.web.present`` and ``session``) in ``test_pages_pure.py``.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pygit2

from mergebot.db.database import Database
from mergebot.landing.judge import verdicts
from mergebot.landing.main.repos import add_repo, repos_root
from mergebot.models import Handle
from mergebot.rules import Rules
from mergebot.tree import Node, plan
from mergebot.web import session
from mergebot.web.sample import seeds_tree
from tests.support.bot import make_project
from tests.support.site import BASE, Site

PAGES = ["/", "/ui/landed", "/ui/landed?repo=app", "/ui/landed/1", "/ui/landed/abc", "/ui/candidates/1/log",
         "/ui/jobs/1/log", "/ui/queue", "/ui/queue/live", "/ui/queue/events", "/ui/subtasks",
         "/ui/subtasks?root=1&depth=4", "/ui/subtasks?status=ready", "/ui/subtasks/1", "/ui/agents", "/ui/board",
         "/ui/reconcile", "/ui/charts", "/ui/charts?span=week", "/ui/timeline"]


async def test_a_visitor_sees_only_the_login_prompt(site: Site) -> None:
    sid, cid, lid = await site.land("ann", "secret plan for the parser")
    await site.db.subtasks.announce(author_id=None, body="the hidden announcement")
    for path in [*PAGES, f"/ui/landed/{lid}", f"/ui/candidates/{cid}/log", f"/ui/subtasks/{sid}"]:
        r = await site.client.get(path)
        assert r.status_code == 303, (path, r.status_code)
        location = r.headers["location"]
        assert location.startswith("/login"), (path, location)
        assert "secret plan" not in r.text and "hidden announcement" not in r.text and not re.search(r"\bann\b", r.text)
    login = await site.client.get("/login")
    assert login.status_code == 200 and 'name="token"' in login.text
    assert "secret plan" not in login.text and not re.search(r"\bann\b", login.text)
    # a forged cookie is a visitor too, and so is an absurdly long one
    for cookie in ("mb_notatoken", "x" * 5000):
        site.client.cookies.set(session.COOKIE, cookie)
        assert (await site.client.get("/ui/landed")).status_code == 303
    # posts are refused the same way and change nothing
    r = await site.post("/ui/repos/app/pause", {"csrf": "x"})
    assert r.status_code == 303 and r.headers["location"].startswith("/login")
    assert not (await site.db.repos.get_repo("app")).paused
    # and the redirect remembers where the visitor was going, on this site only
    site.client.cookies.clear()
    r = await site.client.get("/ui/subtasks?root=1&depth=4")
    assert r.headers["location"] == "/login?next=%2Fui%2Fsubtasks%3Froot%3D1%26depth%3D4"


async def test_login_sets_a_strict_cookie_and_logout_needs_csrf(site: Site) -> None:
    r = await site.client.post("/login", data={"token": "mb_wrong", "next": "/ui/queue"}, headers={"Origin": BASE})
    assert r.status_code == 401 and "Unknown or revoked token" in r.text and session.COOKIE not in r.headers.get(
        "set-cookie", "")
    r = await site.client.post("/login", content=b"token=" + b"x" * 20_000, headers={
        "Origin": BASE, "Content-Type": "application/x-www-form-urlencoded"})
    assert r.status_code == 413 and "set-cookie" not in r.headers  # read no further than a token could be
    r = await site.client.post("/login", data={"token": site.tokens["rita"]}, headers={"Origin": "https://evil.example"})
    assert r.status_code == 403 and "set-cookie" not in r.headers
    r = await site.client.post("/login", data={"token": site.tokens["rita"], "next": "//evil.example/x"},
                               headers={"Origin": BASE})
    assert r.status_code == 303 and r.headers["location"] == "/ui/landed"
    cookie = r.headers["set-cookie"]
    assert cookie.startswith(f"{session.COOKIE}=") and "HttpOnly" in cookie and "SameSite=strict" in cookie
    assert "Path=/" in cookie and "Secure" not in cookie
    page = await site.get("/ui/landed")
    assert page.status_code == 200 and "rita" in page.text and "reviewer" in page.text
    assert page.headers["cache-control"] == "no-store" and "frame-ancestors 'none'" in page.headers[
        "content-security-policy"]
    # logging out is a form post with this session's CSRF token, from this site
    assert (await site.post("/logout", {"csrf": site.csrf("ann")})).status_code == 403
    assert (await site.post("/logout", {"csrf": site.csrf("rita")}, origin="https://evil.example")).status_code == 403
    assert (await site.get("/ui/landed")).status_code == 200
    r = await site.post("/logout", {"csrf": site.csrf("rita")})
    assert r.status_code == 303 and f'{session.COOKIE}=""' in r.headers["set-cookie"]
    assert (await site.get("/ui/landed")).status_code == 303


async def test_the_cookie_is_secure_over_https(site: Site) -> None:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=site.app), base_url="https://testserver") as c:
        r = await c.post("/login", data={"token": site.tokens["rita"]}, headers={"Origin": "https://testserver"})
        assert r.status_code == 303 and "Secure" in r.headers["set-cookie"]
        assert (await c.get("/ui/agents")).status_code == 200


async def test_a_revoked_token_stops_at_once(site: Site) -> None:
    await site.login("rita")
    assert (await site.get("/ui/agents")).status_code == 200
    await site.db.agents.revoke_agent(name="rita")
    r = await site.get("/ui/agents")
    assert r.status_code == 303 and r.headers["location"].startswith("/login")


async def test_every_role_reads_every_page(site: Site) -> None:
    await site.land("ann", "first")
    for who in ("rita", "ann", "lead", "root"):
        await site.login(who)
        for path in PAGES[1:]:
            if path == "/ui/queue/events":
                continue  # a stream: tested on a real server below
            r = await site.client.get(path)
            assert r.status_code in (200, 404), (who, path, r.status_code, r.text[:300])
            assert "text/html" in r.headers["content-type"]


def _commit(bare: Path, parent: str, files: dict[str, str]) -> str:
    """A commit on top of ``parent`` written straight into the bot's bare repository (no ref moves)."""
    repo = pygit2.Repository(str(bare))
    base = repo[parent].peel(pygit2.Commit)
    builder = repo.TreeBuilder(base.tree)
    for name, text in files.items():
        builder.insert(name, repo.create_blob(text.encode()), pygit2.enums.FileMode.BLOB)
    sig = pygit2.Signature("T", "t@example.com")
    return str(repo.create_commit(None, sig, sig, "change", builder.write(), [base.id]))


async def test_landed_shows_the_evidence_and_filters(site: Site, tmp_path: Path) -> None:
    root = repos_root(site.app.state.settings.data_dir)
    repo = await add_repo(site.db, root, name="demo", source=str(make_project(tmp_path / "src")),
                          rules=Rules.of(verifier_command="pytest -q"))
    merged = _commit(root / "demo.git", repo.root_sha, {"calc.py": "def add(a, b):\n    return a + b\n# one\n",
                                                         "new.txt": "x\ny\n"})
    s1, c1, l1 = await site.land("ann", "parse the config", repo="demo", base=repo.root_sha, merged=merged,
                                 verifier={"log_head": "collected 1 item\n<script>alert(1)</script>\n1 passed\n"})
    _, _, l2 = await site.land("bob", "render <b>pages</b>")
    await site.login("rita")
    page = (await site.get("/ui/landed")).text
    assert page.index(f'/ui/landed/{l2}"') < page.index(f'/ui/landed/{l1}"')  # newest first
    row = page[page.index(f'/ui/landed/{l1}"'):]
    for fact in ("parse the config", repo.root_sha[:10], merged[:10], "pytest -q", "1.2 s", "sandbox bwrap",
                 f"/ui/candidates/{c1}/log", "2 files", "+3", "\N{MINUS SIGN}0"):
        assert fact in row, fact
    assert "render &lt;b&gt;pages&lt;/b&gt;" in page and "<b>pages</b>" not in page  # titles are escaped
    # filters: repository, agent, subtask, dates
    assert f"/ui/landed/{l2}\"" not in (await site.get("/ui/landed", repo="demo")).text
    only_bob = (await site.get("/ui/landed", agent="bob")).text
    assert f"/ui/landed/{l2}\"" in only_bob and f"/ui/landed/{l1}\"" not in only_bob
    only_s1 = (await site.get("/ui/landed", subtask=str(s1))).text
    assert f"/ui/landed/{l1}\"" in only_s1 and f"/ui/landed/{l2}\"" not in only_s1
    today = datetime.now(UTC).date()
    recent = (await site.get("/ui/landed", since=str(today - timedelta(days=1)))).text
    assert f"/ui/landed/{l1}\"" in recent and f"/ui/landed/{l2}\"" in recent
    future = (await site.get("/ui/landed", since=str(today + timedelta(days=2)))).text
    assert "/ui/landed/" + str(l1) not in future and "Nothing landed that matches" in future
    bad = await site.get("/ui/landed", subtask="1; DROP TABLE landed", since="yesterday")
    assert bad.status_code == 200 and "subtask must be a whole number" in bad.text
    assert "since must be a date" in bad.text
    assert f"/ui/landed/{l1}\"" not in bad.text
    # the record, and its log (agent-written output is escaped)
    one = (await site.get(f"/ui/landed/{l1}")).text
    for fact in (merged, repo.root_sha, "claim version 1", "the bounded log", f"mergebot verify {merged} --repo demo"):
        assert fact in one, fact
    log = await site.get(f"/ui/candidates/{c1}/log")
    assert log.status_code == 200 and "collected 1 item" in log.text and "1 passed" in log.text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in log.text and "<script>alert" not in log.text
    # the post-land check on main, and its log
    job = await site.db.jobs.enqueue_job(repo="demo", commit_sha=merged, command="pytest -q", timeout_s=60,
                                         purpose="post_land", landed_id=l1)
    claimed = await site.db.jobs.claim_job(worker_id=None, worker_name="w1")
    assert claimed is not None and claimed.id == job.id
    await site.db.jobs.finish_job(job_id=job.id, worker_id=None, claim_version=claimed.claim_version, outcome="pass",
                                  result={"command": "pytest -q", "outcome": "pass", "log_head": "main is green\n",
                                          "log_tail": "", "log_size": 14, "log_digest": "f" * 64, "sandbox": "none"})
    assert f"/ui/jobs/{job.id}/log" in (await site.get(f"/ui/landed/{l1}")).text
    job_log = await site.get(f"/ui/jobs/{job.id}/log")
    assert job_log.status_code == 200 and "main is green" in job_log.text and "post_land" in job_log.text
    assert (await site.get("/ui/landed/999999")).status_code == 404
    assert (await site.get("/ui/candidates/x/log")).status_code == 404


async def test_landed_pages_by_keyset(site: Site) -> None:
    ids = [(await site.land("ann", f"change {i}"))[2] for i in range(53)]
    await site.login("rita")
    first = (await site.get("/ui/landed")).text
    shown = [int(x) for x in re.findall(r'href="/ui/landed/(\d+)" class="record"', first)]
    assert shown == sorted(ids, reverse=True)[:50]
    older = re.search(r'<a href="([^"]+)">Older', first)
    assert older is not None
    second = (await site.client.get(older.group(1).replace("&amp;", "&"))).text
    assert [int(x) for x in re.findall(r'href="/ui/landed/(\d+)" class="record"', second)] == sorted(ids)[:3][::-1]
    assert "Older" not in second


async def _load_tree(db: Database, nodes: list[Node]) -> dict[str, int]:
    made = await db.subtasks.create_tree(actor_id=None, nodes=nodes)
    return {k: s.id for k, s in made.items()}


async def test_tree_windows_are_bounded_and_link_to_the_rest(site: Site) -> None:
    nodes = seeds_tree(400, 10, groups=4, seed=3)
    ids = await _load_tree(site.db, nodes)
    wide = plan([Node(key="w", title="wide"), *[Node(key=f"w{i}", title=f"leaf {i}", parent="w") for i in range(60)]])
    for n in wide:
        if n.key == "w":
            n.children = [f"w{i}" for i in range(60)]
    wide_ids = await _load_tree(site.db, wide)
    await site.login("rita")
    top = (await site.get("/ui/subtasks")).text
    depths = [int(d) for d in re.findall(r'data-depth="(\d+)"', top)]
    assert depths and max(depths) == 3  # the default window: three levels
    assert f'data-id="{ids["t0"]}"' in top and f'data-id="{wide_ids["w"]}"' in top
    assert "blocked" in top and "ready" in top and 'class="badge st-ready' in top
    # the wide node: 25 children in the window, a link to the other 35
    assert f"… 35 more under #{wide_ids['w']}" in top
    under = (await site.get("/ui/subtasks", root=str(wide_ids["w"]), depth="1")).text
    assert len(re.findall(r'data-depth="1"', under)) == 50 and "Next →" in under
    rest = re.search(r'<a href="([^"]+)">Next', under)
    assert rest is not None
    page2 = (await site.client.get(rest.group(1).replace("&amp;", "&"))).text
    assert len(re.findall(r'data-depth="1"', page2)) == 10
    # down the chain to the deepest level, one window at a time, with breadcrumbs
    deepest = max(nodes, key=lambda n: int(n.title.split()[0][1:]))
    assert deepest.title.startswith("L10 ")
    chain = [deepest.key]
    by_key = {n.key: n for n in nodes}
    while by_key[chain[-1]].parent is not None:
        chain.append(str(by_key[chain[-1]].parent))
    parent_of_deepest = ids[chain[1]]
    leaf = (await site.get("/ui/subtasks", root=str(parent_of_deepest), depth="1")).text
    crumbs = re.search(r'<nav class="crumbs".*?</nav>', leaf, re.S)
    assert f'data-id="{ids[deepest.key]}"' in leaf and crumbs and crumbs.group(0).count("/ui/subtasks?root=") == 9
    # sibling dependencies are listed with the node
    dependent = next(n for n in nodes if n.depends_on)
    anywhere = (await site.get("/ui/subtasks", root=str(ids[str(dependent.parent)]), depth="1")).text
    needed = ids[str(dependent.depends_on[0])]
    assert re.search(rf'data-id="{ids[dependent.key]}".*?needs <a href="/ui/subtasks/{needed}"', anywhere, re.S)
    # the flat list by status, and bad parameters are refused with a reason
    ready = (await site.get("/ui/subtasks", status="ready")).text
    assert "Ready" in ready and 'class="badge st-blocked' not in ready
    bad = await site.get("/ui/subtasks", status="bogus", depth="99")
    assert bad.status_code == 200 and "status must be one of" in bad.text
    assert "depth must be between 1 and 5" in bad.text
    assert (await site.get("/ui/subtasks", root="999999")).status_code == 404
    one = (await site.get(f"/ui/subtasks/{ids[dependent.key]}")).text
    assert "Needs" in one and f"#{ids[str(dependent.depends_on[0])]}" in one


async def test_only_an_admin_pauses_a_repository_and_only_from_our_forms(site: Site) -> None:
    await site.login("ann")
    queue = (await site.get("/ui/queue")).text
    assert "/ui/repos/app/pause" not in queue  # no button for non-admins
    for who in ("ann", "rita", "lead"):
        await site.login(who)
        r = await site.post("/ui/repos/app/pause", {"csrf": site.csrf(who)})
        assert r.status_code == 403 and "may not pause" in r.text, who
    assert not (await site.db.repos.get_repo("app")).paused
    await site.login("root")
    assert "/ui/repos/app/pause" in (await site.get("/ui/queue")).text
    assert (await site.post("/ui/repos/app/pause", {})).status_code == 403  # no CSRF token
    assert (await site.post("/ui/repos/app/pause", {"csrf": site.csrf("ann")})).status_code == 403  # not this session's
    assert (await site.post("/ui/repos/app/pause", {"csrf": site.csrf("root")},
                            origin="https://evil.example")).status_code == 403
    assert (await site.post("/ui/repos/app/pause", {"csrf": site.csrf("root")}, origin=None)).status_code == 403
    assert not (await site.db.repos.get_repo("app")).paused
    r = await site.post("/ui/repos/app/pause", {"csrf": site.csrf("root")})
    assert r.status_code == 303 and (await site.db.repos.get_repo("app")).paused
    paused = (await site.get("/ui/queue")).text
    assert "paused by root" in paused and re.search(r'id="state-app"><span class="badge warn">paused</span>', paused)
    r = await site.client.post("/ui/repos/app/resume", data={"csrf": site.csrf("root")},
                               headers={"Referer": f"{BASE}/ui/queue"})
    assert r.status_code == 303 and not (await site.db.repos.get_repo("app")).paused
    assert any("resumed by root" in a["body"] for a in await site.db.subtasks.announcements())
    assert (await site.post("/ui/repos/nope/pause", {"csrf": site.csrf("root")})).status_code == 404


async def test_queue_shows_what_is_verified_waits_and_was_refused(site: Site) -> None:
    reader = site.db.pages
    await site.login("rita")
    # an empty queue is idle, in grey: nothing is landing
    assert re.search(r'id="state-app"><span class="badge meh">idle</span>\s*<span class="sub">nothing queued',
                     (await site.get("/ui/queue")).text)
    before = await reader.queue_fingerprint()
    waiting = []
    for i in range(3):
        sid = await site.claimed("ann" if i % 2 else "bob", f"queued change {i}")
        waiting.append(await site.db.landing.enqueue(superseded="a newer push", repo="app", subtask_id=sid,
                                                     claim_version=1,
                                                     owner_id=site.agents["ann" if i % 2 else "bob"].id,
                                                     sha=f"{sid:040x}", ref=f"refs/heads/subtasks/{sid}/v1"))
    assert await reader.queue_fingerprint() != before
    taken = await site.db.landing.next_candidate("app")  # candidates keep their subtask's priority: the last one first
    assert taken is not None and taken.id == waiting[2].id
    await site.db.landing.finish_candidate(waiting[1].id, "rejected", "conflicts with main in: notes.txt",
                                           verdict=verdicts.recorded("conflict", paths=["notes.txt"]),
                                           verifier={"command": "pytest", "outcome": "fail", "log_head": "E assert",
                                                     "log_tail": "", "log_size": 8, "log_digest": "e" * 64})
    await site.db.subtasks.log_event(actor_id=site.agents["bob"].id, kind="push_refused",
                                     subtask_id=waiting[0].subtask_id,
                                     detail={"repo": "app", "ref": "refs/heads/main", "code": "protected_ref",
                                             "message": "only Mergebot moves main"})
    # a check that failed, with pytest's output after the sentence (as ``messages.queue.rejection`` writes it)
    output = ("F.                                                                       [100%]\n"
              "_____ test_add _____\n    def test_add():\n>       assert add(2, 3) == 5\n"
              "E       assert -1 == 5\nE        +  where -1 = <function add at 0x7f>(2, 3)\n"
              + "".join(f"line {i} of the log\n" for i in range(60)) + "1 failed, 1 passed in 0.03s")
    fsid = await site.claimed("bob", "failing change")
    failed = await site.db.landing.enqueue(superseded="a newer push", repo="app", subtask_id=fsid, claim_version=1,
                                           owner_id=site.agents["bob"].id, sha="f" * 40,
                                           ref=f"refs/heads/subtasks/{fsid}/v1")
    reason = f"the check gave fail (exit 1) on the merged commit {'f' * 12} (the check: `pytest -q`):\n{output}"
    await site.db.landing.finish_candidate(failed.id, "rejected", reason,
                                           verdict=verdicts.recorded("check_failed",
                                                                     failing_tests=["tests/test_calc.py::test_add"]))
    page = (await site.get("/ui/queue")).text
    # a candidate in flight: landing, in green
    assert re.search(r'id="state-app"><span class="badge good">landing</span>', page)
    verifying = page[page.index("Verifying now"):page.index("Waiting")]
    assert "queued change 2" in verifying and "verifying" in verifying
    waits = page[page.index("Waiting"):page.index("Recently landed")]
    assert "queued change 0" in waits and "queued change 2" not in waits and "queued change 1" not in waits
    refused = page[page.index("Recent refusals"):]
    assert "conflicts with main in: notes.txt" in refused and f"/ui/candidates/{waiting[1].id}/log" in refused
    assert "kind-conflict" in refused  # the verdict's kind, as the agent was told it
    assert "protected_ref" in refused and "only Mergebot moves main" in refused
    # the failed check's row: its first line, the failing test and links to the whole verdict, not pytest's log
    row = next(r for r in refused.split("<tr>") if f"candidate {failed.id}" in r)
    assert "the check gave fail (exit 1)" in row and "<code>tests/test_calc.py::test_add</code>" in row
    assert f'<a href="/ui/candidates/{failed.id}" class="whole">the whole verdict</a>' in row
    assert "test_add():" not in row and "line 59 of the log" not in row and len(row) < 1500, row
    # the candidate's page and the subtask's show pytest's output as it was: its lines, escaped, preformatted
    for path in (f"/ui/candidates/{failed.id}", f"/ui/subtasks/{fsid}"):
        shown = (await site.get(path)).text
        told = re.search(r'<span class="told">([^<]*)</span><pre class="output">([^<]*)</pre>', shown)
        assert told is not None, path
        assert told[1] == f"the check gave fail (exit 1) on the merged commit {'f' * 12} (the check: `pytest -q`):"
        assert told[2] == output.replace("<", "&lt;").replace(">", "&gt;"), path  # every line break kept
    assert 'data-events="/ui/queue/events"' in page and "Speculation window" in page
    fragment = await site.get("/ui/queue/live")
    assert fragment.status_code == 200 and "<html" not in fragment.text and "queued change 0" in fragment.text


async def test_a_subtask_shows_its_branch_and_latest_verdict(site: Site) -> None:
    """The page tells a reviewer what the agent is told: the branch to push to, the latest verdict's kind, whether
    it is final, its paths and hunks, and the one command to run next; every push carries its own kind."""
    sid = await site.claimed("ann", "conflicting change")
    first = await site.db.landing.enqueue(superseded="a newer push", repo="app", subtask_id=sid, claim_version=1,
                                          owner_id=site.agents["ann"].id, sha=f"{sid:040x}",
                                          ref=f"refs/heads/subtasks/{sid}/v1")
    await site.db.landing.finish_candidate(first.id, "rejected", "the check pytest -q failed",
                                           verdict=verdicts.recorded("check_failed",
                                                                     failing_tests=["tests/test_calc.py::test_add"]))
    second = await site.db.landing.enqueue(superseded="a newer push", repo="app", subtask_id=sid, claim_version=1,
                                           owner_id=site.agents["ann"].id, sha=f"{sid + 1:040x}",
                                           ref=f"refs/heads/subtasks/{sid}/v1")
    await site.db.landing.finish_candidate(
        second.id, "rejected", "conflicts with main in: calc.py",
        verdict=verdicts.recorded("conflict", paths=["calc.py"],
                                  hunks=[{"path": "calc.py", "ours": "a", "theirs": "b"}]))
    await site.login("rita")
    page = (await site.get(f"/ui/subtasks/{sid}")).text
    facts = page[page.index("Latest verdict"):page.index("</table>", page.index("Latest verdict"))]
    assert "kind-conflict" in facts and f"on candidate {second.id}" in facts and "· final" in facts
    assert "<code>calc.py</code>" in facts and "1 conflicting hunk" in facts
    assert "git rebase origin/main" in facts  # the conflict's next command, for this repository's target
    assert f"<code>subtasks/{sid}/v1</code>" in page  # the claim holds: its branch is the one to push to
    pushes = page[page.index("<h2>Pushes</h2>"):page.index("<h2>History</h2>")]
    assert "kind-conflict" in pushes and "kind-check_failed" in pushes
    # a pre-existing failure is parked: not final, it moves by itself
    third = await site.db.landing.enqueue(superseded="a newer push", repo="app", subtask_id=sid, claim_version=1,
                                          owner_id=site.agents["ann"].id, sha=f"{sid + 2:040x}",
                                          ref=f"refs/heads/subtasks/{sid}/v1")
    await site.db.landing.finish_candidate(third.id, "parked", "the check fails on main too")
    page = (await site.get(f"/ui/subtasks/{sid}")).text
    facts = page[page.index("Latest verdict"):page.index("</table>", page.index("Latest verdict"))]
    assert "kind-pre_existing" in facts and "not final: it moves by itself" in facts


async def test_agents_board_and_reconciliation(site: Site) -> None:
    held = await site.claimed("ann", "held one")
    await site.db.subtasks.heartbeat(agent_id=site.agents["ann"].id, handle=Handle(held, 1))
    await site.land("ann", "landed one")
    await site.db.subtasks.log_event(actor_id=site.agents["ann"].id, kind="push_refused",
                                     detail={"code": "stale_claim"})
    await site.db.subtasks.announce(author_id=site.agents["lead"].id, body="The plan: parser first, then the pages.")
    await site.db.subtasks.add_note(author_id=site.agents["ann"].id, subtask_id=held, claim_version=1,
                                    body="## Handoff\nDone: the lexer. Remains: the parser.")
    await site.db.landing.add_finding(repo="app", kind="unexplained_commits",
                                      detail={"commits": [f"{i:040x}" for i in range(15)], "count": 15})
    await site.login("rita")
    agents = (await site.get("/ui/agents")).text
    ann = agents[agents.index("<td>ann"):].split("</tr>")[0]
    assert f"/ui/subtasks/{held}" in ann and "agent" in ann
    cells = re.findall(r'<td class="num"[^>]*>(\d+)</td>', ann)
    assert cells == ["1", "1"]  # landed 1, refused 1
    assert re.search(r"<td>\d+s</td>", ann) or re.search(r"<td>\d+m</td>", ann)  # lease age
    board = (await site.get("/ui/board")).text
    assert "The plan: parser first" in board and "Remains: the parser." in board and "lead" in board
    only = (await site.get("/ui/board", subtask=str(held))).text
    assert "Remains: the parser." in only
    rec = (await site.get("/ui/reconcile")).text
    assert "unexplained_commits" in rec and f"{0:012x}" in rec and "and 5 more" in rec
    sub = await site.claimed("bob", "submitted by hand")
    await site.db.subtasks.submit(agent_id=site.agents["bob"].id, handle=Handle(sub, 1),
                                  sha="c" * 40)
    assert "submitted by hand" in (await site.get("/ui/reconcile")).text
