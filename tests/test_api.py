"""The HTTP API against a real PostgreSQL: auth, roles, fencing errors, bad input, limits."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from mergebot.api import create_app
from mergebot.auth import Role
from mergebot.db.database import Database
from mergebot.settings import Settings


class Api:
    def __init__(self, client: TestClient) -> None:
        self.client = client
        self.db: Database = client.app.state.services.db  # type: ignore[attr-defined]
        self.tokens: dict[str, str] = {}

    def add(self, name: str, role: Role) -> str:
        _, token = self.client.portal.call(functools.partial(self.db.agents.add_agent, name=name, role=role))  # type: ignore[union-attr]
        self.tokens[name] = token
        return token

    def call(self, method: str, path: str, who: str | None = None, **kw: Any) -> Any:
        headers = kw.pop("headers", {})
        if who is not None:
            headers["Authorization"] = f"Bearer {self.tokens[who]}"
        return self.client.request(method, path, headers=headers, **kw)


@pytest.fixture
def api(settings: Settings) -> Iterator[Api]:
    settings.max_body_bytes = 64 * 1024
    with TestClient(create_app(settings, run_recovery=False)) as client:
        a = Api(client)
        a.add("root", Role.ADMIN)
        a.add("lead", Role.LEAD)
        a.add("ann", Role.AGENT)
        a.add("bob", Role.AGENT)
        a.add("rita", Role.REVIEWER)
        yield a


def test_claim_heartbeat_submit_flow(api: Api) -> None:
    r = api.call("POST", "/api/v1/subtasks", "lead", json={"title": "parse responses", "priority": 3})
    assert r.status_code == 201, r.text
    sid = r.json()["subtask"]["id"]
    child = api.call("POST", "/api/v1/subtasks", "lead", json={"title": "tests", "depends_on": [sid]})
    assert child.json()["subtask"]["status"] == "blocked"
    r = api.call("POST", "/api/v1/subtasks/claim", "ann")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["handle"] == {"id": sid, "claim_version": 1}
    assert body["branch"] == f"subtasks/{sid}/v1"
    assert body["subtask"]["owner_id"] is not None
    assert api.call("POST", "/api/v1/subtasks/claim", "bob").status_code == 204  # the child is blocked
    r = api.call("POST", f"/api/v1/subtasks/{sid}/heartbeat", "ann", json={"claim_version": 1})
    assert r.status_code == 200 and r.json()["status"] == "running"
    r = api.call("POST", f"/api/v1/subtasks/{sid}/notes", "ann", json={"claim_version": 1, "body": "halfway"})
    assert r.status_code == 201
    r = api.call("POST", f"/api/v1/subtasks/{sid}/submit", "ann", json={"claim_version": 1, "sha": "f" * 40})
    assert r.status_code == 200 and r.json()["subtask"]["status"] == "submitted"
    r = api.call("GET", f"/api/v1/subtasks/{sid}/events", "rita")
    assert [e["to_status"] for e in r.json()["events"]] == ["ready", "running", "submitted"]


def test_owner_comes_from_token_not_body(api: Api) -> None:
    api.call("POST", "/api/v1/subtasks", "lead", json={"title": "t"})
    r = api.call("POST", "/api/v1/subtasks/claim", "ann", json={"owner": "bob"})
    assert r.status_code == 422 and r.json()["error"]["field"] == "owner"
    r = api.call("POST", "/api/v1/subtasks/claim", "ann")
    me = api.call("GET", "/api/v1/me", "ann").json()["agent"]
    assert r.json()["subtask"]["owner_id"] == me["id"]


def test_superseded_claim_is_409_with_current_version(api: Api) -> None:
    sid = api.call("POST", "/api/v1/subtasks", "lead", json={"title": "t"}).json()["subtask"]["id"]
    api.call("POST", "/api/v1/subtasks/claim", "ann")
    # bob is not the owner, even with the right version
    r = api.call("POST", f"/api/v1/subtasks/{sid}/submit", "bob", json={"claim_version": 1})
    assert r.status_code == 409
    err = r.json()["error"]
    assert err["code"] == "claim_superseded" and err["current_version"] == 1
    assert "claim superseded" in err["message"]
    api.call("POST", f"/api/v1/subtasks/{sid}/release", "ann", json={"claim_version": 1})
    api.call("POST", "/api/v1/subtasks/claim", "bob")
    r = api.call("POST", f"/api/v1/subtasks/{sid}/heartbeat", "ann", json={"claim_version": 1})
    assert r.status_code == 409 and r.json()["error"]["current_version"] == 2
    claimed = api.call("GET", f"/api/v1/subtasks/{sid}", "rita").json()["subtask"]
    assert claimed["owner"] == "bob" and claimed["previous_owner"] == "ann"


def test_handoff_on_reclaim(api: Api) -> None:
    sid = api.call("POST", "/api/v1/subtasks", "lead", json={"title": "t"}).json()["subtask"]["id"]
    api.call("POST", "/api/v1/subtasks/claim", "ann")
    api.call("POST", f"/api/v1/subtasks/{sid}/notes", "ann", json={"claim_version": 1, "body": "try Y next"})
    api.call("POST", f"/api/v1/subtasks/{sid}/release", "ann", json={"claim_version": 1, "reason": "stuck"})
    body = api.call("POST", "/api/v1/subtasks/claim", "bob").json()
    assert body["handle"]["claim_version"] == 2
    assert body["handoff"]["previous"]["branch"] == f"subtasks/{sid}/v1"
    assert [n["body"] for n in body["handoff"]["notes"]] == ["try Y next"]
    assert body["handoff"]["last_reason"] == "stuck"


@pytest.mark.parametrize(("headers", "code"), [
    ({}, 401),
    ({"Authorization": "Bearer nope"}, 401),
    ({"Authorization": "Basic Zm9vOmJhcg=="}, 401),
    ({"Authorization": "Bearer " + "x" * 5000}, 401),
])
def test_unauthenticated(api: Api, headers: dict[str, str], code: int) -> None:
    r = api.call("POST", "/api/v1/subtasks/claim", headers=headers)
    assert r.status_code == code
    assert r.json()["error"]["code"] == "unauthorized"
    assert r.headers["www-authenticate"] == "Bearer"


def test_roles(api: Api) -> None:
    assert api.call("POST", "/api/v1/subtasks/claim", "rita").status_code == 403
    assert api.call("POST", "/api/v1/agents", "ann", json={"name": "evil", "role": "admin"}).status_code == 403
    assert api.call("POST", "/api/v1/announcements", "ann", json={"body": "hi"}).status_code == 403
    assert api.call("PUT", "/api/v1/assignments/bob", "ann", json={"group": "g"}).status_code == 403
    r = api.call("POST", "/api/v1/agents", "root", json={"name": "carl", "role": "agent"})
    assert r.status_code == 201 and r.json()["token"].startswith("mb_")
    assert api.call("POST", "/api/v1/announcements", "lead", json={"body": "plan is in notes"}).status_code == 201
    assert api.call("GET", "/api/v1/announcements", "rita").json()["announcements"][0]["body"] == "plan is in notes"


def test_revoked_token_is_refused(api: Api) -> None:
    assert api.call("GET", "/api/v1/me", "bob").status_code == 200
    assert api.call("POST", "/api/v1/agents/bob/revoke", "root").status_code == 200
    assert api.call("GET", "/api/v1/me", "bob").status_code == 401


def test_bad_input(api: Api) -> None:
    r = api.call("POST", "/api/v1/subtasks", "lead", content=b"{not json",
                 headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "malformed_json"
    r = api.call("POST", "/api/v1/subtasks", "lead", json={"title": 5})
    assert r.status_code == 422 and r.json()["error"]["field"] == "title"
    r = api.call("POST", "/api/v1/subtasks", "lead", json={"title": "x" * 201})
    assert r.status_code == 422 and r.json()["error"]["field"] == "title"
    r = api.call("POST", "/api/v1/subtasks", "lead", json={"title": "t", "depends_on": [12345]})
    assert r.status_code == 422 and r.json()["error"]["field"] == "depends_on"
    r = api.call("POST", "/api/v1/subtasks", "lead", json={"title": "t", "priority": 10**12})
    assert r.status_code == 422 and r.json()["error"]["field"] == "priority"
    r = api.call("POST", "/api/v1/subtasks/1/heartbeat", "ann", json={"claim_version": "one"})
    assert r.status_code == 422 and r.json()["error"]["field"] == "claim_version"
    r = api.call("POST", "/api/v1/subtasks/batch", "lead", json={"subtasks": [
        {"key": "a", "title": "a", "depends_on": ["b"]}, {"key": "b", "title": "b", "depends_on": ["a"]}]})
    assert r.status_code == 422 and r.json()["error"]["field"] == "depends_on"
    assert "cycle" in r.json()["error"]["message"]
    assert api.call("GET", "/api/v1/subtasks/999", "rita").status_code == 404
    # nothing was half-written by any of the above
    assert api.call("GET", "/api/v1/status", "rita").json()["counts"] == {}


def test_body_limit(api: Api) -> None:
    big = {"title": "t", "description": "x" * 70_000}
    r = api.call("POST", "/api/v1/subtasks", "lead", json=big)
    assert r.status_code == 413 and r.json()["error"]["code"] == "too_large"

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted while streaming
        yield b'{"title": "t", "description": "'
        for _ in range(100):
            yield b"y" * 1000
        yield b'"}'

    r = api.call("POST", "/api/v1/subtasks", "lead", content=chunks(),
                 headers={"Content-Type": "application/json"})
    assert r.status_code == 413
    assert api.call("GET", "/api/v1/status", "rita").json()["counts"] == {}


def test_idempotent_create_over_http(api: Api) -> None:
    body = {"title": "t", "idempotency_key": "req-1"}
    first = api.call("POST", "/api/v1/subtasks", "ann", json=body)
    again = api.call("POST", "/api/v1/subtasks", "ann", json=body)
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["subtask"]["id"] == again.json()["subtask"]["id"]
    assert again.json()["created"] is False


def test_tree_batch_and_wait(api: Api) -> None:
    r = api.call("POST", "/api/v1/subtasks/batch", "lead", json={"key_prefix": "p", "subtasks": [
        {"key": "root", "title": "root", "children": [{"key": "leaf", "title": "leaf"}]}]})
    assert r.status_code == 201, r.text
    ids = r.json()["subtasks"]
    r = api.call("POST", "/api/v1/subtasks/wait", "rita", json={"ids": [ids["leaf"]["id"]], "timeout": 0.2})
    assert r.json() == {"done": False, "statuses": {str(ids["leaf"]["id"]): "ready"}}
    api.call("POST", f"/api/v1/subtasks/{ids['leaf']['id']}/cancel", "lead", json={"reason": "not needed"})
    r = api.call("POST", "/api/v1/subtasks/wait", "rita", json={"ids": [ids["leaf"]["id"]], "timeout": 5})
    assert r.json()["done"] is True


def test_groups_and_assignments(api: Api) -> None:
    r = api.call("PUT", "/api/v1/assignments/ann", "lead", json={"group": "parsing", "group_role": "leader"})
    assert r.status_code == 200 and r.json()["assignment"]["group_name"] == "parsing"
    r = api.call("PUT", "/api/v1/groups/parsing", "lead", json={"open": True, "description": "parsers"})
    assert r.json()["group"]["open"] is True and r.json()["group"]["description"] == "parsers"
    groups = api.call("GET", "/api/v1/groups", "rita").json()["groups"]
    assert [(g["name"], g["members"]) for g in groups] == [("parsing", 1)]


def test_healthz_and_openapi(api: Api) -> None:
    assert api.call("GET", "/healthz").json() == {"ok": True, "database": "ok"}
    spec = api.call("GET", "/openapi.json").json()
    assert "/api/v1/subtasks/claim" in spec["paths"]


def test_a_near_duplicate_subtask_is_refused_unless_it_is_distinct(api: Api) -> None:
    first = api.call("POST", "/api/v1/subtasks", "lead", json={
        "title": "Add a mul function to calc", "description": "calc.py needs mul(a, b)"}).json()["subtask"]
    twin = {"title": "add mul function to calc.", "description": "calc.py needs mul(a,b)"}
    r = api.call("POST", "/api/v1/subtasks", "ann", json=twin)
    assert r.status_code == 409, r.text
    err = r.json()["error"]
    assert err["code"] == "duplicate" and err["field"] == "allow_duplicate"
    assert err["twins"][0]["twin"]["subtask_id"] == first["id"] and f"subtask {first['id']}" in err["message"]
    assert "--allow-duplicate" in err["message"]
    r = api.call("POST", "/api/v1/subtasks", "ann", json={**twin, "allow_duplicate": True})
    assert r.status_code == 201, r.text
    # different numbers are different work; a retry with its idempotency key is that subtask, not a twin of it
    for n in (1, 2):
        body = {"title": f"Fix bug {n} in calc", "idempotency_key": f"bug-{n}"}
        assert api.call("POST", "/api/v1/subtasks", "ann", json=body).status_code == 201
        assert api.call("POST", "/api/v1/subtasks", "ann", json=body).status_code == 200


def test_a_tree_reports_every_near_duplicate_before_writing_anything(api: Api) -> None:
    api.call("POST", "/api/v1/subtasks", "lead", json={"title": "Write the parser for config files"})
    before = api.call("GET", "/api/v1/status", "rita").json()["counts"]
    tree = {"key_prefix": "cfg", "subtasks": [
        {"key": "parse", "title": "write the parser for config files", "paths": ["src/config/*.py"]},
        {"key": "docs", "title": "Document the config format"},
        {"key": "docs2", "title": "document the config format."},
        {"key": "tests", "title": "Test the config loader"}]}
    r = api.call("POST", "/api/v1/subtasks/batch", "lead", json=tree)
    assert r.status_code == 409, r.text
    err = r.json()["error"]
    assert {(p["key"], p["twin"].get("key") or p["twin"]["subtask_id"]) for p in err["twins"]} == {
        ("parse", 1), ("docs", "docs2")}
    assert "key parse" in err["message"] and "key docs" in err["message"]
    assert api.call("GET", "/api/v1/status", "rita").json()["counts"] == before  # nothing was written
    r = api.call("POST", "/api/v1/subtasks/batch", "lead", json={**tree, "allow_duplicate": True})
    assert r.status_code == 201, r.text
    parse = api.call("GET", f"/api/v1/subtasks/{r.json()['subtasks']['parse']['id']}", "rita").json()
    assert parse["subtask"]["paths"] == ["src/config/*.py"]
    again = api.call("POST", "/api/v1/subtasks/batch", "lead", json=tree)  # the same file loaded again
    assert again.status_code == 201 and again.json()["subtasks"] == r.json()["subtasks"], again.text
