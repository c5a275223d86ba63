"""End to end in forge mode on Gitea: a push lands through the Gitea endpoint with statuses through Gitea's API,
a pull request has one living comment that answers commands (Gitea and Forgejo have no Checks API), and each
named check has a commit status of its own (there and on a GitHub token's repository).
(The forge fleet: ``tests/support/forge_fleet.py``.)
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
import uuid
from typing import Any

import httpx

from mergebot.rules import RulesChange
from tests.support.bot import check_command, commit, git
from tests.support.forge_fleet import SECRET, ZERO, ForgeFleet, final, pull_request
from tests.support.webhooks import PAYLOADS


async def test_a_gitea_repository_lands_through_the_gitea_endpoint(forge_fleet: ForgeFleet) -> None:
    """Gitea: its own signature header (bare hex), X-GitHub-Event sent too, statuses through Gitea's API."""
    f = forge_fleet
    remote = await f.add_gitea_repo()
    claim = await f.claimed("gitea work")
    wt = f.clone("gitea-ann", remote)
    ref, sha = f.push_claim(wt, claim, {"g.txt": "g\n"})
    body, headers = gitea_push(ref, sha)
    # sent to the GitHub endpoint it is refused: it is a Gitea delivery
    assert httpx.post(f"{f.bot.url}/webhooks/github", content=body, headers=headers).status_code in (400, 401)
    r = httpx.post(f"{f.bot.url}/webhooks/gitea", content=body, headers=headers, timeout=30)
    assert r.status_code == 202 and "queued" in r.json()["outcome"], r.text
    st = f.wait_status(sha, final)
    assert st[-1].state == "success" and st[-1].forge == "gitea", st
    landed = (await f.db.landing.landed(subtask_id=claim.id))[0]
    assert f.forge_main(remote) == landed.merged_sha


def gitea_push(ref: str, sha: str) -> tuple[bytes, dict[str, str]]:
    """A signed Gitea push delivery of ``sha`` to ``ref`` of acme/gcalc by ann: its body and headers."""
    payload: dict[str, Any] = json.loads((PAYLOADS / "gitea_push_branch_update.json").read_bytes())
    payload.update(ref=ref, before=ZERO, after=sha)
    payload["repository"]["full_name"] = "acme/gcalc"
    payload["sender"]["login"] = "ann"
    body = json.dumps(payload).encode()
    return body, {"X-Gitea-Event": "push", "X-GitHub-Event": "push", "X-Gitea-Delivery": str(uuid.uuid4()),
                  "X-Gitea-Signature": hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()}


async def test_each_named_check_gets_a_commit_status_of_its_own(forge_fleet: ForgeFleet) -> None:
    """Without a GitHub App (Gitea, then a GitHub token's repository) each named check gets a commit status
    ``mergebot/NAME`` beside the candidate's ``mergebot``, linking its log: an optional check that failed is a
    success that says so, as a commit status has no neutral state; a required one that failed, a failure (issue 43)."""
    f = forge_fleet
    remote = await f.add_gitea_repo()
    await f.db.repos.update_repo("gcalc", RulesChange.of(checks=[
        {"name": "unit", "command": check_command()},
        {"name": "style", "command": "! grep -rq STYLEBAD --include=*.py .", "required": False}]))
    claim = await f.claimed("styled work")
    ref, sha = f.push_claim(f.clone("gitea-ann", remote), claim, {"styled.py": "Z = 'STYLEBAD'\n"})
    body, headers = gitea_push(ref, sha)
    r = httpx.post(f"{f.bot.url}/webhooks/gitea", content=body, headers=headers, timeout=30)
    assert r.status_code == 202 and "queued" in r.json()["outcome"], r.text
    st = f.wait_status(sha, lambda got: got[-1].context == "mergebot" and final(got))
    assert st[-1].state == "success" and st[-1].forge == "gitea", st  # the optional failure did not block
    [cand] = [c for c in await f.db.landing.candidates(repo="gcalc") if c["sha"] == sha]
    jobs = {c["name"]: c["job"] for c in cand["verifier"]["checks"]}
    last = {s.context: s for s in st}  # the newest per context, as the forge shows them
    assert set(last) == {"mergebot", "mergebot/unit", "mergebot/style"}, st
    unit, style = last["mergebot/unit"], last["mergebot/style"]
    assert unit.state == "success" and (unit.description or "").startswith("pass in "), unit
    assert style.state == "success" and (style.description or "").startswith(
        "optional: failed, does not block (fail in "), style
    for name, s in (("unit", unit), ("style", style)):
        assert s.target_url == f"{f.bot.url}/ui/jobs/{jobs[name]}/log", s  # the check's own log
    assert "/ui/candidates/" in (last["mergebot"].target_url or "")

    # a GitHub token's repository: a required check that failed is a failure status, beside the rejection
    await f.db.repos.update_repo("calc", RulesChange.of(checks=[
        {"name": "unit", "command": check_command()}, {"name": "lint", "command": "true"}]))
    claim = await f.claimed("broken work")
    ref, sha = f.push_claim(f.clone("ann"), claim, {"calc.py": "def add(a, b):\n    return a - b\n"})
    assert f.deliver(ref, ZERO, sha, "Ann-GH").status_code == 202
    last = {s.context: s for s in f.wait_status(sha, lambda got: got[-1].context == "mergebot" and final(got))}
    assert last["mergebot"].state == "failure" and last["mergebot"].forge == "github", last
    assert last["mergebot/unit"].state == "failure", last
    assert (last["mergebot/unit"].description or "").startswith("fail in ") and "required" in (
        last["mergebot/unit"].description or ""), last
    assert last["mergebot/lint"].state == "success", last
    assert all("/ui/jobs/" in (last[f"mergebot/{n}"].target_url or "") for n in ("unit", "lint")), last


async def test_a_gitea_pull_request_has_one_living_comment_that_answers_commands(forge_fleet: ForgeFleet) -> None:
    """Gitea and Forgejo have no Checks API: the pull request's one comment goes through their issue comments,
    and a command in a comment is answered there."""
    f = forge_fleet
    remote = await f.add_gitea_repo()
    claim = await f.claimed("gitea work")
    wt = f.clone("gitea-ann", remote)
    sha = commit(wt, {"calc.py": "def add(a, b):\n    return a - b\n"})
    ref = f"subtasks/{claim.id}/v1"
    git(["push", "-q", "origin", f"HEAD:refs/heads/{ref}"], wt)

    def gitea(event: str, payload: dict[str, Any]) -> httpx.Response:
        body = json.dumps(payload).encode()
        return httpx.post(f"{f.bot.url}/webhooks/gitea", content=body, timeout=30, headers={
            "X-Gitea-Event": event, "X-Gitea-Delivery": str(uuid.uuid4()),
            "X-Gitea-Signature": hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()})

    pr = pull_request("gitea_pull_request_opened.json", repo="acme/gcalc", number=3, head_ref=ref, sha=sha,
                      sender="ann", label=ref)
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
