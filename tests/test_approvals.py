"""Approvals (issue 43): a repository that requires a lead's or reviewer's approval for some paths (or every change).

Through real pushes on a real server: a candidate whose change touches the rule's globs passes its check and waits
as ``awaiting_approval`` (its agent told whose approval, and the command); an agent's approval is refused (403) and
nothing lands; a lead's ``mergebot approve`` lands it, and the landed record names the lead; a push after the
approval is a new candidate that waits again; a change outside the globs lands without one, while the other waits.
The decision itself (``mergebot.rules.awaits_approval``), the rule's checks, the command's rule and an approving
GitHub review's parsing are pure, and tested as such.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from mergebot import messages as say
from mergebot.auth import Role, allowed
from mergebot.cli.parser import build_parser
from mergebot.client import ApiError
from mergebot.errors import Invalid
from mergebot.forge import commands
from mergebot.forge.sansio import Delivery, to_pull_review
from mergebot.landing.main.repos import set_rules
from mergebot.rules import Rules, RulesChange, awaits_approval, touches
from tests.support.bot import Fleet, check_command, commit, git, newest_candidate, until
from tests.test_agents import cli
from tests.test_github_app import SECRET, AppFleet, app_fleet, comment_event, forge, keys, pull_event, the_comment

__all__ = ["app_fleet", "forge", "keys"]  # the GitHub stand-in's fixtures, used here too

# -- the decision, pure ---------------------------------------------------------------------------------------------


def test_the_decision_needs_a_rule_a_matching_path_and_no_approval() -> None:
    assert not awaits_approval(None, ["calc.py"], [])  # no rule: nothing waits
    assert awaits_approval([], [], [])  # every change, even one whose paths are unknown
    assert not awaits_approval([], ["calc.py"], ["lead"])  # approved
    globs = ["docs/", "*.sql", "src/core/*.py"]
    assert awaits_approval(globs, ["docs/guide.md"], [])  # under a folder
    assert awaits_approval(globs, ["db/migrations/0001.sql"], [])  # a name in any folder
    assert awaits_approval(globs, ["README.md", "src/core/engine.py"], [])  # one path of several is enough
    assert awaits_approval(globs, ["src/core/sub/deep.py"], [])  # fnmatch: * crosses folders, as --protect
    assert not awaits_approval(globs, ["src/other/x.py", "docsx/a.md", "calc.py", "sql.txt"], [])
    assert not awaits_approval(globs, ["docs/guide.md"], ["reviewer"])
    assert touches(["docs"], ["docs/"]) and not touches([], ["docs/"])


def test_the_rule_is_checked_and_reset_like_the_other_rules() -> None:
    assert Rules.of(verifier_command="true").require_approval is None
    assert Rules.of(verifier_command="true", require_approval=[]).require_approval == []
    assert Rules.of(verifier_command="true", require_approval=[" docs/ ", ""]).require_approval == ["docs/"]
    with pytest.raises(Invalid) as e:
        RulesChange.of(require_approval=["../outside"])
    assert e.value.detail["field"] == "require_approval" and "--require-approval" in e.value.message
    assert RulesChange.of(reset={"require_approval"}).given() == ["require_approval"]
    parser = build_parser()
    every = parser.parse_args(["repo", "set", "demo", "--require-approval"])
    some = parser.parse_args(["repo", "set", "demo", "--require-approval", "docs/", "*.sql"])
    off = parser.parse_args(["repo", "set", "demo", "--no-require-approval"])
    assert (every.require_approval, some.require_approval, off.no_require_approval) == ([], ["docs/", "*.sql"], True)


def test_who_may_approve() -> None:
    assert [r for r in Role if allowed(r, "approve")] == [Role.ADMIN, Role.LEAD, Role.REVIEWER]
    approve = commands.parse("thanks!\n@mergebot approve\n")
    assert approve == commands.Command("approve")
    for role in ("lead", "reviewer", "admin"):
        assert commands.refusal(approve, login="x", forge="github", role=role, owner=False) is None
    assert commands.refusal(approve, login="x", forge="github", role="agent", owner=True) == \
        say.command_needs_approver("approve")
    assert commands.refusal(approve, login="x", forge="github", role=None, owner=False) == \
        say.command_unlinked("x", "github")


def _review(state: str, action: str = "submitted") -> Delivery:
    payload = {"action": action, "review": {"id": 77, "state": state, "user": {"login": "carol"}},
               "pull_request": {"number": 5, "head": {"ref": "subtasks/1/v1", "sha": "a" * 40}},
               "repository": {"full_name": "acme/demo"}, "sender": {"login": "carol"}}
    return Delivery("github", "pull_request_review", "d1", "0" * 64, 0, payload)


def test_an_approving_review_reads_as_the_approve_command() -> None:
    note = to_pull_review(_review("approved"))
    assert note is not None and (note.repository, note.number, note.sender, note.review) == ("acme/demo", 5,
                                                                                              "carol", True)
    assert commands.parse(note.body) == commands.Command("approve")
    assert to_pull_review(_review("commented")) is None and to_pull_review(_review("changes_requested")) is None
    assert to_pull_review(_review("approved", action="dismissed")) is None


def _page(fleet: Fleet, path: str) -> str:
    """A page as an admin logged in sees it."""
    with httpx.Client(base_url=fleet.bot.url, timeout=30) as web:
        r = web.post("/login", data={"token": fleet.tokens["root"], "next": path}, headers={"Origin": fleet.bot.url})
        assert r.status_code == 303, r.text
        return web.get(path).text


# -- through real pushes --------------------------------------------------------------------------------------------


async def test_a_change_to_approved_paths_waits_for_a_lead_and_a_new_push_waits_again(
        make_fleet: Callable[..., Any]) -> None:
    fleet: Fleet = await make_fleet(check_command(), repo={"require_approval": ["docs/"]})
    _, fleet.tokens["lead"] = await fleet.db.agents.add_agent(name="lead", role=Role.LEAD)
    docs, _ = await fleet.db.subtasks.create_subtask(actor_id=None, title="the docs")
    other, _ = await fleet.db.subtasks.create_subtask(actor_id=None, title="outside the globs")
    main = fleet.main()

    claim, wt, sha = fleet.start_and_push("ann", {"docs/guide.md": "how to\n"})
    cand = await newest_candidate(fleet, docs.id, "awaiting_approval")
    assert cand["sha"] == sha and cand["verifier"]["outcome"] == "pass", cand  # its check already ran, and passed
    shown = fleet.client("ann").get(f"/api/v1/candidates/{cand['id']}")
    v = shown["verdict"]
    assert v["kind"] == "awaiting_approval" and v["final"] is False, v
    assert f"`mergebot approve {cand['id']}`" in v["next"] and "CANDIDATE" not in v["next"], v  # the known id
    assert v["message"] == say.awaiting_approval(cand["id"], ["docs/"]) and f"mergebot approve {cand['id']}" in \
        v["message"] and "lead's or reviewer's" in v["message"], v
    assert f'<a href="/ui/candidates/{cand["id"]}">candidate {cand["id"]}</a>' in _page(fleet, "/ui/queue")
    assert fleet.main() == main

    # a change outside the globs lands without an approval, while the other waits
    fleet.start_and_push("bob", {"notes.txt": "bob's\n"})
    bobs = await newest_candidate(fleet, other.id, "landed")
    landed_bob = (await fleet.db.landing.landed(subtask_id=other.id))[0]
    assert landed_bob.approved_by is None and bobs["sha"] == landed_bob.candidate_sha

    # an agent (another, on the command line; the owner, through the API) may not approve: 403, nothing recorded
    out = cli(fleet, "bob", "approve", str(cand["id"]))
    assert out.returncode == 1 and "403" in out.stderr, out.stdout + out.stderr
    assert say.may_not_approve("bob", "agent") in out.stderr, out.stderr
    with pytest.raises(ApiError) as refused:
        fleet.client("ann").post(f"/api/v1/candidates/{cand['id']}/approve")
    assert (refused.value.status, refused.value.message) == (403, say.may_not_approve("ann", "agent"))
    assert await fleet.db.landing.approvals(cand["id"]) == []
    assert (await fleet.db.landing.get_candidate(cand["id"])).status == "awaiting_approval"

    # held (paused), so the approved candidate waits in the queue while ann pushes again
    await fleet.db.repos.set_paused(repo="demo", paused=True, reason="held")
    out = cli(fleet, "lead", "approve", str(cand["id"]))
    assert out.returncode == 0 and out.stdout.strip() == say.approved(cand["id"], sha), out.stdout + out.stderr
    assert (await fleet.db.landing.get_candidate(cand["id"])).status == "queued"
    again = commit(wt, {"docs/guide.md": "how to, better\n"})
    git(["push", "-q", "origin", f"HEAD:refs/heads/{claim.branch}"], wt)
    await newest_candidate(fleet, docs.id, "queued")
    fleet.client("root").post("/api/v1/repos/demo/resume")
    second = await newest_candidate(fleet, docs.id, "awaiting_approval")  # the approval was for the first commit only
    assert second["sha"] == again and second["id"] != cand["id"]
    assert (await fleet.db.landing.get_candidate(cand["id"])).status == "superseded"

    answer = fleet.client("lead").post(f"/api/v1/candidates/{second['id']}/approve")
    assert [(a["approver"], a["via"], a["sha"]) for a in answer["approvals"]] == [("lead", "api", again)], answer
    await newest_candidate(fleet, docs.id, "landed")
    landed = (await fleet.db.landing.landed(subtask_id=docs.id))[0]
    assert landed.approved_by == ["lead"] and landed.candidate_sha == again
    # main had not moved since it passed: the run it waited with is the one it lands on, not a second one
    runs = [j for j in await fleet.db.jobs.jobs(candidate_id=second["id"]) if j["purpose"] == "candidate"]
    assert len(runs) == 1 and landed.run_id == runs[0]["id"], (runs, landed)
    assert 'id="approved-by">by lead<' in _page(fleet, f"/ui/landed/{landed.id}")
    assert 'id="approvals">by lead (lead)' in _page(fleet, f"/ui/candidates/{second['id']}")

    # the rule goes as it came: nothing waits for an approval any more
    repo = await set_rules(fleet.db, "demo", RulesChange.of(reset={"require_approval"}))
    assert repo.require_approval is None


# -- on GitHub: `@mergebot approve` and an approving review ---------------------------------------------------------


def review_event(f: AppFleet, number: int, sha: str, sender: str, state: str = "approved") -> httpx.Response:
    """A signed ``pull_request_review`` delivery: ``sender`` submitted a review (``state``) of pull request
    ``number`` at ``sha``, as GitHub sends it."""
    payload = {"action": "submitted", "repository": {"full_name": "acme/calc", "name": "calc"},
               "review": {"id": 7000 + number, "user": {"login": sender, "id": 2}, "body": None, "commit_id": sha,
                          "state": state, "submitted_at": "2026-12-06T23:00:00Z"},
               "pull_request": {"number": number, "head": {"sha": sha}},
               "sender": {"login": sender, "id": 2}}
    body = json.dumps(payload).encode()
    sig = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    return httpx.post(f"{f.bot.url}/webhooks/github", content=body, timeout=30,
                      headers={"X-GitHub-Event": "pull_request_review", "X-GitHub-Delivery": str(uuid.uuid4()),
                               "X-Hub-Signature-256": sig, "Content-Type": "application/json"})


async def test_on_github_a_stranger_and_an_agent_are_refused_and_a_reviewer_s_review_lands_it(
        app_fleet: AppFleet) -> None:
    f, forge_ = app_fleet, app_fleet.forge
    await set_rules(f.db, "calc", RulesChange.of(require_approval=[]))  # every change
    rita, _ = await f.db.agents.add_agent(name="rita", role=Role.REVIEWER)
    await f.db.forge.link(forge="github", login="rita-gh", agent_id=rita.id)
    sha, branch = await f.prepare("sub", {"calc.py": "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n"
                                                     "    return a - b\n"})
    git(["push", "-q", "origin", f"HEAD:{branch}"], f.work / "sub")
    pull_event(f, 9, branch, sha, "opened")
    sid = int(branch.split("/")[3])

    async def newest(status: str) -> bool:
        rows = await f.db.landing.candidates(repo="calc", subtask_id=sid, limit=1)
        return bool(rows) and rows[0]["status"] == status

    await until(lambda: newest("awaiting_approval"), timeout=90)

    def told_on_the_forge() -> bool:  # the outbox sends it soon after
        last = (forge_.statuses(sha) or [None])[-1]
        return last is not None and last.state == "pending" and "[awaiting_approval]" in (last.description or "")

    await until(told_on_the_forge, timeout=30)

    # a stranger, and the owner (an agent), may not approve: refused in the comment, nothing recorded
    assert comment_event(f, 9, "@mergebot approve", "eve-gh").status_code == 202
    the_comment(forge_, 9, "@eve-gh `@mergebot approve` refused: 'eve-gh' is not linked to a Mergebot agent")
    assert comment_event(f, 9, "@mergebot approve", "ann-gh").status_code == 202
    the_comment(forge_, 9, say.command_needs_approver("approve"))
    assert review_event(f, 9, sha, "eve-gh").status_code == 202  # a stranger's approving review: the same
    cand = (await f.db.landing.candidates(repo="calc", subtask_id=sid, limit=1))[0]
    assert await f.db.landing.approvals(cand["id"]) == [] and cand["status"] == "awaiting_approval"

    # a review that does not approve changes nothing; a reviewer's approving review lands it
    assert review_event(f, 9, sha, "rita-gh", state="commented").json()["outcome"] == say.NOT_AN_APPROVING_REVIEW
    assert review_event(f, 9, sha, "rita-gh").status_code == 202
    await until(lambda: newest("landed"), timeout=90)
    landed = (await f.db.landing.landed(repo="calc", subtask_id=sid))[0]
    assert landed.approved_by == ["rita"] and landed.candidate_sha == sha
    assert [(a["approver"], a["via"], a["forge_login"]) for a in await f.db.landing.approvals(cand["id"])] == [
        ("rita", "review", "rita-gh")]
