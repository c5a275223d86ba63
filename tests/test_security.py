"""Security boundaries, one test (or more) each, every one of which fails if its boundary breaks.

  * Identity comes from the token only: not from a body field, a header, a cookie on the API, or git's username.
  * Agents push only their own subtask branches (real git over HTTP against ``mergebot serve``), cannot change
    the verifier command or the protected paths (no API for it; protected paths refused at push time; a
    configuration file in the pushed tree changes nothing), and cannot reach admin routes. Every route of the
    app is checked: each non-public one refuses a caller without a token.
  * Tokens: stored only as SHA-256 (no plaintext token anywhere in the database), compared with
    ``hmac.compare_digest`` after a lookup by hash, revocable at once for the API and for git; no token or
    webhook secret in the server's log.
  * Bounded work: every pooled connection of request handling runs under ``statement_timeout`` (read from inside
    a request), bodies over the limit are 413 on every body-reading route, list limits are capped.
  * No shell: nothing in the package spawns one for git data; refs, commit messages, file names and push options
    full of shell metacharacters are pushed end to end without side effects; path traversal in repository names
    is refused by the git routes, the API and ``mergebot repo add``.
"""

from __future__ import annotations

import ast
import base64
import hashlib
import hmac
import http.client
import inspect
import json
import os
import re
import subprocess
import sys
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import Request
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient

import mergebot
from mergebot import agent as agent_mod
from mergebot import auth
from mergebot.api import create_app
from mergebot.auth import Role
from mergebot.db.database import Database
from mergebot.db.queries import QUERIES
from mergebot.errors import Invalid
from mergebot.forge.sansio import MAX_BODY_BYTES
from mergebot.landing.repos import add_repo, repos_root
from mergebot.settings import Settings
from mergebot.web import session as web_session
from tests.support.bot import Fleet, commit, git, make_project

PACKAGE = Path(mergebot.__file__).parent
ROOT = PACKAGE.parent
ZERO = "0" * 40
WEBHOOK_SECRET = "whsec-never-logged-Zq81xP"


# ============================================================================================ helpers

class Api:
    """The app in-process on a real database, with tokens made through the owner's db."""

    def __init__(self, client: TestClient, tokens: dict[str, str]) -> None:
        self.client = client
        self.tokens = tokens

    def call(self, method: str, path: str, who: str | None = None, **kw: Any) -> httpx.Response:
        headers = dict(kw.pop("headers", {}))
        if who is not None:
            headers["Authorization"] = f"Bearer {self.tokens[who]}"
        response: httpx.Response = self.client.request(method, path, headers=headers, **kw)
        return response


ROLES = (("root", Role.ADMIN), ("lead", Role.LEAD), ("ann", Role.AGENT), ("bob", Role.AGENT),
         ("rita", Role.REVIEWER), ("vera", Role.VERIFIER))


@pytest.fixture
async def api(db: Database, settings: Settings) -> Any:
    settings.max_body_bytes = 64 * 1024
    tokens = {}
    for name, role in ROLES:
        _, tokens[name] = await db.agents.add_agent(name=name, role=role)
    with TestClient(create_app(settings, run_recovery=False, run_queue=False)) as client:
        yield Api(client, tokens)


def basic(token: str, user: str = "agent") -> str:
    return "Basic " + base64.b64encode(f"{user}:{token}".encode()).decode()


def raw_get(port: int, target: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    """A request whose target is sent byte for byte (httpx and git both normalise '..' away)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    try:
        conn.putrequest("GET", target, skip_accept_encoding=True)
        for k, v in (headers or {}).items():
            conn.putheader(k, v)
        conn.endheaders()
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def refs_of(fleet: Fleet) -> dict[str, str]:
    bare = fleet.bare()
    return {r: str(bare.references[r].target) for r in bare.references if not r.startswith("refs/mergebot")}


# ============================================================================================ identity

async def test_identity_comes_from_the_token_only(api: Api, db: Database) -> None:
    r = api.call("POST", "/api/v1/subtasks", "lead", json={"title": "one"})
    sid = r.json()["subtask"]["id"]
    ann, bob = await db.agents.agent_by_name("ann"), await db.agents.agent_by_name("bob")
    # Fields naming someone are not part of any body: refused, naming the field.
    for body in ({"owner": "bob"}, {"owner_id": bob.id}, {"agent": "bob"}, {"agent_id": bob.id}):
        r = api.call("POST", "/api/v1/subtasks/claim", "ann", json=body)
        assert r.status_code == 422 and r.json()["error"]["field"] == next(iter(body)), r.text
    # Headers naming someone else are ignored; the bearer token decides.
    spoof = {"X-Mergebot-Agent": "bob", "X-Forwarded-User": "bob", "X-Remote-User": "bob", "Remote-User": "bob",
             "From": "bob@example.com", "Cookie": f"{web_session.COOKIE}={api.tokens['bob']}"}
    r = api.call("POST", "/api/v1/subtasks/claim", "ann", headers=spoof)
    assert r.status_code == 200 and r.json()["subtask"]["owner_id"] == ann.id
    assert api.call("GET", "/api/v1/me", "ann", headers=spoof).json()["agent"]["name"] == "ann"
    # The pages' session cookie is not an API credential (no CSRF-able API calls).
    r = api.call("GET", "/api/v1/me", headers={"Cookie": f"{web_session.COOKIE}={api.tokens['bob']}"})
    assert r.status_code == 401
    # Two credentials in one header are no credential at all.
    r = api.call("GET", "/api/v1/me", headers={"Authorization": f"Bearer {api.tokens['ann']} {api.tokens['bob']}"})
    assert r.status_code == 401
    # Bob holds the right handle (id, claim_version) but not the claim: every owner write is refused.
    writes: list[tuple[str, dict[str, Any]]] = [
        (f"/api/v1/subtasks/{sid}/heartbeat", {"claim_version": 1}),
        (f"/api/v1/subtasks/{sid}/release", {"claim_version": 1}),
        (f"/api/v1/subtasks/{sid}/submit", {"claim_version": 1, "sha": "f" * 40}),
        (f"/api/v1/subtasks/{sid}/notes", {"claim_version": 1, "body": "mine now"})]
    for path, body in writes:
        r = api.call("POST", path, "bob", json=body)
        assert r.status_code == 409 and r.json()["error"]["code"] == "claim_superseded", (path, r.text)
    sub = await db.subtasks.get_subtask(sid)
    assert (sub.owner_id, sub.status, sub.claim_version) == (ann.id, "running", 1)
    events = await db.subtasks.events(subtask_id=sid, limit=100)
    assert events and all(e["actor"] != "bob" for e in events)
    # The verifier's job routes are the verifier's: an agent cannot report a job's result.
    assert api.call("POST", "/api/v1/verify-jobs/1/result", "ann",
                    json={"claim_version": 1, "result": {"outcome": "pass"}}).status_code == 403
    assert api.call("POST", "/api/v1/verify-jobs/claim", "ann", json={"worker": "w"}).status_code == 403


async def test_git_identity_is_the_password_not_the_username(fleet: Fleet) -> None:
    await fleet.db.subtasks.create_subtask(actor_id=None, title="ann's")
    await fleet.db.subtasks.create_subtask(actor_id=None, title="bob's")
    ann_claim, ann_wt = fleet.start("ann")
    bob_claim, _ = fleet.start("bob")
    # Ann says she is bob (the username), with her own token (the password).
    git(["config", "http.extraHeader", f"Authorization: {basic(fleet.tokens['ann'], user='bob')}"], ann_wt)
    commit(ann_wt, {"a.txt": "a\n"})
    out = git(["push", "origin", f"HEAD:refs/heads/{bob_claim.branch}"], ann_wt, check=False)
    assert out.returncode != 0 and f"subtask {bob_claim.subtask_id} is not yours" in out.stderr
    await fleet.db.landing.set_paused(repo="demo", paused=True, reason="hold")
    git(["push", "-q", "origin", f"HEAD:refs/heads/{ann_claim.branch}"], ann_wt)
    ann = await fleet.db.agents.agent_by_name("ann")
    cands = await fleet.db.landing.candidates(repo="demo")
    assert [(c["subtask_id"], c["owner_id"]) for c in cands] == [(ann_claim.subtask_id, ann.id)]


# ============================================================================================ refs

async def test_agents_push_only_their_own_subtask_branches(fleet: Fleet) -> None:
    s1, _ = await fleet.db.subtasks.create_subtask(actor_id=None, title="ann's")
    s2, _ = await fleet.db.subtasks.create_subtask(actor_id=None, title="bob's")
    await fleet.db.landing.set_paused(repo="demo", paused=True, reason="hold the queue: branches stay put")
    ann_claim, ann_wt = fleet.start("ann")
    bob_claim, bob_wt = fleet.start("bob")
    assert (ann_claim.subtask_id, bob_claim.subtask_id) == (s1.id, s2.id)
    commit(bob_wt, {"b.txt": "b\n"})
    git(["push", "-q", "origin", f"HEAD:refs/heads/{bob_claim.branch}"], bob_wt)
    commit(ann_wt, {"a.txt": "a\n"})
    before = refs_of(fleet)
    main = fleet.main()
    bob_tip = before[f"refs/heads/{bob_claim.branch}"]
    hostile = [
        ["HEAD:refs/heads/main"],
        ["+HEAD:refs/heads/main"],
        ["HEAD:refs/heads/release"],
        ["HEAD:refs/tags/v1.0"],
        ["HEAD:refs/notes/commits"],
        ["HEAD:refs/mergebot/intent"],
        ["HEAD:refs/heads/subtasks"],
        [f"HEAD:refs/heads/subtasks/{s1.id}/v2"],  # a claim version that does not exist yet
        [f"HEAD:refs/heads/subtasks/{s1.id}/v1/x"],
        [f"HEAD:refs/heads/subtasks/0{s1.id}/v1"],
        [f"+HEAD:refs/heads/{bob_claim.branch}"],  # overwrite bob's branch
        [f":refs/heads/{bob_claim.branch}"],  # delete it
        [f"HEAD:refs/heads/{ann_claim.branch}", "HEAD:refs/heads/main"],  # one bad ref refuses the whole push
        [f"HEAD:refs/heads/{ann_claim.branch}", f"+HEAD:refs/heads/{bob_claim.branch}"],
    ]
    for specs in hostile:
        out = git(["push", "--porcelain", "origin", *specs], ann_wt, check=False)
        assert out.returncode != 0, (specs, out.stdout, out.stderr)
        assert "Mergebot refused this push" in out.stderr or "rejected" in out.stdout, (specs, out.stderr)
        assert refs_of(fleet) == before, specs
    assert fleet.main() == main and refs_of(fleet)[f"refs/heads/{bob_claim.branch}"] == bob_tip
    refused = [e for e in await fleet.db.subtasks.events(limit=1000) if e["kind"] == "push_refused"]
    assert {e["detail"]["code"] for e in refused} >= {"protected_ref", "stale_claim", "not_owner"}
    # ...and her own branch is hers to push.
    git(["push", "-q", "origin", f"HEAD:refs/heads/{ann_claim.branch}"], ann_wt)
    assert f"refs/heads/{ann_claim.branch}" in refs_of(fleet)


async def test_agents_cannot_change_what_judges_them(fleet: Fleet) -> None:
    repo_before = await fleet.db.landing.get_repo("demo")
    # No API changes a repository's landing rules; the admin-only ones are refused to agents and leads.
    for who in ("ann", "lead"):
        c = httpx.Client(base_url=fleet.bot.url, headers={"Authorization": f"Bearer {fleet.tokens[who]}"})
        for method, path in (("PUT", "/api/v1/repos/demo"), ("PATCH", "/api/v1/repos/demo"),
                             ("POST", "/api/v1/repos/demo"), ("DELETE", "/api/v1/repos/demo"),
                             ("POST", "/api/v1/repos"), ("PUT", "/api/v1/repos/demo/verifier"),
                             ("POST", "/api/v1/repos/demo/pause"), ("POST", "/api/v1/repos/demo/resume")):
            r = c.request(method, path, json={"verifier_command": "true", "protected_paths": []})
            assert r.status_code in (403, 404, 405), (who, method, path, r.status_code)
    # Protected paths, every way a push could touch them.
    await fleet.db.subtasks.create_subtask(actor_id=None, title="sneaky")
    claim, wt = fleet.start("ann")
    base = git(["rev-parse", "HEAD"], wt).stdout.strip()
    for change in ({"ci/check.sh": "exit 0\n"}, {"ci/new.sh": "true\n"}, {"ci": None}, {"ci/check.sh": None}):
        git(["reset", "-q", "--hard", base], wt)
        for name, text in change.items():
            if text is None:
                git(["rm", "-rq", name], wt)
            else:
                (wt / name).parent.mkdir(parents=True, exist_ok=True)
                (wt / name).write_text(text)
        git(["add", "-A"], wt)
        git(["commit", "-qm", "tweak the check"], wt)
        out = git(["push", "--force", "origin", f"HEAD:refs/heads/{claim.branch}"], wt, check=False)
        assert out.returncode != 0 and "changes protected paths (ci/" in out.stderr, (change, out.stderr)
    # A rename out of the protected folder is a change to it too.
    git(["reset", "-q", "--hard", base], wt)
    git(["mv", "ci/check.sh", "check.sh"], wt)
    git(["commit", "-qm", "move it"], wt)
    out = git(["push", "--force", "origin", f"HEAD:refs/heads/{claim.branch}"], wt, check=False)
    assert out.returncode != 0 and "protected paths" in out.stderr
    # A "configuration" in the tree that says to run `true` changes nothing: the configured check runs, fails.
    git(["reset", "-q", "--hard", base], wt)
    commit(wt, {"calc.py": "def add(a, b):\n    return a - b\n",
                ".mergebot.yml": "verifier: 'true'\nprotected_paths: []\n",
                "mergebot.toml": "[repo]\nverifier_command = 'true'\n"}, "break add, say the check is `true`")
    main = fleet.main()
    result = agent_mod.push(fleet.client("ann"), wt, wait=90, progress=False)
    assert result["status"] == "rejected", result
    assert fleet.main() == main and await fleet.db.landing.landed(subtask_id=claim.subtask_id) == []
    repo_after = await fleet.db.landing.get_repo("demo")
    assert (repo_after.verifier_command, repo_after.protected_paths) == (
        repo_before.verifier_command, repo_before.protected_paths)
    jobs = await fleet.db.jobs.jobs(status=None, candidate_id=result["id"], limit=10)
    assert jobs and all(j["command"] == repo_before.verifier_command for j in jobs), jobs


# ============================================================================================ routes and roles

PUBLIC = {"/healthz", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc", "/", "/login", "/logout",
          "/ui/static/{name}"}
EXPECTED_ADMIN = {("POST", "/api/v1/agents"), ("POST", "/api/v1/agents/{name}/revoke"),
                  ("GET", "/api/v1/webhook-deliveries"), ("POST", "/api/v1/repos/{name}/pause"),
                  ("POST", "/api/v1/repos/{name}/resume"), ("POST", "/api/v1/reconcile")}


def _actions(dependant: Any) -> set[str]:
    """The role actions (``require(action)``) anywhere in a route's dependency tree."""
    found = set()
    for dep in dependant.dependencies:
        if dep.call is not None and getattr(dep.call, "__closure__", None):
            action = inspect.getclosurevars(dep.call).nonlocals.get("action")
            if isinstance(action, str):
                found.add(action)
        found |= _actions(dep)
    return found


def _concrete(path: str) -> str:
    return re.sub(r"\{([^}]+)\}", lambda m: "1" if m.group(1).endswith("id") else "demo", path)


def _flat(routes: list[Any]) -> Iterator[Any]:
    for route in routes:
        inner = getattr(route, "original_router", None)  # FastAPI >= 0.160 keeps included routers whole
        if inner is not None:
            yield from _flat(inner.routes)
        else:
            yield route


def _routes(app: Any) -> list[tuple[str, str, APIRoute]]:
    out = []
    for route in _flat(app.routes):
        if isinstance(route, APIRoute):
            out += [(m, route.path, route) for m in sorted((route.methods or set()) - {"HEAD"})]
    return out


async def test_every_non_public_route_refuses_a_caller_without_a_token(api: Api) -> None:
    app = api.client.app
    routes = _routes(app)
    assert len(routes) > 50
    checked = 0
    for method, path, _ in routes:
        if path in PUBLIC:
            continue
        for headers in ({}, {"Authorization": "Bearer mb_" + "x" * 43}, {"Authorization": basic("nope")},
                        {"Cookie": f"{web_session.COOKIE}=mb_{'y' * 43}"}):
            r = api.client.request(method, _concrete(path), headers=headers, follow_redirects=False)
            where = (method, path, headers, r.status_code)
            if path.startswith("/ui/"):
                assert r.status_code == 303 and r.headers["location"].startswith("/login"), where
            elif path.startswith("/webhooks/"):
                assert r.status_code in (400, 401), where  # a signature, not a token, authenticates these
            elif path.startswith("/internal/hooks/"):
                assert r.status_code == 403, where  # only a push the bot registered may call its hooks
            else:
                assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized", where
            checked += 1
    # The git remote too: no token, no refs.
    for service in ("git-upload-pack", "git-receive-pack"):
        assert api.client.get(f"/git/demo.git/info/refs?service={service}").status_code == 401
    assert checked > 150


async def test_admin_routes_refuse_every_other_role(api: Api, db: Database) -> None:
    app = api.client.app
    admin = {(m, p) for m, p, route in _routes(app) if "admin" in _actions(route.dependant)}
    assert admin == EXPECTED_ADMIN  # a new admin route is checked below, and named here on purpose
    await db.landing.create_repo(name="demo", target_branch="main", verifier_command="true", verifier_timeout_s=60,
                                 protected_paths=["ci/"], max_push_bytes=1 << 20, max_file_bytes=1 << 20, root_sha=ZERO)
    for method, path in sorted(admin):
        for who in ("lead", "ann", "rita", "vera"):
            r = api.call(method, _concrete(path).replace("/agents/demo/", "/agents/bob/"), who,
                         json={"name": "evil", "role": "admin"})
            assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden", (method, path, who, r.text)
    assert api.call("GET", "/api/v1/webhook-deliveries", "root").status_code == 200
    agents = api.call("GET", "/api/v1/agents", "rita").json()["agents"]
    assert {a["name"] for a in agents} == {n for n, _ in ROLES}  # nobody was added or revoked above
    assert all(a["revoked_at"] is None for a in agents)
    assert not any("token" in k or "hash" in k for a in agents for k in a)  # readers never see credentials
    assert not (await db.landing.get_repo("demo")).paused
    # The pages' one admin action, from the site's own form with a valid CSRF token: still the role decides.
    for who in ("lead", "ann", "rita"):
        token = api.tokens[who]
        r = api.client.post("/ui/repos/demo/pause", data={"csrf": web_session.csrf_token(token)},
                            headers={"Origin": "http://testserver", "Cookie": f"{web_session.COOKIE}={token}"},
                            follow_redirects=False)
        assert r.status_code == 403, (who, r.status_code)
    assert not (await db.landing.get_repo("demo")).paused


# ============================================================================================ tokens

async def test_tokens_are_hashed_looked_up_by_hash_and_compared_in_constant_time(
        api: Api, db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    async with db.pool.connection() as conn:
        rows = await (await conn.execute("SELECT name, token_hash FROM agents")).fetchall()
    stored = {name: bytes(h) for name, h in rows}
    for name, token in api.tokens.items():
        assert stored[name] == hashlib.sha256(token.encode()).digest() == auth.hash_token(token)
        assert token.encode() not in stored[name] and len(token) >= 40  # 256 random bits, stored only hashed
    assert "token_hash = %(token_hash)s" in QUERIES["agent_by_token"]  # an index probe, never a scan or a LIKE
    compared: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        compared.append((a, b))
        same: bool = real(a, b)
        return same

    monkeypatch.setattr(hmac, "compare_digest", spy)  # the module mergebot.auth compares with
    assert (await db.agents.authenticate(api.tokens["ann"])) is not None
    assert compared == [(stored["ann"], stored["ann"])]
    assert await db.agents.authenticate(api.tokens["ann"] + "x") is None


async def test_no_plaintext_secret_in_the_database_or_the_log(fleet: Fleet) -> None:
    # Restart the bot with a webhook secret in its environment and every log line on.
    fleet.bot.stop()
    fleet.bot.start(MERGEBOT_WEBHOOK_SECRET=WEBHOOK_SECRET, MERGEBOT_LOG_LEVEL="debug", MERGEBOT_ACCESS_LOG="1",
                    MERGEBOT_LOG_FORMAT="json")
    url = fleet.bot.url
    await fleet.db.subtasks.create_subtask(actor_id=None, title="add subtract")
    # A landing: API calls, a clone and a push with the token, a verifier run.
    _, wt = fleet.start("ann")
    commit(wt, {"calc.py": "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"})
    assert agent_mod.push(fleet.client("ann"), wt, wait=90, progress=False)["status"] == "landed"
    # Admin work: a new agent (its token is in a response body), a revocation.
    _, root_token = await fleet.db.agents.add_agent(name="root", role=Role.ADMIN)
    r = httpx.post(f"{url}/api/v1/agents", json={"name": "carl"}, headers={"Authorization": f"Bearer {root_token}"})
    carl_token = r.json()["token"]
    httpx.post(f"{url}/api/v1/agents/carl/revoke", headers={"Authorization": f"Bearer {root_token}"})
    # Failures that carry a token: a revoked one, one in the query string, one in a Basic header on git.
    httpx.get(f"{url}/api/v1/me", headers={"Authorization": f"Bearer {carl_token}"})
    httpx.get(f"{url}/api/v1/me", params={"token": fleet.tokens["bob"]})
    httpx.get(f"{url}/git/demo.git/info/refs", params={"service": "git-receive-pack"},
              headers={"Authorization": basic(carl_token)})
    httpx.post(f"{url}/login", data={"token": fleet.tokens["rita"], "next": "/ui/landed"})
    # A forge repository whose webhook secret is read from the environment (no mirror on disk: only webhooks
    # that stop before any git work are sent to it).
    await fleet.db.landing.create_repo(name="mirror", target_branch="main", verifier_command="true",
                                       verifier_timeout_s=60, protected_paths=[], max_push_bytes=1 << 20,
                                       max_file_bytes=1 << 20, root_sha=ZERO,
                                       forge={"forge": "github", "forge_repo": "acme/app",
                                              "forge_api_url": "https://forge.invalid",
                                              "forge_git_url": "https://forge.invalid/acme/app.git",
                                              "webhook_secret_env": "MERGEBOT_WEBHOOK_SECRET",
                                              "forge_token_env": "MERGEBOT_WEBHOOK_SECRET"})
    # Webhooks: signed with the secret, and a bad signature.
    body = json.dumps({"zen": "hi", "hook_id": 1, "repository": {"full_name": "acme/app"}}).encode()
    sig = "sha256=" + hmac.new(WEBHOOK_SECRET.encode(), body, hashlib.sha256).hexdigest()
    r = httpx.post(f"{url}/webhooks/github", content=body, headers={
        "x-github-event": "ping", "x-github-delivery": "d1", "x-hub-signature-256": sig})
    assert r.status_code == 200, r.text
    r = httpx.post(f"{url}/webhooks/github", content=body, headers={
        "x-github-event": "ping", "x-github-delivery": "d2", "x-hub-signature-256": "sha256=" + "0" * 64})
    assert r.status_code == 401
    fleet.bot.stop()

    secrets = [*fleet.tokens.values(), root_token, carl_token, WEBHOOK_SECRET]
    needles = [s for t in secrets for s in {t, t.removeprefix("mb_")}]
    needles += [base64.b64encode(f"agent:{t}".encode()).decode() for t in secrets]  # git's Basic header
    # Every text-like column of every table, dumped as text.
    async with fleet.db.pool.connection() as conn:
        cols = await (await conn.execute(
            "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = 'public' "
            "AND data_type IN ('text', 'character varying', 'json', 'jsonb', 'bytea', 'ARRAY', 'USER-DEFINED')"
        )).fetchall()
        assert len(cols) > 30
        dump = []
        for table, column in cols:
            rows = await (await conn.execute(f'SELECT "{column}"::text FROM "{table}"')).fetchall()  # catalogue names
            dump += [r[0] for r in rows if r[0] is not None]
    text = "\n".join(dump)
    assert "carl" in text and "acme/app" in text  # the dump does hold the rows
    for needle in needles:
        assert needle not in text
        assert needle.encode().hex() not in text  # nor as bytea
    log = fleet.bot.log.read_text()
    assert "/webhooks/github" in log and "/api/v1/me" in log and "/git/demo.git" in log  # the log is full
    for needle in needles:
        assert needle not in log, "a secret reached the log"


async def test_a_revoked_token_stops_working_at_once_for_api_and_git(fleet: Fleet) -> None:
    await fleet.db.subtasks.create_subtask(actor_id=None, title="t")
    await fleet.db.landing.set_paused(repo="demo", paused=True, reason="hold")
    claim, wt = fleet.start("ann")
    commit(wt, {"x.txt": "x\n"})
    token = fleet.tokens["ann"]
    refs = f"{fleet.bot.url}/git/demo.git/info/refs"
    assert httpx.get(refs, params={"service": "git-upload-pack"}, headers={"Authorization": basic(token)}
                     ).status_code == 200
    await fleet.db.agents.revoke_agent(name="ann")
    assert httpx.get(f"{fleet.bot.url}/api/v1/me", headers={"Authorization": f"Bearer {token}"}).status_code == 401
    for service in ("git-upload-pack", "git-receive-pack"):
        r = httpx.get(refs, params={"service": service}, headers={"Authorization": basic(token)})
        assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Basic")
    out = git(["push", "origin", f"HEAD:refs/heads/{claim.branch}"], wt, check=False)
    assert out.returncode != 0 and f"refs/heads/{claim.branch}" not in refs_of(fleet)
    assert await fleet.db.landing.candidates(repo="demo") == []
    r = httpx.get(f"{fleet.bot.url}/ui/landed", cookies={web_session.COOKIE: token}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"].startswith("/login")


# ============================================================================================ bounded work

async def test_request_handling_runs_under_a_statement_timeout(settings: Settings) -> None:
    settings.statement_timeout_ms = 300
    app = create_app(settings, run_recovery=False, run_queue=False)

    @app.get("/__probe")
    async def probe(request: Request) -> dict[str, Any]:  # the pool every route handler uses
        pool = request.app.state.services.db.pool
        async with pool.connection() as conn:
            timeout = (await (await conn.execute("SHOW statement_timeout")).fetchone())[0]
            try:
                await conn.execute("SELECT pg_sleep(3)")
                canceled = False
            except Exception as e:  # psycopg.errors.QueryCanceled
                canceled = type(e).__name__ == "QueryCanceled"
        return {"timeout": timeout, "canceled": canceled}

    with TestClient(app) as client:
        got = [client.get("/__probe").json() for _ in range(3)]  # more than one pooled connection
    assert got == [{"timeout": "300ms", "canceled": True}] * 3


async def test_request_sizes_are_bounded(api: Api) -> None:
    app = api.client.app
    # Every list has a capped limit: asking for a million rows is refused, not served.
    limited = [(m, p) for m, p, route in _routes(app) if m == "GET" and any(
        q.name == "limit" for q in route.dependant.query_params)]
    assert len(limited) >= 10
    for _, path in limited:
        r = api.call("GET", _concrete(path), "root", params={"limit": 1_000_000})
        assert r.status_code == 422 and r.json()["error"]["field"].endswith("limit"), (path, r.text)
    # Bodies over the limit are 413, whether declared or streamed, on the API and the hooks.
    big = b'{"title": "t", "description": "' + b"x" * 70_000 + b'"}'

    def chunks() -> Iterator[bytes]:
        yield big[:1000]
        for i in range(1000, len(big), 4096):
            yield big[i:i + 4096]

    for path in ("/api/v1/subtasks", "/api/v1/notes", "/internal/hooks/pre-receive", "/api/v1/subtasks/wait"):
        for content in (big, chunks()):
            r = api.call("POST", path, "lead", content=content, headers={"Content-Type": "application/json"})
            assert r.status_code == 413 and r.json()["error"]["code"] == "too_large", (path, r.status_code)
    # Webhooks have the forge's own limit (25 MiB), refused on the declared length before reading.
    r = api.client.post("/webhooks/github", content=b"x" * (MAX_BODY_BYTES + 1), headers={"x-github-event": "ping"})
    assert r.status_code == 413
    # Lists inside bodies are capped too.
    r = api.call("POST", "/api/v1/subtasks/wait", "rita", json={"ids": list(range(1, 1002)), "timeout": 0})
    assert r.status_code == 422 and r.json()["error"]["field"] == "ids"
    r = api.call("POST", "/api/v1/subtasks", "lead", json={"title": "t", "depends_on": list(range(1, 1002))})
    assert r.status_code == 422 and r.json()["error"]["field"] == "depends_on"
    assert api.call("GET", "/api/v1/status", "rita").json()["counts"] == {}  # and nothing was written


# ============================================================================================ no shell

FORBIDDEN = re.compile(r"shell\s*=\s*True|os\.system\s*\(|os\.popen\s*\(|create_subprocess_shell|"
                       r"commands\.getoutput|pty\.spawn")


def _sources() -> list[Path]:
    return sorted([*PACKAGE.rglob("*.py"), *(ROOT / "verifier").rglob("*.py")])


def test_nothing_in_the_package_runs_a_shell_on_data() -> None:
    sources = _sources()
    assert len(sources) > 40
    hits = [f"{p}:{i}" for p in sources for i, line in enumerate(p.read_text().splitlines(), 1)
            if FORBIDDEN.search(line)]
    assert hits == []
    # Every subprocess call gets an argument list (never a command string built from data).
    # subprocess.*: the first argument is a list (or a name bound to one), never a string made from data.
    # asyncio.create_subprocess_exec / os.exec*: the program is a fixed name and each argument is separate.
    lists = {"run", "Popen", "call", "check_call", "check_output"}
    execs = {"create_subprocess_exec", "execv", "execvp", "execvpe", "spawnv", "spawnvp"}
    calls = 0
    for p in sources:
        for node in ast.walk(ast.parse(p.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name)
                    and node.func.value.id in ("subprocess", "asyncio", "os")):
                continue
            first = node.args[0] if node.args else None
            where = f"{p}:{node.lineno}"
            if node.func.attr in lists:
                calls += 1
                assert not isinstance(first, ast.Constant | ast.JoinedStr | ast.BinOp), where
            elif node.func.attr in execs:
                calls += 1
                assert not isinstance(first, ast.JoinedStr | ast.BinOp), where
                if isinstance(first, ast.Constant):
                    assert re.fullmatch(r"[\w./-]+", str(first.value)), where  # a program name, not a command
    assert calls >= 5
    # The hooks are shell scripts: git's ref lines are piped to curl, never interpolated into a command.
    for hook in (ROOT / "hooks").iterdir():
        text = hook.read_text()
        assert "--data-binary @-" in text and "eval" not in text and "read " not in text


async def test_shell_metacharacters_in_refs_messages_file_names_and_push_options(fleet: Fleet,
                                                                                   tmp_path: Path) -> None:
    trap = tmp_path / "trap"
    trap.mkdir()
    cmds = [f"$(touch${{IFS}}{trap}/d)", f"`touch${{IFS}}{trap}/b`", f";touch${{IFS}}{trap}/s;", f"|touch {trap}/p"]
    await fleet.db.subtasks.create_subtask(actor_id=None, title="$(touch /tmp/mb-title-trap) `id` ; rm -rf /")
    claim, wt = fleet.start("ann")
    # Refs: refused with a reason, nothing run.
    for c in cmds[:3]:
        out = git(["push", "origin", f"HEAD:refs/heads/{c}"], wt, check=False)
        assert out.returncode != 0 and "this ref is protected" in out.stderr, out.stderr
    # Push options: Mergebot does not read them; git refuses them before the push.
    out = git(["push", "-o", cmds[0], "-o", cmds[1], "origin", f"HEAD:refs/heads/{claim.branch}"], wt, check=False)
    assert out.returncode != 0 and "push options" in out.stderr
    # File names and a commit message full of metacharacters land like any other change.
    names = ["$(touch pwned-d).txt", "`touch pwned-b`.txt", "a;touch pwned-s;.txt", "x|touch pwned-p", "'q\".txt",
             "-rf", "--upload-pack=touch pwned-u"]
    commit(wt, {n: "data\n" for n in names} | {"calc.py": "def add(a, b):\n    return a + b\n# ok\n"},
           "\n".join(cmds) + "\n$(touch pwned-m) `touch pwned-m2`")
    result = agent_mod.push(fleet.client("ann"), wt, wait=90, progress=False)
    assert result["status"] == "landed", result
    landed_tree = fleet.bare()[fleet.main()].peel(__import__("pygit2").Commit).tree
    assert all(n in landed_tree for n in names)
    assert list(trap.iterdir()) == []
    for where in (tmp_path, Path(fleet.bot.data_dir)):  # the work trees, the repositories, the verifier's checkouts
        assert not list(where.rglob("pwned*")), where  # (no file pushed above starts with "pwned")
    assert not list(ROOT.glob("pwned*"))  # the server's working directory
    assert not Path("/tmp/mb-title-trap").exists()


# ============================================================================================ path traversal

TRAVERSALS = ["..", "../demo", "..%2fdemo", "%2e%2e", "%2e%2e%2fdemo", "demo.git/../..", "x.git/../../", "/etc/passwd",
              "%2Fetc%2Fpasswd", "demo/..", ".demo", "demo%00", "demo\n", "-demo", "demo.git", "..\\demo", "~root",
              "demo/../../outside"]


async def test_path_traversal_in_repository_names_is_refused(fleet: Fleet, tmp_path: Path) -> None:
    data = Path(fleet.bot.data_dir)
    outside = data / "outside.git"  # a repository next to the repos folder: must never be served
    subprocess.run(["git", "init", "-q", "--bare", str(outside)], check=True)
    token = fleet.tokens["ann"]
    auth_header = {"Authorization": basic(token)}
    targets = ["/git/../outside.git/info/refs", "/git/%2e%2e/outside.git/info/refs",
               "/git/..%2foutside.git/info/refs", "/git/%2e%2e%2foutside.git/info/refs",
               "/git/demo.git/../../outside.git/info/refs", "/git/demo.git/..%2f..%2foutside.git/info/refs",
               "/git//etc/passwd.git/info/refs", f"/git/{outside}/info/refs", "/git/repos/../outside.git/info/refs",
               "/git/demo.git/../info/refs", "/git/demo.git/objects/info/packs", "/git/demo.git/HEAD",
               "/git/demo.git/config", "/git/demo.git/hooks/pre-receive", "/git/.%2e/outside.git/info/refs",
               "/git/%2E%2E/outside.git/git-upload-pack"]
    for target in targets:
        for query in ("", "?service=git-upload-pack", "?service=git-receive-pack"):
            status, body = raw_get(fleet.bot.port, target + query, auth_header)
            assert status in (400, 404, 405), (target, status)
            assert b"refs/heads" not in body and b"[core]" not in body and b"curl" not in body
    assert raw_get(fleet.bot.port, "/git/demo.git/info/refs?service=git-upload-pack", auth_header)[0] == 200
    # The API takes repository names as data only (a database lookup), never as paths.
    _, root_token = await fleet.db.agents.add_agent(name="root", role=Role.ADMIN)
    for name in TRAVERSALS:
        quoted = httpx.URL(f"{fleet.bot.url}/api/v1/repos/x/pause").copy_with(
            raw_path=f"/api/v1/repos/{urllib.parse.quote(name, safe='%.~-')}/pause".encode())
        r = httpx.post(quoted, headers={"Authorization": f"Bearer {root_token}"})
        assert r.status_code in (404, 405, 422), (name, r.status_code)
        r = httpx.get(f"{fleet.bot.url}/api/v1/candidates", params={"repo": name},
                      headers={"Authorization": f"Bearer {token}"})
        assert r.status_code in (200, 422) and (r.status_code == 422 or r.json()["candidates"] == [])
    assert not (await fleet.db.landing.get_repo("demo")).paused
    # Adding a repository: the name is checked before anything touches the disk.
    root = repos_root(data)
    before = sorted(p.name for p in data.iterdir())
    src = make_project(tmp_path / "src-traversal")
    for name in [*TRAVERSALS, str(tmp_path / "abs"), "a" * 65, "", "demo\n"]:
        with pytest.raises(Invalid):
            await add_repo(fleet.db, root, name=name, source=str(src), verifier_command="true")
    assert sorted(p.name for p in data.iterdir()) == before and not (tmp_path / "abs.git").exists()
    assert sorted(p.name for p in root.iterdir()) == ["demo.git"]
    # ...and through the command line.
    env = {**os.environ, "MERGEBOT_DATABASE_URL": fleet.bot.db_url, "MERGEBOT_DATA_DIR": str(data)}
    for name in ("../evil", "x.git/../../evil", str(tmp_path / "evil")):
        out = subprocess.run([sys.executable, "-m", "mergebot", "repo", "add", name, "--from", str(src),
                              "--verifier", "true"], env=env, capture_output=True, text=True, check=False)
        assert out.returncode != 0 and "repository name" in (out.stdout + out.stderr), out.stderr[-500:]
    assert not (data / "evil.git").exists() and not (tmp_path / "evil.git").exists()
    assert not (data.parent / "evil.git").exists()
    assert sorted(p.name for p in root.iterdir()) == ["demo.git"]
