"""The read views (status summary, merge queue, task tree, landed filters) against a real PostgreSQL, over HTTP
with tokens, and the CLI's rendering of them: tables, --since, and the live --watch view."""

from __future__ import annotations

import functools
import io
import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from mergebot.api import create_app
from mergebot.auth import Role
from mergebot.cli import render
from mergebot.cli import views as cli_views
from mergebot.client import ApiError
from mergebot.db.database import Database
from mergebot.landing.main.repos import add_repo, repos_root
from mergebot.models import Handle, Landing
from mergebot.rules import Rules
from mergebot.settings import Settings
from mergebot.tree import parse_tree
from tests.support.bot import make_project

_shas = iter(range(1, 1 << 30))


def sha() -> str:
    return f"{next(_shas):040x}"


async def claim_submit(db: Database, agent_id: int) -> tuple[int, int, str]:
    sub = await db.subtasks.claim(agent_id=agent_id)
    assert sub is not None
    commit = sha()
    await db.subtasks.submit(agent_id=agent_id, handle=Handle(sub.id, sub.claim_version), sha=commit)
    return sub.id, sub.claim_version, commit


async def land(db: Database, agent_id: int, repo: str = "demo") -> int:
    sid, version, commit = await claim_submit(db, agent_id)
    await db.landing.land(Landing(subtask_id=sid, claim_version=version, owner_id=agent_id, repo=repo,
                                  target_ref="refs/heads/main", candidate_sha=commit, base_sha="b" * 40,
                                  merged_sha=commit, tree_sha="c" * 40, verifier_command="true",
                                  verifier_result="pass", duration_ms=5, log_digest="d" * 64))
    return sid


# -- the views' SQL -----------------------------------------------------------------------------------------------


async def test_landed_filters_by_repo_agent_subtask_and_since(db: Database) -> None:
    ann, _ = await db.agents.add_agent(name="ann", role=Role.AGENT)
    bob, _ = await db.agents.add_agent(name="bob", role=Role.AGENT)
    for _ in range(3):
        await db.subtasks.create_subtask(actor_id=None, title="t")
    first = await land(db, ann.id)
    second = await land(db, bob.id, repo="other")
    third = await land(db, ann.id)
    views = db.views
    assert [r.subtask_id for r in await views.landed()] == [third, second, first]
    assert [r.subtask_id for r in await views.landed(owner="ann")] == [third, first]
    assert [r.subtask_id for r in await views.landed(repo="other")] == [second]
    assert [r.subtask_id for r in await views.landed(subtask_id=first)] == [first]
    now = datetime.now(UTC)
    assert len(await views.landed(since=now - timedelta(minutes=5))) == 3
    assert await views.landed(since=now + timedelta(minutes=5)) == []
    naive_future = (now + timedelta(minutes=5)).replace(tzinfo=None)  # read as UTC, not the server's zone
    assert await views.landed(since=naive_future) == []
    page = await views.landed(limit=2)
    assert [r.subtask_id for r in await views.landed(before_id=page[-1].id)] == [first]


async def test_summary_counts_queue_depth_and_holders(db: Database, tmp_path: Path) -> None:
    await add_repo(db, repos_root(tmp_path / "data"), name="demo", source=str(make_project(tmp_path / "src")),
                   rules=Rules.of(verifier_command="true"))
    ann, _ = await db.agents.add_agent(name="ann", role=Role.AGENT)
    bob, _ = await db.agents.add_agent(name="bob", role=Role.AGENT)
    root, _ = await db.subtasks.create_subtask(actor_id=None, title="root")
    await db.subtasks.create_subtask(actor_id=None, title="waits", depends_on=[root.id])
    await db.subtasks.create_subtask(actor_id=None, title="free")
    sid, version, commit = await claim_submit(db, ann.id)
    await db.landing.enqueue(superseded="a newer push", repo="demo", subtask_id=sid, claim_version=version,
                             owner_id=ann.id, sha=commit,
                             ref=f"refs/heads/subtasks/{sid}/v{version}")
    held = await db.subtasks.claim(agent_id=bob.id)
    assert held is not None
    s = await db.views.summary(holders=10)
    assert s["counts"] == {"blocked": 1, "ready": 0, "running": 1, "submitted": 1, "landed": 0, "failed": 0,
                           "cancelled": 0}
    assert s["total"] == 3
    assert s["queue"] == [{"repo": "demo", "queued": 1, "verifying": 0, "landing": 0, "parked": 0,
                           "awaiting_approval": 0}]
    assert [(h["agent"], h["holding"], h["subtasks"]) for h in s["holders"]] == [("ann", 1, [sid]),
                                                                                  ("bob", 1, [held.id])]
    assert (s["agents_holding"], s["claims_held"]) == (2, 2)
    assert s["landed"] == {"total": 0, "last_hour": 0}
    assert (await db.views.summary(holders=1))["agents_holding"] == 2  # the total, not the page


async def test_queue_lists_waiting_in_the_order_the_queue_takes_them(db: Database, tmp_path: Path) -> None:
    await add_repo(db, repos_root(tmp_path / "data"), name="demo", source=str(make_project(tmp_path / "src")),
                   rules=Rules.of(verifier_command="true"))
    agents = [(await db.agents.add_agent(name=n, role=Role.AGENT))[0] for n in ("ann", "bob", "cat", "dan")]
    leaf, _ = await db.subtasks.create_subtask(actor_id=None, title="a leaf")
    root, _ = await db.subtasks.create_subtask(actor_id=None, title="many wait on it")
    urgent, _ = await db.subtasks.create_subtask(actor_id=None, title="urgent", priority=5)
    first, _ = await db.subtasks.create_subtask(actor_id=None, title="taken first", priority=9)
    for i in range(2):
        await db.subtasks.create_subtask(actor_id=None, title=f"waits {i}", depends_on=[root.id])
    for agent in agents:
        sid, version, commit = await claim_submit(db, agent.id)
        await db.landing.enqueue(superseded="a newer push", repo="demo", subtask_id=sid, claim_version=version,
                                 owner_id=agent.id, sha=commit,
                                 ref=f"refs/heads/subtasks/{sid}/v{version}")
    taken = await db.landing.next_candidate("demo")
    assert taken is not None and taken.subtask_id == first.id
    view = await db.views.queue(repo="demo", limit=10, refusals=5, window=3)
    assert [v["subtask_id"] for v in view["verifying"]] == [first.id]
    assert view["verifying"][0]["owner"] == "ann" and view["verifying"][0]["title"] == "taken first"
    waiting = [w["subtask_id"] for w in view["waiting"]]
    assert waiting == [urgent.id, root.id, leaf.id]
    assert [w["unblocks"] for w in view["waiting"]] == [0, 2, 0]
    assert view["repos"][0]["depth"] == {"queued": 3, "verifying": 1, "landing": 0, "parked": 0,
                                         "awaiting_approval": 0}
    assert view["repos"][0]["window"] == {"max": 3, "batch": 1, "in_flight": 1}
    order = []
    while (cand := await db.landing.next_candidate("demo")) is not None:
        order.append(cand.subtask_id)
    assert order == waiting  # the view shows exactly the order the queue then follows
    text = render.render_queue(view)
    assert "demo -> main: 3 queued, 1 verifying, 0 landing, 0 parked; speculation window 1/3 in flight" in text
    assert text.index("urgent") < text.index("many wait on it") < text.index("a leaf")
    assert render.queue_line(view).startswith(f"demo: verifying #{first.id} (window 1/3), 3 queued, 0 parked")


async def test_tree_depth_root_rollups_and_limit(db: Database) -> None:
    nodes = parse_tree([{"key": "top", "title": "top", "children": [
        {"key": "a", "title": "a", "children": [{"key": "a1", "title": "a1"}, {"key": "a2", "title": "a2"}]},
        {"key": "b", "title": "b", "depends_on": ["a1"], "children": [{"key": "b1", "title": "b1"}]},
    ]}, {"key": "other", "title": "another root"}])
    made = await db.subtasks.create_tree(actor_id=None, nodes=nodes)
    ids = {k: s.id for k, s in made.items()}
    ann, _ = await db.agents.add_agent(name="ann", role=Role.AGENT)
    await land(db, ann.id)  # lands the first ready leaf: a1
    views = db.views

    full = await views.tree(root=None, depth=10, limit=100)
    assert [(n["id"], n["depth"]) for n in full["nodes"]] == [
        (ids["top"], 0), (ids["a"], 1), (ids["a1"], 2), (ids["a2"], 2), (ids["b"], 1), (ids["b1"], 2),
        (ids["other"], 0)]
    by_id = {n["id"]: n for n in full["nodes"]}
    assert (full["total"], full["truncated"]) == (7, False)
    assert by_id[ids["top"]]["children"] == 2
    assert (by_id[ids["top"]]["descendants"], by_id[ids["top"]]["descendants_landed"]) == (5, 1)
    assert by_id[ids["a1"]]["status"] == "landed"
    assert by_id[ids["b"]]["depends_on"] == sorted([ids["a1"], ids["b1"]])
    assert by_id[ids["b"]]["waits_on"] == []  # a1 landed; its own child b1 is counted below, not listed
    assert by_id[ids["a"]]["waits_on"] == []

    shallow = await views.tree(root=None, depth=0, limit=100)
    assert [n["id"] for n in shallow["nodes"]] == [ids["top"], ids["other"]]
    assert shallow["nodes"][0]["descendants"] == 5  # what is below a cut node is still counted

    sub = await views.tree(root=ids["b"], depth=5, limit=100)
    assert [(n["id"], n["depth"]) for n in sub["nodes"]] == [(ids["b"], 0), (ids["b1"], 1)]

    cut = await views.tree(root=None, depth=10, limit=3)
    assert (len(cut["nodes"]), cut["total"], cut["truncated"]) == (3, 7, True)


async def test_tree_lists_unlanded_dependencies_outside_its_children(db: Database) -> None:
    dep, _ = await db.subtasks.create_subtask(actor_id=None, title="elsewhere")
    node, _ = await db.subtasks.create_subtask(actor_id=None, title="needs it", depends_on=[dep.id])
    tree = await db.views.tree(root=node.id, depth=1, limit=10)
    assert tree["nodes"][0]["waits_on"] == [dep.id]


# -- over HTTP, with tokens -------------------------------------------------------------------------------------


class Http:
    def __init__(self, client: TestClient) -> None:
        self.client = client
        self.db: Database = client.app.state.services.db  # type: ignore[attr-defined]
        self.tokens: dict[str, str] = {}

    def run(self, fn: Callable[..., Any], **kw: Any) -> Any:
        return self.client.portal.call(functools.partial(fn, **kw))  # type: ignore[union-attr]

    def add(self, name: str, role: Role) -> None:
        self.tokens[name] = self.run(self.db.agents.add_agent, name=name, role=role)[1]

    def get(self, path: str, who: str | None = None, **params: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.tokens[who]}"} if who else {}
        return self.client.get(path, headers=headers, params=params)


@pytest.fixture
def http(settings: Settings) -> Iterator[Http]:
    with TestClient(create_app(settings, run_recovery=False, run_queue=False)) as client:
        h = Http(client)
        for name, role in (("lead", Role.LEAD), ("ann", Role.AGENT), ("rita", Role.REVIEWER)):
            h.add(name, role)
        yield h


@pytest.mark.parametrize("path", ["/api/v1/summary", "/api/v1/queue", "/api/v1/tree", "/api/v1/landed"])
def test_views_need_a_token(http: Http, path: str) -> None:
    r = http.get(path)
    assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"
    assert http.get(path, "rita").status_code == 200


def test_views_over_http(http: Http) -> None:
    root = http.run(http.db.subtasks.create_subtask, actor_id=None, title="root")[0]
    http.run(http.db.subtasks.create_subtask, actor_id=None, title="child", parent_id=root.id)
    r = http.get("/api/v1/tree", "rita", root=root.id, depth=1)
    assert [n["title"] for n in r.json()["nodes"]] == ["root", "child"]
    assert http.get("/api/v1/tree", "rita", root=999).status_code == 404
    assert http.get("/api/v1/tree", "rita", depth=65).status_code == 422
    assert http.get("/api/v1/queue", "rita", repo="nope").status_code == 404
    assert http.get("/api/v1/landed", "rita", since="not a time").status_code == 422
    later = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    assert http.get("/api/v1/landed", "rita", since=later).json() == {"landed": []}
    s = http.get("/api/v1/summary", "rita").json()
    assert s["counts"]["ready"] == 2 and s["queue"] == [] and s["holders"] == []


# -- the CLI's rendering ----------------------------------------------------------------------------------------


def test_render_status_and_line(http: Http) -> None:
    http.run(http.db.subtasks.create_subtask, actor_id=None, title="t")
    summary = http.get("/api/v1/summary", "rita").json()
    text = render.render_status(summary)
    assert "ready" in text and "total" in text and "0 agent(s) hold 0 claim(s)." in text
    assert render.status_line(summary).startswith("landed 0/1 running 0 submitted 0 ready 1 blocked 0")


def test_render_tree_marks_cut_levels() -> None:
    tree = {"root": None, "depth": 0, "total": 4, "truncated": False, "nodes": [
        {"id": 1, "parent_id": None, "depth": 0, "title": "top", "status": "blocked", "owner": None,
         "children": 3, "descendants": 3, "descendants_landed": 1, "waits_on": [], "depends_on": [2, 3, 4]}]}
    text = render.render_tree(tree)
    assert "#1 blocked   top  [1/3 below landed (not shown)]" in text
    assert "--depth N" in text


def test_parse_since() -> None:
    now = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
    assert cli_views.parse_since("2h", now) == now - timedelta(hours=2)
    assert cli_views.parse_since("3d", now) == now - timedelta(days=3)
    assert cli_views.parse_since("2024-04-30T10:00+00:00", now) == datetime(2024, 4, 30, 10, 0, tzinfo=UTC)
    assert cli_views.parse_since("2024-04-30").tzinfo is not None  # local midnight, made explicit
    with pytest.raises(Exception, match="not a time"):
        cli_views.parse_since("yesterday-ish", now)


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def _script(values: list[Any]) -> Callable[[], dict[str, Any]]:
    it = iter(values)

    def fetch() -> dict[str, Any]:
        v = next(it)
        if isinstance(v, Exception):
            raise v
        return {"n": v}

    return fetch


def test_watch_prints_one_line_per_change_when_not_a_terminal() -> None:
    out, err = io.StringIO(), io.StringIO()
    down = httpx.ConnectError("down")
    fetch = _script([1, 1, down, down, 1, 2, 2])
    cli_views.watch(fetch, lambda d: f"FULL {d['n']}", lambda d: f"n={d['n']}", interval=0, out=out, err=err, rounds=7,
                    sleep=lambda _: None)
    lines = [line.split(" ", 1)[1] for line in out.getvalue().splitlines()]
    assert lines == ["n=1", "n=1", "n=2"]  # after the outage it says where things stand again
    assert err.getvalue().count("cannot read the view now (down)") == 1
    assert "FULL" not in out.getvalue()


def test_watch_json_lines_carry_no_timestamp() -> None:
    out = io.StringIO()
    cli_views.watch(_script([1, 2]), str, lambda d: json.dumps(d), interval=0, out=out, rounds=2, sleep=lambda _: None,
                    stamp=False)
    assert [json.loads(line) for line in out.getvalue().splitlines()] == [{"n": 1}, {"n": 2}]


def test_watch_redraws_a_terminal_every_round() -> None:
    out = Tty()
    cli_views.watch(_script([1, 1, 2]), lambda d: f"FULL {d['n']}", lambda d: f"n={d['n']}", interval=0, out=out,
                    rounds=3, sleep=lambda _: None)
    text = out.getvalue()
    assert text.count("\x1b[H\x1b[2J") == 3 and text.count("FULL 1") == 2 and "FULL 2" in text


def test_watch_stops_on_a_refusal() -> None:
    fetch = _script([ApiError(401, "unauthorized", "missing token", {})])
    with pytest.raises(ApiError):
        cli_views.watch(fetch, str, str, interval=0, out=io.StringIO(), rounds=3, sleep=lambda _: None)
