"""Security boundaries of access, one test (or more) each, every one of which fails if its boundary breaks.

  * Identity comes from the token only: not from a body field, a header, a cookie on the API, or git's username.
  * Agents push only their own subtask branches (real git over HTTP against ``mergebot serve``), cannot change
    the verifier command or the protected paths (no API for it; protected paths refused at push time; a
    configuration file in the pushed tree changes nothing), and cannot reach admin routes. Every route of the
    app is checked: each non-public one refuses a caller without a token.

Tokens and secrets are in ``test_security_tokens.py``, bounded work, shells and paths in
``test_security_inputs.py``.
"""

from __future__ import annotations

from typing import Any

import httpx

from mergebot import agent as agent_mod
from mergebot.db.database import Database
from mergebot.rules import Rules
from mergebot.web import session as web_session
from tests.support.bot import Fleet, commit, git
from tests.support.security import ROLES, ZERO, Api, actions_of, basic, concrete, refs_of, routes_of

# ============================================================================================ identity

async def test_identity_comes_from_the_token_only(roles_api: Api, db: Database) -> None:
    r = roles_api.call("POST", "/api/v1/subtasks", "lead", json={"title": "one"})
    sid = r.json()["subtask"]["id"]
    ann, bob = await db.agents.agent_by_name("ann"), await db.agents.agent_by_name("bob")
    # Fields naming someone are not part of any body: refused, naming the field.
    for body in ({"owner": "bob"}, {"owner_id": bob.id}, {"agent": "bob"}, {"agent_id": bob.id}):
        r = roles_api.call("POST", "/api/v1/subtasks/claim", "ann", json=body)
        assert r.status_code == 422 and r.json()["error"]["field"] == next(iter(body)), r.text
    # Headers naming someone else are ignored; the bearer token decides.
    spoof = {"X-Mergebot-Agent": "bob", "X-Forwarded-User": "bob", "X-Remote-User": "bob", "Remote-User": "bob",
             "From": "bob@example.com", "Cookie": f"{web_session.COOKIE}={roles_api.tokens['bob']}"}
    r = roles_api.call("POST", "/api/v1/subtasks/claim", "ann", headers=spoof)
    assert r.status_code == 200 and r.json()["subtask"]["owner_id"] == ann.id
    assert roles_api.call("GET", "/api/v1/me", "ann", headers=spoof).json()["agent"]["name"] == "ann"
    # The pages' session cookie is not an API credential (no CSRF-able API calls).
    r = roles_api.call("GET", "/api/v1/me", headers={"Cookie": f"{web_session.COOKIE}={roles_api.tokens['bob']}"})
    assert r.status_code == 401
    # Two credentials in one header are no credential at all.
    both = f"Bearer {roles_api.tokens['ann']} {roles_api.tokens['bob']}"
    r = roles_api.call("GET", "/api/v1/me", headers={"Authorization": both})
    assert r.status_code == 401
    # Bob holds the right handle (id, claim_version) but not the claim: every owner write is refused.
    writes: list[tuple[str, dict[str, Any]]] = [
        (f"/api/v1/subtasks/{sid}/heartbeat", {"claim_version": 1}),
        (f"/api/v1/subtasks/{sid}/release", {"claim_version": 1}),
        (f"/api/v1/subtasks/{sid}/submit", {"claim_version": 1, "sha": "f" * 40}),
        (f"/api/v1/subtasks/{sid}/notes", {"claim_version": 1, "body": "mine now"})]
    for path, body in writes:
        r = roles_api.call("POST", path, "bob", json=body)
        assert r.status_code == 409 and r.json()["error"]["code"] == "claim_superseded", (path, r.text)
    sub = await db.subtasks.get_subtask(sid)
    assert (sub.owner_id, sub.status, sub.claim_version) == (ann.id, "running", 1)
    events = await db.subtasks.events(subtask_id=sid, limit=100)
    assert events and all(e["actor"] != "bob" for e in events)
    # The verifier's job routes are the verifier's: an agent cannot report a job's result.
    assert roles_api.call("POST", "/api/v1/verify-jobs/1/result", "ann",
                    json={"claim_version": 1, "result": {"outcome": "pass"}}).status_code == 403
    assert roles_api.call("POST", "/api/v1/verify-jobs/claim", "ann", json={"worker": "w"}).status_code == 403


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
    await fleet.db.repos.set_paused(repo="demo", paused=True, reason="hold")
    git(["push", "-q", "origin", f"HEAD:refs/heads/{ann_claim.branch}"], ann_wt)
    ann = await fleet.db.agents.agent_by_name("ann")
    cands = await fleet.db.landing.candidates(repo="demo")
    assert [(c["subtask_id"], c["owner_id"]) for c in cands] == [(ann_claim.subtask_id, ann.id)]


# ============================================================================================ refs

async def test_agents_push_only_their_own_subtask_branches(fleet: Fleet) -> None:
    s1, _ = await fleet.db.subtasks.create_subtask(actor_id=None, title="ann's")
    s2, _ = await fleet.db.subtasks.create_subtask(actor_id=None, title="bob's")
    await fleet.db.repos.set_paused(repo="demo", paused=True, reason="hold the queue: branches stay put")
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
    assert {e["detail"]["code"] for e in refused} >= {"protected_ref", "not_claimed", "not_owner"}
    # ...and her own branch is hers to push.
    git(["push", "-q", "origin", f"HEAD:refs/heads/{ann_claim.branch}"], ann_wt)
    assert f"refs/heads/{ann_claim.branch}" in refs_of(fleet)


async def test_agents_cannot_change_what_judges_them(fleet: Fleet) -> None:
    repo_before = await fleet.db.repos.get_repo("demo")
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
    repo_after = await fleet.db.repos.get_repo("demo")
    assert (repo_after.verifier_command, repo_after.protected_paths) == (
        repo_before.verifier_command, repo_before.protected_paths)
    jobs = await fleet.db.jobs.jobs(status=None, candidate_id=result["id"], limit=10)
    assert jobs and all(j["command"] == repo_before.verifier_command for j in jobs), jobs


# ============================================================================================ routes and roles

PUBLIC = {"/healthz", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc", "/", "/login", "/logout",
          "/ui/static/{name}"}
EXPECTED_ADMIN = {("POST", "/api/v1/agents"), ("POST", "/api/v1/agents/{name}/revoke"),
                  ("GET", "/api/v1/webhook-deliveries"), ("POST", "/api/v1/repos/{name}/pause"),
                  ("POST", "/api/v1/repos/{name}/resume"), ("POST", "/api/v1/reconcile"),
                  ("PATCH", "/api/v1/repos/{name}/rules")}


async def test_every_non_public_route_refuses_a_caller_without_a_token(roles_api: Api) -> None:
    app = roles_api.client.app
    routes = routes_of(app)
    assert len(routes) > 50
    checked = 0
    for method, path, _ in routes:
        if path in PUBLIC:
            continue
        for headers in ({}, {"Authorization": "Bearer mb_" + "x" * 43}, {"Authorization": basic("nope")},
                        {"Cookie": f"{web_session.COOKIE}=mb_{'y' * 43}"}):
            r = roles_api.client.request(method, concrete(path), headers=headers, follow_redirects=False)
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
        assert roles_api.client.get(f"/git/demo.git/info/refs?service={service}").status_code == 401
    assert checked > 150


async def test_admin_routes_refuse_every_other_role(roles_api: Api, db: Database) -> None:
    app = roles_api.client.app
    admin = {(m, p) for m, p, route in routes_of(app) if "admin" in actions_of(route.dependant)}
    assert admin == EXPECTED_ADMIN  # a new admin route is checked below, and named here on purpose
    await db.repos.create_repo(name="demo", root_sha=ZERO, rules=Rules.of(target_branch="main", verifier_command="true",
                               verifier_timeout_s=60, protected_paths=["ci/"], max_push_bytes=1 << 20,
                               max_file_bytes=1 << 20))
    for method, path in sorted(admin):
        for who in ("lead", "ann", "rita", "vera"):
            r = roles_api.call(method, concrete(path).replace("/agents/demo/", "/agents/bob/"), who,
                         json={"name": "evil", "role": "admin"})
            assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden", (method, path, who, r.text)
    assert roles_api.call("GET", "/api/v1/webhook-deliveries", "root").status_code == 200
    agents = roles_api.call("GET", "/api/v1/agents", "rita").json()["agents"]
    assert {a["name"] for a in agents} == {n for n, _ in ROLES}  # nobody was added or revoked above
    assert all(a["revoked_at"] is None for a in agents)
    assert not any("token" in k or "hash" in k for a in agents for k in a)  # readers never see credentials
    assert not (await db.repos.get_repo("demo")).paused
    # The pages' one admin action, from the site's own form with a valid CSRF token: still the role decides.
    for who in ("lead", "ann", "rita"):
        token = roles_api.tokens[who]
        r = roles_api.client.post("/ui/repos/demo/pause", data={"csrf": web_session.csrf_token(token)},
                            headers={"Origin": "http://testserver", "Cookie": f"{web_session.COOKIE}={token}"},
                            follow_redirects=False)
        assert r.status_code == 403, (who, r.status_code)
    assert not (await db.repos.get_repo("demo")).paused
