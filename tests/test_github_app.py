"""GitHub App authentication (issue 33): a JWT signed with the App's key, an installation token minted and cached,
renewed once after a 401, and the same token on every call: the mirror's fetches, the landing push (git over HTTP,
Basic ``x-access-token``) and the statuses.

The stand-in checks the JWT as GitHub does (RS256 with the App's public key, issued by its id, at most ten
minutes), answers with the published response shapes (validated here against GitHub's OpenAPI description), and
serves the repository's git over HTTP only to a valid token. No personal token is in the bot's environment.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from mergebot.auth import Role
from mergebot.db.database import Database
from mergebot.errors import Invalid
from mergebot.forge.client import GitHubClient, StatusPost
from mergebot.forge.renewing import Renewing
from mergebot.git import credentials
from mergebot.landing.main.repos import add_repo, forge_settings, repos_root
from mergebot.rules import Rules
from tests.conftest import bot_env
from tests.support.bot import BotProcess, check_command, commit, forge_remote, git, make_project
from tests.support.forge_standin import ForgeStandin, GitHubApp, PostedStatus
from tests.support.forge_standin.github_schema import ACCESS_TOKENS, INSTALLATION
from tests.support.forge_standin.github_schema import validate_github_response as validate

APP_ID = 31337
KEY_ENV = "MERGEBOT_TEST_GITHUB_APP_KEY"
SECRET = "webhook-secret-for-tests"
HOLD = Path(tempfile.gettempdir()) / f"mergebot-hold-{uuid.uuid4().hex}"  # while it exists, a landing is held
PAYLOADS = Path(__file__).parent / "forge_payloads"
ZERO = "0" * 40


@pytest.fixture(scope="module")
def keys() -> tuple[str, str]:
    """A fresh RSA key pair standing in for the App's .pem: (private, public)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()
    public = key.public_key().public_bytes(serialization.Encoding.PEM,
                                           serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    return private, public


@pytest.fixture
def forge(keys: tuple[str, str], tmp_path: Path) -> Iterator[ForgeStandin]:
    remote = forge_remote(make_project(tmp_path / "src"), tmp_path / "forge" / "calc.git")
    with ForgeStandin(token="ghp_no_personal_token_here", bare_repo=remote,
                      app=GitHubApp(APP_ID, keys[1], installation_id=777)) as f:
        yield f


def test_the_jwt_is_the_apps_own_for_nine_minutes(keys: tuple[str, str]) -> None:
    token = credentials.app_jwt(APP_ID, keys[0], now=1_000_000.0)
    claims = jwt.decode(token, keys[1], algorithms=["RS256"], options={"verify_exp": False})
    assert claims == {"iss": str(APP_ID), "iat": 1_000_000 - 60, "exp": 1_000_000 + 540}
    with pytest.raises(jwt.InvalidSignatureError):
        other = rsa.generate_private_key(public_exponent=65537, key_size=2048).public_key()
        jwt.decode(token, other, algorithms=["RS256"], options={"verify_exp": False})


def test_installation_tokens_are_minted_once_cached_and_renewed(forge: ForgeStandin, keys: tuple[str, str]) -> None:
    now = [time.time()]
    app = credentials.App(app_id=APP_ID, key_env=KEY_ENV, api_url=forge.url, repo="acme/calc")
    tokens = credentials.AppTokens(app, environ={KEY_ENV: keys[0]}, clock=lambda: now[0])
    first = tokens.token()
    assert tokens.token() == first and tokens.minted == 1 and forge.minted == [first]  # cached
    paths = [r.path for r in forge.requests]
    assert paths == ["/repos/acme/calc/installation", "/app/installations/777/access_tokens"], paths
    assert all(r.headers["authorization"].startswith("Bearer ey") for r in forge.requests)  # the JWT, not a token

    now[0] += 3600 - credentials.RENEW_BEFORE_S + 1  # within five minutes of its expiry: minted again
    second = tokens.token()
    assert second != first and tokens.minted == 2

    forge.revoke_tokens()  # GitHub refuses it now: renewing mints one, however many callers saw it fail
    third = tokens.renew(second)
    assert third not in (first, second) and tokens.renew(second) == third and tokens.minted == 3
    assert tokens.renew("a token nobody holds") == third and tokens.minted == 3
    # the installation was found once, from the repository
    assert [r.path for r in forge.requests].count("/repos/acme/calc/installation") == 1


def test_the_stand_in_answers_as_github_publishes(forge: ForgeStandin, keys: tuple[str, str]) -> None:
    """The bodies the App's calls get are GitHub's published shapes; a JWT of another key is refused."""
    bearer = {"Authorization": f"Bearer {credentials.app_jwt(APP_ID, keys[0], time.time())}"}
    got = httpx.get(f"{forge.url}/repos/acme/calc/installation", headers=bearer)
    assert got.status_code == 200, got.text
    validate(INSTALLATION, "get", 200, got.json())
    minted = httpx.post(f"{forge.url}/app/installations/777/access_tokens", headers=bearer)
    assert minted.status_code == 201, minted.text
    validate(ACCESS_TOKENS, "post", 201, minted.json())
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode()
    forged = {"Authorization": f"Bearer {credentials.app_jwt(APP_ID, other, time.time())}"}
    refused = httpx.post(f"{forge.url}/app/installations/777/access_tokens", headers=forged)
    assert refused.status_code == 401 and forge.minted == [minted.json()["token"]]


def test_a_status_refused_with_401_is_sent_once_more_with_a_renewed_token(forge: ForgeStandin,
                                                                          keys: tuple[str, str]) -> None:
    app = credentials.App(app_id=APP_ID, key_env=KEY_ENV, api_url=forge.url, repo="acme/calc", installation_id=777)
    tokens = credentials.AppTokens(app, environ={KEY_ENV: keys[0]})
    client = Renewing(lambda t: GitHubClient(t, base_url=forge.url), tokens.token, tokens.renew)
    sha = "a" * 40
    client.post_status("acme/calc", StatusPost(sha, "pending", "queued", None))
    forge.revoke_tokens()
    client.post_status("acme/calc", StatusPost(sha, "success", "landed", None))
    assert [s.state for s in forge.statuses(sha)] == ["pending", "success"] and tokens.minted == 2
    posts = [r for r in forge.requests if r.path.endswith(f"/statuses/{sha}")]
    assert [r.status for r in posts] == [201, 401, 201]
    assert posts[-1].headers["authorization"].endswith(forge.minted[-1])


def test_repo_add_checks_the_app(monkeypatch: pytest.MonkeyPatch, keys: tuple[str, str]) -> None:
    monkeypatch.setenv("MERGEBOT_WEBHOOK_SECRET", SECRET)
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    with pytest.raises(Invalid, match=f"set the environment variable {KEY_ENV}"):
        forge_settings("github", "acme/calc", app_id=APP_ID, app_key_env=KEY_ENV)
    monkeypatch.setenv(KEY_ENV, "not a key at all")
    with pytest.raises(Invalid, match="holds no RSA private key"):
        forge_settings("github", "acme/calc", app_id=APP_ID, app_key_env=KEY_ENV)
    monkeypatch.setenv(KEY_ENV, keys[0])
    with pytest.raises(Invalid, match="both --github-app-id and --github-app-key-env"):
        forge_settings("github", "acme/calc", app_id=APP_ID)
    with pytest.raises(Invalid, match="only a GitHub repository"):
        forge_settings("gitea", "acme/calc", url="http://gitea", app_id=APP_ID, app_key_env=KEY_ENV)
    got = forge_settings("github", "acme/calc", app_id=APP_ID, app_key_env=KEY_ENV)  # no personal token needed
    assert (got["github_app_id"], got["github_app_key_env"], got["github_installation_id"]) == (APP_ID, KEY_ENV, None)


@dataclass
class AppFleet:
    bot: BotProcess
    db: Database
    forge: ForgeStandin
    work: Path
    agents: dict[str, int]
    root: str  # an admin's token

    def page(self, path: str) -> str:
        with httpx.Client(base_url=self.bot.url, timeout=30) as web:
            r = web.post("/login", data={"token": self.root, "next": path}, headers={"Origin": self.bot.url})
            assert r.status_code == 303, r.text
            return web.get(path).text

    def deliver(self, ref: str, after: str, sender: str = "ann-gh") -> httpx.Response:
        payload: dict[str, Any] = json.loads((PAYLOADS / "github_push_branch_update.json").read_bytes())
        payload.update(ref=ref, before=ZERO, after=after, created=True, deleted=False, forced=False)
        payload["repository"]["full_name"] = "acme/calc"
        payload["sender"]["login"] = sender
        payload["pusher"] = {"name": sender, "email": f"{sender}@example.com"}
        body = json.dumps(payload).encode()
        sig = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
        headers = {"X-GitHub-Event": "push", "X-GitHub-Delivery": str(uuid.uuid4()), "X-Hub-Signature-256": sig,
                   "Content-Type": "application/json"}
        return httpx.post(f"{self.bot.url}/webhooks/github", content=body, headers=headers, timeout=30)

    async def prepare(self, title: str, files: dict[str, str], who: str = "ann") -> tuple[str, str]:
        """A subtask claimed by ``who``, a clone of the forge's main, ``files`` committed: (sha, branch)."""
        sub, _ = await self.db.subtasks.create_subtask(actor_id=None, title=title)
        claim = await self.db.subtasks.claim(agent_id=self.agents[who])
        assert claim is not None and claim.id == sub.id
        wt = self.work / title.replace(" ", "-")
        assert self.forge.bare_repo is not None
        git(["clone", "-q", str(self.forge.bare_repo), str(wt)], self.work)  # the agent pushes to GitHub itself
        return commit(wt, files), f"refs/heads/subtasks/{sub.id}/v{claim.claim_version}"

    async def land(self, title: str, files: dict[str, str]) -> PostedStatus:
        sha, branch = await self.prepare(title, files)
        return self.push(sha, branch, self.work / title.replace(" ", "-"))

    def push(self, sha: str, branch: str, wt: Path, sender: str = "ann-gh", *,
             meanwhile: Callable[[], bool] | None = None) -> PostedStatus:
        """Push and announce; the final status (``meanwhile`` is asked until it says True, while waiting)."""
        git(["push", "-q", "origin", f"HEAD:{branch}"], wt)
        r = self.deliver(branch, sha, sender)
        assert r.status_code == 202, r.text
        deadline = time.monotonic() + 90
        while meanwhile is not None and not meanwhile():
            assert time.monotonic() < deadline, "what was asked for meanwhile never came"
            time.sleep(0.2)
        while time.monotonic() < deadline:
            got = self.forge.statuses(sha)
            if got and got[-1].state in ("success", "failure", "error"):
                return got[-1]
            time.sleep(0.1)
        raise AssertionError(f"no final status for {sha[:12]}: {self.forge.statuses(sha)}\n"
                             + self.bot.log.read_text()[-3000:])


@pytest.fixture
async def app_fleet(e2e_db: Database, e2e_db_url: str, forge: ForgeStandin, keys: tuple[str, str], tmp_path: Path,
                    monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> AsyncIterator[AppFleet]:
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)  # nothing but the App authenticates
    monkeypatch.setenv(KEY_ENV, keys[0])
    monkeypatch.setenv("MERGEBOT_WEBHOOK_SECRET", SECRET)
    agents = {}
    for name in ("ann", "bob"):
        a, _ = await e2e_db.agents.add_agent(name=name, role=Role.AGENT)
        await e2e_db.forge.link(forge="github", login=f"{name}-gh", agent_id=a.id)
        agents[name] = a.id
    _, root = await e2e_db.agents.add_agent(name="root", role=Role.ADMIN)
    data = tmp_path / "data"
    settings = forge_settings("github", "acme/calc", api_url=forge.url, git_url=f"{forge.url}/acme/calc.git",
                              app_id=APP_ID, app_key_env=KEY_ENV)
    await add_repo(e2e_db, repos_root(data), name="calc", source=None, rules=Rules.of(verifier_command=check_command(),
                   verifier_timeout_s=60), forge=settings)  # the mirror is cloned over HTTP with a minted token
    assert len(forge.minted) == 1 and forge.git_requests[-1][1] == forge.minted[0]
    bot = BotProcess(e2e_db_url, data, MERGEBOT_WEBHOOK_SECRET=SECRET, **bot_env(request)).start()
    (tmp_path / "work").mkdir()
    try:
        yield AppFleet(bot, e2e_db, forge, tmp_path / "work", agents, root)
    finally:
        bot.stop()


async def test_a_landing_authenticates_as_the_app_and_renews_after_a_401(app_fleet: AppFleet) -> None:
    f, forge = app_fleet, app_fleet.forge
    status = await f.land("subtract", {"calc.py": "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n"
                                                  "    return a - b\n"})
    assert status.state == "success", status
    bots = forge.minted[1:]  # the first was the test's own, cloning the mirror
    assert len(bots) == 1, forge.minted
    pushes = [(what, token) for what, token in forge.git_requests if "git-receive-pack" in what]
    assert pushes and all(token == bots[0] for _, token in pushes), pushes  # the landing push used the minted token
    posts = [r for r in forge.requests if "/statuses/" in r.path and r.method == "POST"]
    assert posts and all(r.headers["authorization"].split()[-1] == bots[0] for r in posts)
    landed = (await f.db.landing.landed(repo="calc"))[0]
    assert git(["rev-parse", "refs/heads/main"], forge.bare_repo).stdout.strip() == landed.merged_sha

    forge.revoke_tokens()  # as if it expired early, or was revoked: the next calls are refused with 401 once
    status = await f.land("multiply", {"mul.py": "def mul(a, b):\n    return a * b\n"})
    assert status.state == "success", status
    assert len(forge.minted) == 3, forge.minted  # one renewal, shared by git and the API
    fresh = forge.minted[-1]
    refused = [what for what, token in forge.git_requests if token == bots[0]]
    assert refused, forge.git_requests  # git was refused with the stale token, then ...
    pushes = [token for what, token in forge.git_requests if "git-receive-pack" in what]
    assert pushes[-1] == fresh  # ... the second landing's push carried the renewed one
    assert git(["rev-parse", "refs/heads/main"], forge.bare_repo).stdout.strip() == \
        (await f.db.landing.landed(repo="calc"))[0].merged_sha
    # the tokens are secrets: no landed record, status or log line shows one
    log = f.bot.log.read_text()
    assert not [t for t in forge.minted if t in log]
    assert not [s for s in forge.statuses(status.sha) if any(t in (s.description or "") for t in forge.minted)]


def final_check_run(forge: ForgeStandin, sha: str, timeout: float = 60, name: str = "mergebot"
                    ) -> list[dict[str, Any]]:
    """The bodies the one check run ``name`` of ``sha`` was sent, once it is completed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        runs = {i: b for i, b in forge.check_runs(sha).items() if b[0]["name"] == name}
        if runs and next(iter(runs.values()))[-1].get("status") == "completed":
            assert len(runs) == 1, runs  # one check run per candidate, updated, never a second
            return next(iter(runs.values()))
        time.sleep(0.1)
    raise AssertionError(f"no completed check run for {sha[:12]}: {forge.check_runs(sha)}")


async def test_a_pull_request_s_check_run_follows_its_candidate(app_fleet: AppFleet) -> None:
    """The check run on the pull request's head commit: created as the candidate is queued, moved to in_progress
    and completed, titled with the verdict's line, linked to the candidate's page; a failing test is annotated at
    its file and line with the next step in the summary, and a conflict at each region."""
    f, forge = app_fleet, app_fleet.forge
    status = await f.land("subtract", {"calc.py": "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n"
                                                  "    return a - b\n"})
    assert status.state == "success"
    sent = final_check_run(forge, status.sha)
    assert sent[0]["head_sha"] == status.sha and sent[0]["name"] == "mergebot"
    order = ["queued", "in_progress", "completed"]
    seen = [b["status"] for b in sent]
    assert seen == sorted(seen, key=order.index) and seen[-1] == "completed", seen  # it only moves forward
    landed = (await f.db.landing.landed(repo="calc"))[0]
    [cand] = [c for c in await f.db.landing.candidates(repo="calc") if c["sha"] == status.sha]
    last = sent[-1]
    assert last["conclusion"] == "success" and last["external_id"] == str(cand["id"])
    assert last["details_url"].endswith(f"/ui/candidates/{cand['id']}")
    assert last["output"]["title"] == f"landed as {landed.merged_sha[:12]}: it is on main", last["output"]
    assert "**landed**" in last["output"]["summary"] and "**Cost:** 1 verifier run" in last["output"]["summary"]
    # main's new commit gets one of its own, completed as main's check on it went
    on_main = final_check_run(forge, landed.merged_sha, name="mergebot (main)")[-1]
    assert on_main["conclusion"] == "success" and on_main["output"]["title"] == "main passes its check here"
    assert on_main["details_url"].endswith(f"/ui/landed/{landed.id}")

    # a failing test: failure, annotated at the test's file and line, the next step in the summary
    status = await f.land("break add", {"calc.py": "def add(a, b):\n    return a - b\n"})
    assert status.state == "failure"
    last = final_check_run(forge, status.sha)[-1]
    assert last["conclusion"] == "failure" and "check_failed" in last["output"]["summary"]
    assert "**Next:**" in last["output"]["summary"] and "assert" in last["output"].get("text", "")
    [note] = [a for a in last["output"]["annotations"] if a["title"] == "failing test"]
    assert (note["path"], note["start_line"], note["annotation_level"]) == ("tests/test_calc.py", 4, "failure"), note

    # a conflict: each region annotated where it starts
    ann_sha, ann_branch = await f.prepare("ann notes", {"notes.txt": "line 1\nANN\nline 3\n"})
    bob_sha, bob_branch = await f.prepare("bob notes", {"notes.txt": "line 1\nBOB\nline 3\n"}, who="bob")
    assert f.push(ann_sha, ann_branch, f.work / "ann-notes").state == "success"
    assert f.push(bob_sha, bob_branch, f.work / "bob-notes", sender="bob-gh").state == "failure"
    last = final_check_run(forge, bob_sha)[-1]
    assert last["conclusion"] == "failure" and "conflict" in last["output"]["summary"]
    [note] = last["output"]["annotations"]
    assert (note["path"], note["start_line"], note["title"]) == ("notes.txt", 2, "conflict"), note


async def test_a_rate_limit_holds_the_outbox_until_it_resets_and_the_newest_state_goes_out(
        app_fleet: AppFleet) -> None:
    """A 403 past GitHub's rate limit (``X-RateLimit-Reset``): nothing more goes to GitHub until the reset, the
    landing itself is not held up, and then only the newest state of each status and check run is sent."""
    f, forge = app_fleet, app_fleet.forge
    assert (await f.land("warm up", {"w.txt": "w\n"})).state == "success"  # the token is minted: calls only now
    before = len(forge.requests)
    reset = forge.rate_limit_next(1, reset_in=8.0)
    sha, branch = await f.prepare("subtract", {"calc.py": "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n"
                                                         "    return a - b\n"})
    shown: list[str] = []

    def outbox_shown() -> bool:  # the queue page says what waits, and why, while the limit holds
        page = f.page("/ui/queue")
        cell = page.split('id="outbox-calc">', 1)[-1].split("</td>", 1)[0]
        shown.append(cell)
        return "rate limit" in cell and "the oldest for" in cell

    status = f.push(sha, branch, f.work / "subtract", meanwhile=outbox_shown)
    assert status.state == "success"
    assert f.page("/ui/queue").split('id="outbox-calc">', 1)[-1].startswith("none"), shown[-1]
    calls = forge.requests[before:]
    [limited] = [r for r in calls if r.status == 403]
    landed = next(r for r in await f.db.landing.landed(repo="calc") if r.candidate_sha == sha)
    assert landed.landed_at.timestamp() < reset  # the landing did not wait for GitHub
    api = [r for r in calls if "/statuses/" in r.path or "/check-runs" in r.path]
    held = [(r.method, r.path, round(r.at - limited.at, 2)) for r in api if limited.at < r.at < reset - 0.2]
    assert held == [], held  # nothing was sent to GitHub while its limit was spent
    after = [r for r in api if r.at >= reset - 0.2 and r.method == "POST" and r.path.endswith(f"/statuses/{sha}")]
    assert [r.json["state"] for r in after] == ["success"], after  # the pending ones before it were dropped
    last = final_check_run(forge, sha)[-1]
    assert last["conclusion"] == "success"



def pull_event(f: AppFleet, number: int, branch: str, sha: str, action: str, sender: str = "ann-gh") -> None:
    """A signed ``pull_request`` delivery for pull request ``number`` from ``branch`` at ``sha`` into main."""
    pr: dict[str, Any] = json.loads((PAYLOADS / "github_pull_request_synchronize.json").read_bytes())
    pr["action"], pr["number"], pr["pull_request"]["number"] = action, number, number
    pr["pull_request"]["head"].update(ref=branch.removeprefix("refs/heads/"), sha=sha)
    pr["pull_request"]["base"]["ref"] = "main"
    pr["pull_request"]["head"]["repo"]["full_name"] = pr["pull_request"]["base"]["repo"]["full_name"] = "acme/calc"
    pr["repository"]["full_name"] = "acme/calc"
    pr["sender"]["login"] = sender
    body = json.dumps(pr).encode()
    sig = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    r = httpx.post(f"{f.bot.url}/webhooks/github", content=body, timeout=30,
                   headers={"X-GitHub-Event": "pull_request", "X-GitHub-Delivery": str(uuid.uuid4()),
                            "X-Hub-Signature-256": sig, "Content-Type": "application/json"})
    assert r.status_code == 202, r.text


def the_comment(forge: ForgeStandin, number: int, says: str, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = forge.comments(number)
        if found and says in found[-1]["body"]:
            assert len(found) == 1, found  # one comment, edited: never a second
            return found[0]
        time.sleep(0.1)
    raise AssertionError(f"no comment on #{number} saying {says!r}: {forge.comments(number)}")


async def test_one_living_comment_per_pull_request_across_pushes_and_a_restart(app_fleet: AppFleet) -> None:
    """A pull request's first candidate is rejected, the bot restarts (and, as if it crashed between posting the
    comment and recording its id, has forgotten which comment is its), and the second candidate lands: one comment
    all along, edited from the rejection with its next step to "landed" with the landed record's link, the earlier
    candidate folded into one line."""
    f, forge = app_fleet, app_fleet.forge
    broken, branch = await f.prepare("subtract", {"calc.py": "def add(a, b):\n    return a - b\n"})
    wt = f.work / "subtract"
    git(["push", "-q", "origin", f"HEAD:{branch}"], wt)
    forge.add_pull("acme", "calc", 7, branch.removeprefix("refs/heads/"), broken, "main")
    pull_event(f, 7, branch, broken, "opened")  # the pull request announces the push: one candidate
    first = the_comment(forge, 7, "**Rejected** (`check_failed`)")
    assert "<!-- mergebot:acme/calc#7 -->" in first["body"] and "**Next:**" in first["body"]
    assert "tests/test_calc.py::test_add" in first["body"]

    f.bot.stop()
    async with f.db.pool.connection() as conn:  # the id is lost: the marker must find the comment again
        await conn.execute("UPDATE forge_pulls SET comment_id = NULL, sent_digest = NULL")
    f.bot.start()
    fixed = commit(wt, {"calc.py": "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"})
    git(["push", "-q", "origin", f"HEAD:{branch}"], wt)
    pull_event(f, 7, branch, fixed, "synchronize")
    final = the_comment(forge, 7, "**Landed** on `main`")
    landed = next(r for r in await f.db.landing.landed(repo="calc") if r.candidate_sha == fixed)
    assert f"/ui/landed/{landed.id})" in final["body"] and landed.merged_sha[:12] in final["body"]
    cands = {c["sha"]: c["id"] for c in await f.db.landing.candidates(repo="calc")}
    assert f"candidate {cands[broken]} `{broken[:12]}`: rejected (`check_failed`)" in final["body"]
    assert final["edits"] >= 1 and len(forge.comments(7)) == 1
    pull = next(p for p in await f.db.forge.pulls(repo="calc") if p.number == 7)
    assert pull.comment_id == final["id"]


def comment_event(f: AppFleet, number: int, text: str, sender: str, delivery: str | None = None) -> httpx.Response:
    """A signed ``issue_comment`` delivery: ``sender`` wrote ``text`` on pull request ``number``."""
    payload = {"action": "created", "repository": {"full_name": "acme/calc", "name": "calc"},
               "issue": {"number": number, "pull_request": {"url": f"{f.forge.url}/repos/acme/calc/pulls/{number}"}},
               "comment": {"id": 9000 + number, "body": text, "user": {"login": sender}},
               "sender": {"login": sender, "id": 1}}
    body = json.dumps(payload).encode()
    sig = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    return httpx.post(f"{f.bot.url}/webhooks/github", content=body, timeout=30,
                      headers={"X-GitHub-Event": "issue_comment", "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
                               "X-Hub-Signature-256": sig, "Content-Type": "application/json"})


async def test_commands_in_comments_are_answered_and_only_the_allowed_change_anything(app_fleet: AppFleet) -> None:
    f, forge = app_fleet, app_fleet.forge
    lead, _ = await f.db.agents.add_agent(name="lee", role=Role.LEAD)
    await f.db.forge.link(forge="github", login="lee-gh", agent_id=lead.id)
    broken, branch = await f.prepare("break add", {"calc.py": "def add(a, b):\n    return a - b\n"})
    git(["push", "-q", "origin", f"HEAD:{branch}"], f.work / "break-add")
    pull_event(f, 8, branch, broken, "opened")
    the_comment(forge, 8, "**Rejected** (`check_failed`)")
    sid = int(branch.split("/")[3])

    async def candidates() -> list[dict[str, Any]]:
        return [c for c in await f.db.landing.candidates(repo="calc") if c["sha"] == broken]

    # a stranger's retry and an owner's priority are refused in the comment, and change nothing
    assert comment_event(f, 8, "@mergebot retry", "eve-gh").status_code == 202
    the_comment(forge, 8, "@eve-gh `@mergebot retry` refused: 'eve-gh' is not linked to a Mergebot agent")
    assert comment_event(f, 8, "thanks!\n@mergebot priority 5", "ann-gh").status_code == 202
    the_comment(forge, 8, "`@mergebot priority` is for leads and admins only")
    assert len(await candidates()) == 1 and (await f.db.subtasks.get_subtask(sid)).priority == 0

    # the owner's retry verifies the same commit again, once however often the delivery comes (the queue held, so
    # the new candidate waits while babysitters retry it)
    await f.db.repos.set_paused(repo="calc", paused=True, reason="holding the queue")
    delivery = str(uuid.uuid4())
    assert comment_event(f, 8, "@mergebot retry", "ann-gh", delivery).status_code == 202
    assert comment_event(f, 8, "@mergebot retry", "ann-gh", delivery).json()["duplicate"] is True
    again = the_comment(forge, 8, "`@mergebot retry`: candidate")
    assert len(await candidates()) == 2 and f"verifies `{broken[:12]}` again" in again["body"]
    # while that commit waits, a retry (the owner's, or a lead's) queues nothing: it names the candidate and the wait
    waiting = (await candidates())[0]["id"]
    for who in ("ann-gh", "lee-gh"):
        assert comment_event(f, 8, "@mergebot retry", who).status_code == 202
        said = the_comment(forge, 8, f"@{who} `@mergebot retry`: already queued: `{broken[:12]}` is candidate "
                                     f"{waiting}")
        assert f"`mergebot wait {sid} --commit {broken[:12]}`" in said["body"]
    assert len(await candidates()) == 2
    await f.db.repos.set_paused(repo="calc", paused=False, reason=None)
    the_comment(forge, 8, "**Rejected** (`check_failed`)")  # the second run's verdict, in the same comment

    # why, from anyone: the whole verdict with the log's tail; a lead's priority moves the subtask
    assert comment_event(f, 8, "@mergebot why", "eve-gh").status_code == 202
    why = the_comment(forge, 8, "The whole verdict")
    assert "Log (its tail)" in why["body"] and "assert" in why["body"]
    assert comment_event(f, 8, "@mergebot priority 5", "lee-gh").status_code == 202
    the_comment(forge, 8, "has priority 5 now")
    assert (await f.db.subtasks.get_subtask(sid)).priority == 5
    assert len(forge.comments(8)) == 1


@pytest.mark.bot_env(MERGEBOT_PAUSE_AT=f"after_intent:{HOLD}")  # the queue holds there while HOLD exists
async def test_a_lead_s_cancel_comment_under_a_landing_is_refused_and_the_landing_goes_on(app_fleet: AppFleet) -> None:
    """``@mergebot cancel`` from a lead while the pull request's candidate is being landed (its intent written, main
    about to move): refused in the comment with what to do instead, the subtask not cancelled, and the landing goes
    on. The queue is held at that step (its own thread: the bot answers webhooks meanwhile)."""
    f, forge = app_fleet, app_fleet.forge
    lead, _ = await f.db.agents.add_agent(name="lee", role=Role.LEAD)
    await f.db.forge.link(forge="github", login="lee-gh", agent_id=lead.id)
    HOLD.touch()
    try:
        sha, branch = await f.prepare("double", {"double.py": "def double(a):\n    return 2 * a\n"})
        git(["push", "-q", "origin", f"HEAD:{branch}"], f.work / "double")
        pull_event(f, 12, branch, sha, "opened")
        reached = Path(f"{HOLD}.reached")
        deadline = time.monotonic() + 90
        while not reached.exists():
            assert time.monotonic() < deadline, "the landing never reached its intent\n" + f.bot.log.read_text()[-3000:]
            time.sleep(0.1)
        sid = int(branch.split("/")[3])
        [cand] = [c for c in await f.db.landing.candidates(repo="calc") if c["sha"] == sha]
        assert cand["status"] == "landing", cand

        assert comment_event(f, 12, "@mergebot cancel", "lee-gh").status_code == 202
        said = the_comment(forge, 12, "`@mergebot cancel`")
        assert f"subtask {sid} cannot be cancelled right now: its candidate {cand['id']} is being landed" in \
            said["body"], said["body"]
        assert f"mergebot wait {sid}" in said["body"]
        assert (await f.db.subtasks.get_subtask(sid)).status == "submitted"
    finally:
        HOLD.unlink(missing_ok=True)
        Path(f"{HOLD}.reached").unlink(missing_ok=True)

    async def landed() -> bool:
        return (await f.db.subtasks.get_subtask(sid)).status == "landed"

    deadline = time.monotonic() + 90
    while not await landed():
        assert time.monotonic() < deadline, f.bot.log.read_text()[-3000:]
        time.sleep(0.2)
    assert git(["rev-parse", "refs/heads/main"], forge.bare_repo).stdout.strip() == \
        (await f.db.landing.landed(repo="calc"))[0].merged_sha
