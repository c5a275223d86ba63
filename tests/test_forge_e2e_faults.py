"""End to end in forge mode, when things go wrong: bad and forged deliveries change nothing, a redelivered or twin
delivery lands nothing twice, a late one is stale, statuses survive forge outages, odd refs never reach a shell,
a crash after the forge moved is finished by the reconciler, and a red main is mended by a revert pushed to the
forge. (The forge fleet: ``tests/support/forge_fleet.py``.)
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from mergebot.landing.main.repos import set_rules
from mergebot.rules import RulesChange
from tests.support.bot import check_command, commit, git
from tests.support.forge_fleet import SECRET, ZERO, ForgeFleet, final, pull_request
from tests.support.webhooks import PAYLOADS


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
    claim = await f.claimed("docs")
    wt = f.clone("ann")
    ref, sha = f.push_claim(wt, claim, {"README": "docs\n"})
    # The forge's git remote is away: the delivery fails with 5xx and is recorded as failed ...
    away = f.remote.with_name("away.git")
    f.remote.rename(away)
    r = f.deliver(ref, ZERO, sha, "ann-gh", delivery="flaky-delivery")
    away.rename(f.remote)
    assert r.status_code == 502, r.text
    failed = [d for d in await f.db.forge.deliveries() if d.delivery_id == "flaky-delivery"]
    assert failed[0].status == "failed" and failed[0].http_status == 502
    assert f.forge.statuses(sha) == [] and await f.db.landing.candidates(subtask_id=claim.id) == []
    # ... and the forge's redelivery of the same id is processed. Its API then fails 4 times in a row: the
    # status is retried in place, then from the outbox with a backoff, and arrives.
    f.forge.fail_next(4, 502)
    r = f.deliver(ref, ZERO, sha, "ann-gh", delivery="flaky-delivery")
    assert r.status_code == 202 and "queued" in r.json()["outcome"], r.text
    st = f.wait_status(sha, lambda s: s[-1].state == "success")
    assert st[-1].state == "success"
    assert len(await f.db.landing.landed(subtask_id=claim.id)) == 1


async def test_odd_refs_never_reach_a_shell(forge_fleet: ForgeFleet, tmp_path: Path) -> None:
    f = forge_fleet
    sha = f.forge_main()
    for ref in ("refs/heads/$(touch pwned)", "refs/heads/-rf", "refs/heads/`touch pwned`",
                "refs/heads/subtasks/1/v1;touch pwned"):
        r = f.deliver(ref, ZERO, sha, "ann-gh")
        assert r.status_code == 202 and "not a subtask branch" in r.json()["outcome"], (ref, r.text)
    assert not list(tmp_path.rglob("pwned")) and not (Path.cwd() / "pwned").exists()
    assert f.bot.proc is not None and f.bot.proc.poll() is None


@pytest.mark.bot_env(MERGEBOT_CRASH_AT="after_forge_push")  # the bot dies at that step of its landing
async def test_a_crash_after_the_forge_moved_is_finished_by_the_reconciler(forge_fleet: ForgeFleet) -> None:
    """SIGKILL after the forge accepted the merge but before the mirror and the database knew: on restart the
    reconciler reads the forge's branch, finishes the landing from the intent, and nothing lands twice."""
    f = forge_fleet
    claim = await f.claimed("crash")
    before = f.forge_main()
    wt = f.clone("ann")
    ref, sha = f.push_claim(wt, claim, {"crash.txt": "x\n"})
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
    await set_rules(f.db, "calc", RulesChange.of(post_land_command=together))
    subs = {}
    for name in ("a", "b"):
        subs[name], _ = await f.db.subtasks.create_subtask(actor_id=None, title=f"add {name}")
        claim = await f.db.subtasks.claim(agent_id=f.agents["ann"])
        assert claim is not None and claim.id == subs[name].id
        wt = f.clone(f"ann-{name}")
        ref, sha = f.push_claim(wt, claim, {f"{name}.txt": f"{name}\n"})
        assert f.deliver(ref, ZERO, sha, "ann-gh").status_code == 202
        f.wait_status(sha, lambda s: s[-1].state == "success")
    deadline = time.monotonic() + 120
    while True:
        rows = await f.db.landing.landed(repo="calc")
        if any(r.kind == "revert" for r in rows) and (await f.db.repos.get_repo("calc")).red_since is None:
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
    claim = await f.claimed("twice")
    wt = f.clone("ann")
    ref = f"refs/heads/subtasks/{claim.id}/v1"
    first = commit(wt, {"t.txt": "first draft\n"})
    git(["push", "-q", "origin", f"HEAD:{ref}"], wt)
    second = commit(wt, {"t.txt": "second draft\n"})
    git(["push", "-q", "origin", f"HEAD:{ref}"], wt)
    r = f.deliver(ref, ZERO, first, "ann-gh")  # arrives late: the forge's branch is at `second` already
    assert r.status_code == 202 and "stale delivery" in r.json()["outcome"], r.text
    assert await f.db.landing.candidates(subtask_id=claim.id) == []

    pr = pull_request("github_pull_request_opened.json", repo="acme/calc", head_ref=f"subtasks/{claim.id}/v1",
                      sha=second, sender="ann-gh")
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda i: f.deliver(ref, first, second, "ann-gh") if i % 2 else
                                f.deliver(ref, first, second, "ann-gh", body=json.dumps(pr).encode(),
                                          event="pull_request"), range(4)))
    assert all(a.status_code == 202 for a in answers), [a.text for a in answers]
    st = f.wait_status(second, final)
    assert st[-1].state == "success", st
    cands = await f.db.landing.candidates(subtask_id=claim.id)
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
