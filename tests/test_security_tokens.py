"""Security boundaries of tokens and secrets, every test of which fails if its boundary breaks.

Tokens are stored only as SHA-256 (no plaintext token anywhere in the database), compared with
``hmac.compare_digest`` after a lookup by hash, revocable at once for the API and for git; no token or webhook
secret in the server's log.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json

import httpx
import pytest

from mergebot import agent as agent_mod
from mergebot import auth
from mergebot.auth import Role
from mergebot.db.database import Database
from mergebot.db.queries import QUERIES
from mergebot.rules import Rules
from mergebot.web import session as web_session
from tests.support.bot import Fleet, commit, git
from tests.support.security import ZERO, Api, basic, refs_of

WEBHOOK_SECRET = "whsec-never-logged-Zq81xP"



# ============================================================================================ tokens

async def test_tokens_are_hashed_looked_up_by_hash_and_compared_in_constant_time(
        roles_api: Api, db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    async with db.pool.connection() as conn:
        rows = await (await conn.execute("SELECT name, token_hash FROM agents")).fetchall()
    stored = {name: bytes(h) for name, h in rows}
    for name, token in roles_api.tokens.items():
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
    assert (await db.agents.authenticate(roles_api.tokens["ann"])) is not None
    assert compared == [(stored["ann"], stored["ann"])]
    assert await db.agents.authenticate(roles_api.tokens["ann"] + "x") is None


# The bot runs with a webhook secret in its environment and every log line on.
@pytest.mark.bot_env(MERGEBOT_WEBHOOK_SECRET=WEBHOOK_SECRET, MERGEBOT_LOG_LEVEL="debug", MERGEBOT_ACCESS_LOG="1",
                     MERGEBOT_LOG_FORMAT="json")
async def test_no_plaintext_secret_in_the_database_or_the_log(fleet: Fleet) -> None:
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
    await fleet.db.repos.create_repo(name="mirror", root_sha=ZERO, rules=Rules.of(target_branch="main",
                                     verifier_command="true", verifier_timeout_s=60, protected_paths=[],
                                     max_push_bytes=1 << 20, max_file_bytes=1 << 20),
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
    await fleet.db.repos.set_paused(repo="demo", paused=True, reason="hold")
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
