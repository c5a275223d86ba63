"""End to end in forge mode: a real ``mergebot serve``, a real bare repository standing in for GitHub's git remote,
the GitHub API stand-in (real response shapes) for statuses and pull requests, and signed webhook deliveries.

An owner's push lands on the forge's main with a success status and the pull request shows merged; an unmapped
sender, a stale claim and a failing check each end with a failure status that says why; a redelivered webhook
lands nothing twice.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import subprocess
import sys
import time
import urllib.parse
import uuid
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from mergebot.auth import Role
from mergebot.db.database import Database
from mergebot.forge.client import GitHubClient
from mergebot.landing.repos import add_repo, forge_settings, repos_root, set_rules
from mergebot.models import Handle
from tests.support.bot import BotProcess, check_command, commit, forge_remote, git, make_project
from tests.support.forge_standin import ForgeStandin, PostedStatus

PAYLOADS = Path(__file__).parent / "forge_payloads"
SECRET = "webhook-secret-for-tests"
TOKEN = "ghp_standin_token"
ZERO = "0" * 40


@dataclass
class ForgeFleet:
    bot: BotProcess
    db: Database
    forge: ForgeStandin
    remote: Path
    work: Path
    agents: dict[str, int]

    def clone(self, name: str) -> Path:
        wt = self.work / name
        git(["clone", "-q", str(self.remote), str(wt)], self.work)
        return wt

    def forge_main(self, remote: Path | None = None) -> str:
        return git(["rev-parse", "refs/heads/main"], remote or self.remote).stdout.strip()

    def deliver(self, ref: str, before: str, after: str, sender: str, *, delivery: str | None = None,
                body: bytes | None = None, event: str = "push", form: bool = False,
                to: BotProcess | None = None) -> httpx.Response:
        if body is None:
            payload: dict[str, Any] = json.loads((PAYLOADS / "github_push_branch_update.json").read_bytes())
            payload.update(ref=ref, before=before, after=after, created=before == ZERO, deleted=False, forced=False)
            payload["repository"]["full_name"] = "acme/calc"
            payload["sender"]["login"] = sender
            payload["pusher"] = {"name": sender, "email": f"{sender}@example.com"}
            body = json.dumps(payload).encode()
        if form:  # GitHub's default for a new webhook: the JSON as a form's payload field, signed as sent
            body = b"payload=" + urllib.parse.quote_plus(body.decode()).encode()
        sig = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
        headers = {"X-GitHub-Event": event, "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
                   "X-Hub-Signature-256": sig,
                   "Content-Type": "application/x-www-form-urlencoded" if form else "application/json"}
        return httpx.post(f"{(to or self.bot).url}/webhooks/github", content=body, headers=headers, timeout=30)

    def wait_status(self, sha: str, done: Callable[[list[PostedStatus]], bool],
                    timeout: float = 90) -> list[PostedStatus]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = self.forge.statuses(sha)
            if got and done(got):
                return got
            time.sleep(0.1)
        raise AssertionError(f"no final status for {sha[:12]}; got {self.forge.statuses(sha)}\n"
                             + self.bot.log.read_text()[-3000:])


def final(statuses: list[PostedStatus]) -> bool:
    return statuses[-1].state in ("success", "failure", "error")


@pytest.fixture
async def forge_fleet(e2e_db: Database, e2e_db_url: str, tmp_path: Path,
                      monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[ForgeFleet]:
    db = e2e_db
    remote = forge_remote(make_project(tmp_path / "src"), tmp_path / "forge" / "calc.git")
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    monkeypatch.setenv("GITEA_TOKEN", TOKEN)
    monkeypatch.setenv("MERGEBOT_WEBHOOK_SECRET", SECRET)
    agents = {}
    for name in ("ann", "bob"):
        a, _ = await db.agents.add_agent(name=name, role=Role.AGENT)
        agents[name] = a.id
    await db.forge.link(forge="github", login="Ann-GH", agent_id=agents["ann"])
    with ForgeStandin(token=TOKEN, bare_repo=remote) as forge:
        data = tmp_path / "data"
        await add_repo(db, repos_root(data), name="calc", source=None, verifier_command=check_command(),
                       verifier_timeout_s=60, protected_paths=["ci/"],
                       forge=forge_settings("github", "acme/calc", api_url=forge.url, git_url=str(remote)))
        bot = BotProcess(e2e_db_url, data, GITHUB_TOKEN=TOKEN, GITEA_TOKEN=TOKEN,
                         MERGEBOT_WEBHOOK_SECRET=SECRET).start()
        (tmp_path / "work").mkdir()
        try:
            yield ForgeFleet(bot, db, forge, remote, tmp_path / "work", agents)
        finally:
            bot.stop()


async def test_owner_push_lands_on_the_forge_with_success_and_merges_the_pull(forge_fleet: ForgeFleet) -> None:
    f = forge_fleet
    sub, _ = await f.db.subtasks.create_subtask(actor_id=None, title="subtract")
    claim = await f.db.subtasks.claim(agent_id=f.agents["ann"])
    assert claim is not None and claim.id == sub.id
    before = f.forge_main()
    wt = f.clone("ann")
    sha = commit(wt, {"calc.py": "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"})
    branch = f"refs/heads/subtasks/{sub.id}/v{claim.claim_version}"
    git(["push", "-q", "origin", f"HEAD:{branch}"], wt)
    f.forge.add_pull("acme", "calc", 7, f"subtasks/{sub.id}/v{claim.claim_version}", sha, "main")
    client = GitHubClient(TOKEN, base_url=f.forge.url)
    assert not client.pull_merged("acme/calc", 7)

    delivery = str(uuid.uuid4())
    # Paused, so the queued candidate's status is the newest while we look: the outbox sends only a commit's
    # newest status, and on a slow machine a quick landing would otherwise overtake it.
    await f.db.landing.set_paused(repo="calc", paused=True, reason="reading the queued status")
    r = f.deliver(branch, ZERO, sha, "ann-gh", delivery=delivery)  # logins are case-insensitive
    assert r.status_code == 202, r.text
    assert "queued as candidate" in r.json()["outcome"]
    queued = f.wait_status(sha, lambda got: got[-1].state == "pending")
    assert queued[-1].description == "queued for landing", queued
    await f.db.landing.set_paused(repo="calc", paused=False, reason=None)
    statuses = f.wait_status(sha, final)
    assert statuses[-1].state == "success", statuses
    assert statuses[0].state == "pending" and statuses[-1].context == "mergebot"
    assert "/ui/candidates/" in (statuses[-1].target_url or "")  # the candidate's page

    landed = (await f.db.landing.landed(subtask_id=sub.id))[0]
    assert f.forge_main() == landed.merged_sha and landed.base_sha == before
    assert landed.candidate_sha == sha and landed.verifier_result == "pass"
    assert git(["merge-base", "--is-ancestor", sha, "refs/heads/main"], f.remote, check=False).returncode == 0
    assert (statuses[-1].description or "").startswith(f"landed as {landed.merged_sha[:12]}")
    assert client.pull_merged("acme/calc", 7)  # pushing the merge onto main is what closes the PR as merged
    assert (await f.db.subtasks.get_subtask(sub.id)).status == "landed"

    # The same delivery again: answered, nothing done twice.
    posted = len(f.forge.statuses(sha))
    again = f.deliver(branch, ZERO, sha, "ann-gh", delivery=delivery)
    assert again.status_code == 200 and again.json()["duplicate"] is True
    # The pull request's own event announces the same commit: acknowledged, nothing queued twice.
    pr: dict[str, Any] = json.loads((PAYLOADS / "github_pull_request_synchronize.json").read_bytes())
    pr["number"] = pr["pull_request"]["number"] = 7
    pr["pull_request"]["head"].update(ref=f"subtasks/{sub.id}/v{claim.claim_version}", sha=sha)
    pr["pull_request"]["base"]["ref"] = "main"
    pr["pull_request"]["head"]["repo"]["full_name"] = pr["pull_request"]["base"]["repo"]["full_name"] = "acme/calc"
    pr["repository"]["full_name"] = "acme/calc"
    pr["sender"]["login"] = "ann-gh"
    other = f.deliver(branch, ZERO, sha, "ann-gh", body=json.dumps(pr).encode(), event="pull_request")
    assert other.status_code == 202 and "already" in other.json()["outcome"], other.text
    time.sleep(1.0)
    assert len(await f.db.landing.landed(subtask_id=sub.id)) == 1
    assert len(f.forge.statuses(sha)) == posted
    assert f.forge_main() == landed.merged_sha


async def test_a_landing_that_edits_a_test_names_it_on_the_forge(forge_fleet: ForgeFleet) -> None:
    """A change that edits an existing test lands under ``--old-tests flag`` (the default), and the commit status a
    person reads on the pull request names the test, as the landed record does."""
    f = forge_fleet
    sub, _ = await f.db.subtasks.create_subtask(actor_id=None, title="a stricter test")
    claim = await f.db.subtasks.claim(agent_id=f.agents["ann"])
    assert claim is not None and claim.id == sub.id
    wt = f.clone("ann")
    sha = commit(wt, {"tests/test_calc.py": "from calc import add\n\n\ndef test_add():\n"
                                            "    assert add(2, 2) == 4 and add(1, 2) == 3\n"})
    branch = f"refs/heads/subtasks/{sub.id}/v{claim.claim_version}"
    git(["push", "-q", "origin", f"HEAD:{branch}"], wt)
    r = f.deliver(branch, ZERO, sha, "ann-gh")
    assert r.status_code == 202, r.text
    statuses = f.wait_status(sha, final)
    assert statuses[-1].state == "success", statuses
    landed = (await f.db.landing.landed(subtask_id=sub.id))[0]
    assert landed.tests_changed == ["tests/test_calc.py::test_add"]
    assert (statuses[-1].description or "") == (f"landed as {landed.merged_sha[:12]}; "
                                                  "edits existing tests: tests/test_calc.py::test_add")


async def test_a_form_encoded_delivery_lands_like_its_json_twin(forge_fleet: ForgeFleet) -> None:
    f = forge_fleet
    sub, _ = await f.db.subtasks.create_subtask(actor_id=None, title="multiply")
    claim = await f.db.subtasks.claim(agent_id=f.agents["ann"])
    assert claim is not None and claim.id == sub.id
    wt = f.clone("ann")
    sha = commit(wt, {"calc.py": "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n"})
    branch = f"refs/heads/subtasks/{sub.id}/v{claim.claim_version}"
    git(["push", "-q", "origin", f"HEAD:{branch}"], wt)

    # A text/plain body (signed correctly) is refused before anything is recorded.
    body = (PAYLOADS / "github_push_branch_update.json").read_bytes()
    sig = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    r = httpx.post(f"{f.bot.url}/webhooks/github", content=body, headers={
        "X-GitHub-Event": "push", "X-GitHub-Delivery": "plain", "X-Hub-Signature-256": sig,
        "Content-Type": "text/plain"})
    assert r.status_code == 415 and "application/x-www-form-urlencoded" in r.json()["error"], r.text
    assert await f.db.forge.deliveries() == []

    r = f.deliver(branch, ZERO, sha, "ann-gh", delivery="form-1", form=True)
    assert r.status_code == 202 and "queued as candidate" in r.json()["outcome"], r.text
    assert f.wait_status(sha, final)[-1].state == "success"
    landed = (await f.db.landing.landed(subtask_id=sub.id))[0]
    assert landed.candidate_sha == sha and f.forge_main() == landed.merged_sha
    again = f.deliver(branch, ZERO, sha, "ann-gh", delivery="form-1", form=True)  # redelivered: nothing twice
    assert again.status_code == 200 and again.json()["duplicate"] is True
    assert [d.delivery_id for d in await f.db.forge.deliveries()] == ["form-1"]


async def test_unmapped_stale_and_failing_each_end_in_failure_with_the_reason(forge_fleet: ForgeFleet) -> None:
    f = forge_fleet
    s1, _ = await f.db.subtasks.create_subtask(actor_id=None, title="one")
    s2, _ = await f.db.subtasks.create_subtask(actor_id=None, title="two")
    c1 = await f.db.subtasks.claim(agent_id=f.agents["ann"])
    c2 = await f.db.subtasks.claim(agent_id=f.agents["bob"])
    assert c1 is not None and c2 is not None and (c1.id, c2.id) == (s1.id, s2.id)
    start = f.forge_main()

    # bob's login is not linked to his agent: recorded, a failure status, never landed
    bob = f.clone("bob")
    bob_sha = commit(bob, {"b.txt": "b\n"})
    bob_ref = f"refs/heads/subtasks/{s2.id}/v1"
    git(["push", "-q", "origin", f"HEAD:{bob_ref}"], bob)
    r = f.deliver(bob_ref, ZERO, bob_sha, "bob-gh")
    assert r.status_code == 202 and "not linked" in r.json()["outcome"]
    st = f.wait_status(bob_sha, final)
    assert st[-1].state == "failure" and "'bob-gh' is not linked to a Mergebot agent" in (st[-1].description or "")

    # ann pushes for a claim version she does not hold
    ann = f.clone("ann")
    stale_sha = commit(ann, {"a.txt": "a\n"})
    stale_ref = f"refs/heads/subtasks/{s1.id}/v9"
    git(["push", "-q", "origin", f"HEAD:{stale_ref}"], ann)
    r = f.deliver(stale_ref, ZERO, stale_sha, "ann-gh")
    assert r.status_code == 202 and "refused" in r.json()["outcome"]
    st = f.wait_status(stale_sha, final)
    assert st[-1].state == "failure" and "does not exist" in (st[-1].description or ""), st

    # ann's real branch, with a change that breaks the suite
    bad = commit(ann, {"calc.py": "def add(a, b):\n    return a - b\n"})
    ref = f"refs/heads/subtasks/{s1.id}/v1"
    git(["push", "-q", "origin", f"HEAD:{ref}"], ann)
    r = f.deliver(ref, ZERO, bad, "ann-gh")
    assert r.status_code == 202 and "queued" in r.json()["outcome"]
    st = f.wait_status(bad, final)
    assert st[-1].state == "failure" and "gave fail" in (st[-1].description or ""), st

    assert f.forge_main() == start
    assert await f.db.landing.landed() == []
    assert (await f.db.subtasks.get_subtask(s1.id)).status == "running"  # back to its owner with the reason
    assert (await f.db.subtasks.get_subtask(s2.id)).status == "running"


async def test_bad_deliveries_change_nothing(forge_fleet: ForgeFleet) -> None:
    f = forge_fleet
    fs = f.db.forge
    sha = f.forge_main()
    url = f"{f.bot.url}/webhooks/github"
    # unsigned, wrongly signed, for another repository (signed: acknowledged and ignored), a ping
    body = b'{"zen": "hi", "hook_id": 1}'
    r = httpx.post(url, content=body, headers={"X-GitHub-Event": "ping", "X-GitHub-Delivery": "d1"})
    assert r.status_code == 401
    r = httpx.post(url, content=body, headers={"X-GitHub-Event": "ping", "X-GitHub-Delivery": "d1",
                                               "X-Hub-Signature-256": "sha256=" + "0" * 64})
    assert r.status_code == 401
    assert await fs.deliveries() == []
    r = f.deliver("refs/heads/x", ZERO, sha, "ann-gh", body=body.replace(b"hi", b"yo"))
    assert r.status_code == 400  # signed, but a ping's body sent as a push is not a push
    for bad in (b"not json", b'{"a": NaN}', b'{"a": 1, "a": 2}', b"[1]", b"\xff\xfe{}", b"[" * 100_000):
        r = f.deliver("refs/heads/x", ZERO, sha, "ann-gh", body=bad)
        assert r.status_code == 400, (bad[:20], r.text)
    huge = b"{" + b" " * (25 * 1024 * 1024) + b"}"
    r = httpx.post(url, content=huge, headers={"X-GitHub-Event": "push", "X-GitHub-Delivery": "d2",
                                               "X-Hub-Signature-256": "sha256=" + "0" * 64}, timeout=60)
    assert r.status_code == 413
    # same delivery id, another body: refused
    r1 = f.deliver("refs/heads/subtasks/1/v1", ZERO, sha, "nobody", delivery="same-id")
    assert r1.status_code == 202
    r2 = f.deliver("refs/heads/subtasks/1/v1", ZERO, sha, "someone-else", delivery="same-id")
    assert r2.status_code == 409
    kinds = [d.delivery_id for d in await fs.deliveries()]
    assert "d2" not in kinds and "d1" not in kinds
    assert f.forge_main() == sha
    # a Forgejo delivery sent to the GitHub endpoint is told where Forgejo's deliveries go
    fj = {"X-Forgejo-Event": "ping", "X-Forgejo-Delivery": "fj-1", "Content-Type": "application/json",
          "X-Forgejo-Signature": hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()}
    r = httpx.post(url, content=body, headers=fj)
    assert r.status_code == 400 and r.json()["error"].endswith("send it to /webhooks/gitea"), r.text
    # a signed ping is answered; a push for a repository the bot does not manage is acknowledged and ignored
    ping = json.loads((PAYLOADS / "github_ping.json").read_bytes())
    r = f.deliver("", ZERO, sha, "", body=json.dumps(ping).encode(), event="ping")
    assert r.status_code == 200 and r.json()["outcome"] == "pong", r.text
    other: dict[str, Any] = json.loads((PAYLOADS / "github_push_branch_update.json").read_bytes())
    other.update(ref="refs/heads/subtasks/1/v1", before=ZERO, after=sha)
    other["repository"]["full_name"] = "someone/else"
    r = f.deliver("", ZERO, sha, "", body=json.dumps(other).encode())
    assert r.status_code == 202 and "ignored" in r.json()["outcome"], r.text
    # nothing was queued or landed by any of it; the only status is the unmapped sender's failure
    assert await f.db.landing.candidates(repo="calc") == [] and await f.db.landing.landed() == []
    assert {s.state for s in await fs.outbox(repo="calc")} <= {"failure"}


async def test_statuses_survive_forge_outages_and_failed_deliveries_are_redone(forge_fleet: ForgeFleet) -> None:
    f = forge_fleet
    sub, _ = await f.db.subtasks.create_subtask(actor_id=None, title="docs")
    claim = await f.db.subtasks.claim(agent_id=f.agents["ann"])
    assert claim is not None
    wt = f.clone("ann")
    sha = commit(wt, {"README": "docs\n"})
    ref = f"refs/heads/subtasks/{sub.id}/v1"
    git(["push", "-q", "origin", f"HEAD:{ref}"], wt)
    # The forge's git remote is away: the delivery fails with 5xx and is recorded as failed ...
    away = f.remote.with_name("away.git")
    f.remote.rename(away)
    r = f.deliver(ref, ZERO, sha, "ann-gh", delivery="flaky-delivery")
    away.rename(f.remote)
    assert r.status_code == 502, r.text
    failed = [d for d in await f.db.forge.deliveries() if d.delivery_id == "flaky-delivery"]
    assert failed[0].status == "failed" and failed[0].http_status == 502
    assert f.forge.statuses(sha) == [] and await f.db.landing.candidates(subtask_id=sub.id) == []
    # ... and the forge's redelivery of the same id is processed. Its API then fails 4 times in a row: the
    # status is retried in place, then from the outbox with a backoff, and arrives.
    f.forge.fail_next(4, 502)
    r = f.deliver(ref, ZERO, sha, "ann-gh", delivery="flaky-delivery")
    assert r.status_code == 202 and "queued" in r.json()["outcome"], r.text
    st = f.wait_status(sha, lambda s: s[-1].state == "success")
    assert st[-1].state == "success"
    assert len(await f.db.landing.landed(subtask_id=sub.id)) == 1


async def test_odd_refs_never_reach_a_shell(forge_fleet: ForgeFleet, tmp_path: Path) -> None:
    f = forge_fleet
    sha = f.forge_main()
    for ref in ("refs/heads/$(touch pwned)", "refs/heads/-rf", "refs/heads/`touch pwned`",
                "refs/heads/subtasks/1/v1;touch pwned"):
        r = f.deliver(ref, ZERO, sha, "ann-gh")
        assert r.status_code == 202 and "not a subtask branch" in r.json()["outcome"], (ref, r.text)
    assert not list(tmp_path.rglob("pwned")) and not (Path.cwd() / "pwned").exists()
    assert f.bot.proc is not None and f.bot.proc.poll() is None


async def test_a_gitea_repository_lands_through_the_gitea_endpoint(forge_fleet: ForgeFleet) -> None:
    """Gitea: its own signature header (bare hex), X-GitHub-Event sent too, statuses through Gitea's API."""
    f = forge_fleet
    remote = forge_remote(f.remote, f.remote.with_name("gitea-calc.git"))
    await add_repo(f.db, repos_root(f.bot.data_dir), name="gcalc", source=None, verifier_command=check_command(),
                   verifier_timeout_s=60,
                   forge=forge_settings("gitea", "acme/gcalc", url=f.forge.url, git_url=str(remote)))
    await f.db.forge.link(forge="gitea", login="ann", agent_id=f.agents["ann"])
    sub, _ = await f.db.subtasks.create_subtask(actor_id=None, title="gitea work")
    claim = await f.db.subtasks.claim(agent_id=f.agents["ann"])
    assert claim is not None
    wt = f.work / "gitea-ann"
    git(["clone", "-q", str(remote), str(wt)], f.work)
    sha = commit(wt, {"g.txt": "g\n"})
    ref = f"refs/heads/subtasks/{sub.id}/v1"
    git(["push", "-q", "origin", f"HEAD:{ref}"], wt)
    payload: dict[str, Any] = json.loads((PAYLOADS / "gitea_push_branch_update.json").read_bytes())
    payload.update(ref=ref, before=ZERO, after=sha)
    payload["repository"]["full_name"] = "acme/gcalc"
    payload["sender"]["login"] = "ann"
    body = json.dumps(payload).encode()
    headers = {"X-Gitea-Event": "push", "X-GitHub-Event": "push", "X-Gitea-Delivery": str(uuid.uuid4()),
               "X-Gitea-Signature": hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()}
    # sent to the GitHub endpoint it is refused: it is a Gitea delivery
    assert httpx.post(f"{f.bot.url}/webhooks/github", content=body, headers=headers).status_code in (400, 401)
    r = httpx.post(f"{f.bot.url}/webhooks/gitea", content=body, headers=headers, timeout=30)
    assert r.status_code == 202 and "queued" in r.json()["outcome"], r.text
    st = f.wait_status(sha, final)
    assert st[-1].state == "success" and st[-1].forge == "gitea", st
    landed = (await f.db.landing.landed(subtask_id=sub.id))[0]
    assert f.forge_main(remote) == landed.merged_sha


async def test_a_gitea_pull_request_has_one_living_comment_that_answers_commands(forge_fleet: ForgeFleet) -> None:
    """Gitea and Forgejo have no Checks API: the pull request's one comment goes through their issue comments,
    and a command in a comment is answered there."""
    f = forge_fleet
    remote = forge_remote(f.remote, f.remote.with_name("gitea-calc.git"))
    await add_repo(f.db, repos_root(f.bot.data_dir), name="gcalc", source=None, verifier_command=check_command(),
                   verifier_timeout_s=60,
                   forge=forge_settings("gitea", "acme/gcalc", url=f.forge.url, git_url=str(remote)))
    await f.db.forge.link(forge="gitea", login="ann", agent_id=f.agents["ann"])
    sub, _ = await f.db.subtasks.create_subtask(actor_id=None, title="gitea work")
    claim = await f.db.subtasks.claim(agent_id=f.agents["ann"])
    assert claim is not None
    wt = f.work / "gitea-ann"
    git(["clone", "-q", str(remote), str(wt)], f.work)
    sha = commit(wt, {"calc.py": "def add(a, b):\n    return a - b\n"})
    ref = f"subtasks/{sub.id}/v1"
    git(["push", "-q", "origin", f"HEAD:refs/heads/{ref}"], wt)

    def gitea(event: str, payload: dict[str, Any]) -> httpx.Response:
        body = json.dumps(payload).encode()
        return httpx.post(f"{f.bot.url}/webhooks/gitea", content=body, timeout=30, headers={
            "X-Gitea-Event": event, "X-Gitea-Delivery": str(uuid.uuid4()),
            "X-Gitea-Signature": hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()})

    pr: dict[str, Any] = json.loads((PAYLOADS / "gitea_pull_request_opened.json").read_bytes())
    pr["number"] = pr["pull_request"]["number"] = 3
    pr["pull_request"]["head"].update(ref=ref, sha=sha, label=ref)
    pr["pull_request"]["base"]["ref"] = "main"
    pr["pull_request"]["head"]["repo"]["full_name"] = pr["pull_request"]["base"]["repo"]["full_name"] = "acme/gcalc"
    pr["repository"]["full_name"] = "acme/gcalc"
    pr["sender"]["login"] = "ann"
    assert gitea("pull_request", pr).status_code == 202

    def comment_says(text: str) -> dict[str, Any]:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            got = f.forge.comments(3)
            if got and text in got[-1]["body"]:
                assert len(got) == 1 and got[0]["forge"] == "gitea", got
                return got[0]
            time.sleep(0.1)
        raise AssertionError(f"no comment saying {text!r}: {f.forge.comments(3)}")

    first = comment_says("**Rejected** (`check_failed`)")
    assert "<!-- mergebot:acme/gcalc#3 -->" in first["body"]
    note = {"action": "created", "is_pull": True, "repository": pr["repository"], "sender": {"login": "ann"},
            "issue": {"number": 3, "pull_request": {"merged": False}},
            "comment": {"id": 77, "body": "@mergebot why", "user": {"login": "ann"}}}
    assert gitea("issue_comment", note).status_code == 202
    assert "Log (its tail)" in comment_says("`@mergebot why`: the whole verdict is below.")["body"]


async def test_cli_adds_a_github_repository_and_links_a_login(e2e_db: Database, e2e_db_url: str,
                                                              tmp_path: Path) -> None:
    src = make_project(tmp_path / "src")
    remote = tmp_path / "calc.git"
    git(["clone", "-q", "--bare", str(src), str(remote)], tmp_path)
    await e2e_db.agents.add_agent(name="ann", role=Role.AGENT)
    env = {**os.environ, "MERGEBOT_DATABASE_URL": e2e_db_url, "MERGEBOT_DATA_DIR": str(tmp_path / "data")}
    env.pop("GITHUB_TOKEN", None)

    def cli(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "mergebot", *args, "--json"], env={**env, **extra},
                              capture_output=True, text=True, timeout=60, check=False)

    add = ("repo", "add", "calc", "--verifier", "true", "--github", "acme/calc", "--git-url", str(remote))
    out = cli(*add)
    assert out.returncode != 0 and "MERGEBOT_WEBHOOK_SECRET" in out.stderr  # names what is missing
    out = cli(*add, MERGEBOT_WEBHOOK_SECRET="s", GITHUB_TOKEN="t")
    assert out.returncode == 0, out.stderr
    repo = json.loads(out.stdout)
    assert (repo["forge"], repo["forge_repo"], repo["forge_api_url"]) == ("github", "acme/calc",
                                                                          "https://api.github.com")
    assert repo["webhook_secret_env"] == "MERGEBOT_WEBHOOK_SECRET" and repo["forge_token_env"] == "GITHUB_TOKEN"
    assert "s" not in (repo["forge_git_url"], repo["forge_api_url"])  # names of secrets are stored, never values
    out = cli("agent", "link", "ann", "--github", "Ann-GH")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"forge": "github", "login": "ann-gh", "agent": "ann"}
    agent = await e2e_db.forge.agent_for(forge="github", login="ANN-gh")
    assert agent is not None and agent.name == "ann"
    assert await e2e_db.forge.agent_for(forge="gitea", login="ann-gh") is None


async def test_a_crash_after_the_forge_moved_is_finished_by_the_reconciler(forge_fleet: ForgeFleet) -> None:
    """SIGKILL after the forge accepted the merge but before the mirror and the database knew: on restart the
    reconciler reads the forge's branch, finishes the landing from the intent, and nothing lands twice."""
    f = forge_fleet
    sub, _ = await f.db.subtasks.create_subtask(actor_id=None, title="crash")
    claim = await f.db.subtasks.claim(agent_id=f.agents["ann"])
    assert claim is not None
    before = f.forge_main()
    f.bot.stop()
    f.bot.start(MERGEBOT_CRASH_AT="after_forge_push")
    wt = f.clone("ann")
    sha = commit(wt, {"crash.txt": "x\n"})
    ref = f"refs/heads/subtasks/{sub.id}/v1"
    git(["push", "-q", "origin", f"HEAD:{ref}"], wt)
    assert f.deliver(ref, ZERO, sha, "ann-gh").status_code == 202
    assert f.bot.wait_exit(60) == -9
    moved = f.forge_main()
    assert moved != before and await f.db.landing.landed() == []  # the forge moved; the books do not know yet

    f.bot.start()
    f.wait_status(sha, lambda s: s[-1].state == "success")
    landed = await f.db.landing.landed(repo="calc")
    assert [row.merged_sha for row in landed] == [moved] and landed[0].base_sha == before
    assert f.forge_main() == moved
    assert await f.db.landing.pending_intents("calc") == []
    assert await f.db.landing.findings(repo="calc") == []


async def test_a_red_forge_main_is_mended_by_the_bots_revert_pushed_to_the_forge(forge_fleet: ForgeFleet) -> None:
    """Two landings pass their own checks but fail main's check together: the bot bisects, writes the revert of the
    second as a commit of its own, and lands it on the forge's main like any candidate (fenced, verified, pushed
    with a lease), so the forge's main is green again with the first landing kept."""
    f = forge_fleet
    together = f"sh -c '! {{ test -e a.txt && test -e b.txt; }}' && {check_command()}"
    await set_rules(f.db, "calc", post_land_command=together)
    subs = {}
    for name in ("a", "b"):
        subs[name], _ = await f.db.subtasks.create_subtask(actor_id=None, title=f"add {name}")
        claim = await f.db.subtasks.claim(agent_id=f.agents["ann"])
        assert claim is not None and claim.id == subs[name].id
        wt = f.clone(f"ann-{name}")
        sha = commit(wt, {f"{name}.txt": f"{name}\n"})
        ref = f"refs/heads/subtasks/{claim.id}/v{claim.claim_version}"
        git(["push", "-q", "origin", f"HEAD:{ref}"], wt)
        assert f.deliver(ref, ZERO, sha, "ann-gh").status_code == 202
        f.wait_status(sha, lambda s: s[-1].state == "success")
    deadline = time.monotonic() + 120
    while True:
        rows = await f.db.landing.landed(repo="calc")
        if any(r.kind == "revert" for r in rows) and (await f.db.landing.get_repo("calc")).red_since is None:
            break
        assert time.monotonic() < deadline, f"no revert landed:\n{f.bot.log.read_text()[-4000:]}"
        time.sleep(0.2)
    revert = next(r for r in rows if r.kind == "revert")
    culprit = next(r for r in rows if r.kind == "land" and r.subtask_id == subs["b"].id)
    assert revert.reverts == culprit.id and revert.owner == "mergebot" and revert.verifier_result == "pass"
    main = f.forge_main()
    assert main == (revert.main_sha or revert.merged_sha)  # the forge's main is the revert's landing
    files = git(["ls-tree", "--name-only", main], f.remote).stdout.split()
    assert "a.txt" in files and "b.txt" not in files
    message = git(["log", "-1", "--format=%B", revert.candidate_sha], f.remote).stdout
    assert f"Mergebot-Reverts-Landed: {culprit.id}" in message  # the bot's own commit reached the forge
    b_now = await f.db.subtasks.get_subtask(subs["b"].id)
    assert (b_now.status, b_now.claim_version) == ("running", 2) and "reverted" in (b_now.status_reason or "")
    assert await f.db.landing.pending_intents("calc") == [] and await f.db.landing.findings(repo="calc") == []


async def test_late_and_twin_deliveries(forge_fleet: ForgeFleet) -> None:
    """An older push delivered after a newer one is stale and lands nothing; the push event and the pull
    request event for one commit, arriving together, queue one candidate and end in one success."""
    f = forge_fleet
    sub, _ = await f.db.subtasks.create_subtask(actor_id=None, title="twice")
    claim = await f.db.subtasks.claim(agent_id=f.agents["ann"])
    assert claim is not None
    wt = f.clone("ann")
    ref = f"refs/heads/subtasks/{sub.id}/v1"
    first = commit(wt, {"t.txt": "first draft\n"})
    git(["push", "-q", "origin", f"HEAD:{ref}"], wt)
    second = commit(wt, {"t.txt": "second draft\n"})
    git(["push", "-q", "origin", f"HEAD:{ref}"], wt)
    r = f.deliver(ref, ZERO, first, "ann-gh")  # arrives late: the forge's branch is at `second` already
    assert r.status_code == 202 and "stale delivery" in r.json()["outcome"], r.text
    assert await f.db.landing.candidates(subtask_id=sub.id) == []

    pr: dict[str, Any] = json.loads((PAYLOADS / "github_pull_request_opened.json").read_bytes())
    pr["pull_request"]["head"].update(ref=f"subtasks/{sub.id}/v1", sha=second)
    pr["pull_request"]["base"]["ref"] = "main"
    pr["pull_request"]["head"]["repo"]["full_name"] = pr["pull_request"]["base"]["repo"]["full_name"] = "acme/calc"
    pr["repository"]["full_name"] = "acme/calc"
    pr["sender"]["login"] = "ann-gh"
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda i: f.deliver(ref, first, second, "ann-gh") if i % 2 else
                                f.deliver(ref, first, second, "ann-gh", body=json.dumps(pr).encode(),
                                          event="pull_request"), range(4)))
    assert all(a.status_code == 202 for a in answers), [a.text for a in answers]
    st = f.wait_status(second, final)
    assert st[-1].state == "success", st
    cands = await f.db.landing.candidates(subtask_id=sub.id)
    assert [c["status"] for c in cands] == ["landed"], cands
    assert f.forge.statuses(first) == []


async def test_signature_variants_and_a_refused_id_are_recorded_as_such(forge_fleet: ForgeFleet) -> None:
    f = forge_fleet
    fs = f.db.forge
    body = (PAYLOADS / "github_push_branch_update.json").read_bytes()
    good = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    url = f"{f.bot.url}/webhooks/github"
    for sigs in ([good[:-2]], [good.replace("sha256=", "sha1=")], ["sha256=" + "z" * 64], [good.upper()[7:]],
                 [good, good], []):
        headers = [("X-GitHub-Event", "push"), ("X-GitHub-Delivery", "sig-test")]
        headers += [("X-Hub-Signature-256", s) for s in sigs]
        r = httpx.post(url, content=body, headers=headers)
        assert r.status_code == 401, (sigs, r.text)
    assert await fs.deliveries() == []
    # the same id with another body is refused, and the refusal is in the event log
    sha = f.forge_main()
    assert f.deliver("refs/heads/subtasks/1/v1", ZERO, sha, "x", delivery="dup").status_code == 202
    assert f.deliver("refs/heads/subtasks/1/v1", ZERO, sha, "y", delivery="dup").status_code == 409
    events = [e for e in await f.db.subtasks.events(limit=1000) if e["kind"] == "webhook_refused"]
    assert len(events) == 1 and events[0]["detail"]["delivery"] == "dup"


async def test_a_reclaimed_owner_push_is_refused_with_a_failure(forge_fleet: ForgeFleet) -> None:
    f = forge_fleet
    sub, _ = await f.db.subtasks.create_subtask(actor_id=None, title="reclaimed")
    claim = await f.db.subtasks.claim(agent_id=f.agents["ann"])
    assert claim is not None
    await f.db.subtasks.release(agent_id=f.agents["ann"], handle=Handle(claim.id, claim.claim_version))
    again = await f.db.subtasks.claim(agent_id=f.agents["bob"])
    assert again is not None and again.claim_version == 2
    wt = f.clone("ann")
    sha = commit(wt, {"late.txt": "ann was too slow\n"})
    ref = f"refs/heads/subtasks/{sub.id}/v1"
    git(["push", "-q", "origin", f"HEAD:{ref}"], wt)
    r = f.deliver(ref, ZERO, sha, "ann-gh")
    assert r.status_code == 202 and "refused" in r.json()["outcome"], r.text
    st = f.wait_status(sha, final)
    assert st[-1].state == "failure" and "claim version" in (st[-1].description or ""), st
    assert await f.db.landing.landed() == [] and (await f.db.subtasks.get_subtask(sub.id)).owner_id == f.agents["bob"]
