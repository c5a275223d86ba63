"""End to end in forge mode: a real ``mergebot serve``, a real bare repository standing in for GitHub's git remote,
the GitHub API stand-in (real response shapes) for statuses and pull requests, and signed webhook deliveries.

An owner's push lands on the forge's main with a success status and the pull request shows merged; an unmapped
sender, a stale claim, a failing check and a reclaimed subtask each end with a failure status that says why; the
command line adds a GitHub repository. Bad, late, twin and redelivered deliveries, forge outages and crashes are in
``test_forge_e2e_faults.py``; a Gitea repository in ``test_forge_e2e_gitea.py``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx

from mergebot.attest import notes
from mergebot.attest.envelope import IN_TOTO
from mergebot.auth import Role
from mergebot.db.database import Database
from mergebot.forge.client import GitHubClient
from mergebot.models import Handle
from tests.support.bot import commit, git, make_project, until
from tests.support.forge_fleet import SECRET, TOKEN, ZERO, ForgeFleet, final, pull_request
from tests.support.webhooks import PAYLOADS


async def test_owner_push_lands_on_the_forge_with_success_and_merges_the_pull(forge_fleet: ForgeFleet) -> None:
    f = forge_fleet
    claim = await f.claimed("subtract")
    before = f.forge_main()
    wt = f.clone("ann")
    branch, sha = f.push_claim(wt, claim, {"calc.py": "def add(a, b):\n    return a + b\n\n\n"
                                                      "def sub(a, b):\n    return a - b\n"})
    f.forge.add_pull("acme", "calc", 7, f"subtasks/{claim.id}/v{claim.claim_version}", sha, "main")
    client = GitHubClient(TOKEN, base_url=f.forge.url)
    assert not client.pull_merged("acme/calc", 7)

    delivery = str(uuid.uuid4())
    # Paused, so the queued candidate's status is the newest while we look: the outbox sends only a commit's
    # newest status, and on a slow machine a quick landing would otherwise overtake it.
    await f.db.repos.set_paused(repo="calc", paused=True, reason="reading the queued status")
    r = f.deliver(branch, ZERO, sha, "ann-gh", delivery=delivery)  # logins are case-insensitive
    assert r.status_code == 202, r.text
    assert "queued as candidate" in r.json()["outcome"]
    queued = f.wait_status(sha, lambda got: got[-1].state == "pending")
    assert queued[-1].description == "queued for landing", queued
    await f.db.repos.set_paused(repo="calc", paused=False, reason=None)
    statuses = f.wait_status(sha, final)
    assert statuses[-1].state == "success", statuses
    assert statuses[0].state == "pending" and statuses[-1].context == "mergebot"
    assert "/ui/candidates/" in (statuses[-1].target_url or "")  # the candidate's page

    landed = (await f.db.landing.landed(subtask_id=claim.id))[0]
    assert f.forge_main() == landed.merged_sha and landed.base_sha == before
    assert landed.candidate_sha == sha and landed.verifier_result == "pass"
    assert git(["merge-base", "--is-ancestor", sha, "refs/heads/main"], f.remote, check=False).returncode == 0
    assert (statuses[-1].description or "").startswith(f"landed as {landed.merged_sha[:12]}")
    assert client.pull_merged("acme/calc", 7)  # pushing the merge onto main is what closes the PR as merged
    assert (await f.db.subtasks.get_subtask(claim.id)).status == "landed"
    # the landing's signed statements reach the forge with it: a clone of the forge fetches them as git notes
    await until(lambda: git(["notes", "--ref", "mergebot", "show", landed.merged_sha], f.remote,
                            check=False).returncode == 0, timeout=30)  # the notes follow the landing
    note = git(["notes", "--ref", "mergebot", "show", landed.merged_sha], f.remote).stdout
    assert [e["payloadType"] for e in notes.envelopes(note)] == [IN_TOTO, IN_TOTO], note[:500]

    # The same delivery again: answered, nothing done twice.
    posted = len(f.forge.statuses(sha))
    again = f.deliver(branch, ZERO, sha, "ann-gh", delivery=delivery)
    assert again.status_code == 200 and again.json()["duplicate"] is True
    # The pull request's own event announces the same commit: acknowledged, nothing queued twice.
    pr = pull_request("github_pull_request_synchronize.json", repo="acme/calc", number=7,
                      head_ref=f"subtasks/{claim.id}/v{claim.claim_version}", sha=sha, sender="ann-gh")
    other = f.deliver(branch, ZERO, sha, "ann-gh", body=json.dumps(pr).encode(), event="pull_request")
    assert other.status_code == 202 and "already" in other.json()["outcome"], other.text
    time.sleep(1.0)
    assert len(await f.db.landing.landed(subtask_id=claim.id)) == 1
    assert len(f.forge.statuses(sha)) == posted
    assert f.forge_main() == landed.merged_sha


async def test_a_landing_that_edits_a_test_names_it_on_the_forge(forge_fleet: ForgeFleet) -> None:
    """A change that edits an existing test lands under ``--old-tests flag`` (the default), and the commit status a
    person reads on the pull request names the test, as the landed record does."""
    f = forge_fleet
    claim = await f.claimed("a stricter test")
    wt = f.clone("ann")
    sha = commit(wt, {"tests/test_calc.py": "from calc import add\n\n\ndef test_add():\n"
                                            "    assert add(2, 2) == 4 and add(1, 2) == 3\n"})
    branch = f"refs/heads/subtasks/{claim.id}/v{claim.claim_version}"
    git(["push", "-q", "origin", f"HEAD:{branch}"], wt)
    r = f.deliver(branch, ZERO, sha, "ann-gh")
    assert r.status_code == 202, r.text
    statuses = f.wait_status(sha, final)
    assert statuses[-1].state == "success", statuses
    landed = (await f.db.landing.landed(subtask_id=claim.id))[0]
    assert landed.tests_changed == ["tests/test_calc.py::test_add"]
    assert (statuses[-1].description or "") == (f"landed as {landed.merged_sha[:12]}; "
                                                  "edits existing tests: tests/test_calc.py::test_add")


async def test_a_form_encoded_delivery_lands_like_its_json_twin(forge_fleet: ForgeFleet) -> None:
    f = forge_fleet
    claim = await f.claimed("multiply")
    wt = f.clone("ann")
    branch, sha = f.push_claim(wt, claim, {"calc.py": "def add(a, b):\n    return a + b\n\n\n"
                                                      "def mul(a, b):\n    return a * b\n"})

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
    landed = (await f.db.landing.landed(subtask_id=claim.id))[0]
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

    def ends_in_failure(wt: Path, files: dict[str, str], ref: str, sender: str, outcome: str, reason: str) -> None:
        """Pushed and delivered: the delivery's outcome says ``outcome``, the final status is a failure that says
        ``reason``."""
        sha = f.push(wt, files, ref)
        r = f.deliver(ref, ZERO, sha, sender)
        assert r.status_code == 202 and outcome in r.json()["outcome"], r.text
        st = f.wait_status(sha, final)
        assert st[-1].state == "failure" and reason in (st[-1].description or ""), st

    # bob's login is not linked to his agent: recorded, a failure status, never landed
    ends_in_failure(f.clone("bob"), {"b.txt": "b\n"}, f"refs/heads/subtasks/{s2.id}/v1", "bob-gh", "not linked",
                    "'bob-gh' is not linked to a Mergebot agent")
    # ann pushes for a claim version she does not hold
    ann = f.clone("ann")
    ends_in_failure(ann, {"a.txt": "a\n"}, f"refs/heads/subtasks/{s1.id}/v9", "ann-gh", "refused", "does not exist")
    # ann's real branch, with a change that breaks the suite
    ends_in_failure(ann, {"calc.py": "def add(a, b):\n    return a - b\n"}, f"refs/heads/subtasks/{s1.id}/v1",
                    "ann-gh", "queued", "gave fail")

    assert f.forge_main() == start
    assert await f.db.landing.landed() == []
    assert (await f.db.subtasks.get_subtask(s1.id)).status == "running"  # back to its owner with the reason
    assert (await f.db.subtasks.get_subtask(s2.id)).status == "running"


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


async def test_a_reclaimed_owner_push_is_refused_with_a_failure(forge_fleet: ForgeFleet) -> None:
    f = forge_fleet
    claim = await f.claimed("reclaimed")
    await f.db.subtasks.release(agent_id=f.agents["ann"], handle=Handle(claim.id, claim.claim_version))
    again = await f.db.subtasks.claim(agent_id=f.agents["bob"])
    assert again is not None and again.claim_version == 2
    wt = f.clone("ann")
    ref = f"refs/heads/subtasks/{claim.id}/v1"
    sha = f.push(wt, {"late.txt": "ann was too slow\n"}, ref)
    r = f.deliver(ref, ZERO, sha, "ann-gh")
    assert r.status_code == 202 and "refused" in r.json()["outcome"], r.text
    st = f.wait_status(sha, final)
    assert st[-1].state == "failure" and "claim version" in (st[-1].description or ""), st
    assert await f.db.landing.landed() == [] and (await f.db.subtasks.get_subtask(claim.id)).owner_id == f.agents["bob"]
