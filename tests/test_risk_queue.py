"""A risk-aware queue end to end (``mergebot.landing.intake.risk``, the window's batches, rules 4a and 4b of the
planner): a real server, real pushes, the real verifier.

Each push's failure estimate is made from the records when it is queued; the queue takes the safer first,
batches likely passes together, runs a likely failure alone and, when a batch fails, leaves its clear culprit out
(the rest lands on its own run) or, with no clear culprit, judges each of its candidates on main alone (the others
land in a later batch); every landed commit is one a run passed on exactly.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import httpx
import pygit2
import pytest

from mergebot.auth import Role
from tests.support.bot import Fleet, commit, git
from tests.test_judged import candidate_page
from tests.test_speculation import wait_for

BREAKS = {"calc.py": "def add(a, b):\n    return a - b\n"}
# How these tests restart the bot: a window of two, batches of up to four, two workers, no retry of a failed check.
BATCHES = {"MERGEBOT_SPECULATION_WINDOW": "2", "MERGEBOT_BATCH_SIZE": "4", "MERGEBOT_VERIFIER_WORKERS": "2",
           "MERGEBOT_RETRY_FAILED_CHECKS": "0"}


async def _pushes(fleet: Fleet, risks: dict[str, float]) -> dict[str, int]:
    """While the queue is paused: each agent claims, commits a file of its own (``ann`` breaks the suite) and
    pushes; then each candidate's estimate is set as given, and the queue resumes. The subtask of each agent."""
    await fleet.db.repos.set_paused(repo="demo", paused=True, reason="collecting a batch")
    subtask = {}
    for who in risks:
        if who not in fleet.tokens:
            _, fleet.tokens[who] = await fleet.db.agents.add_agent(name=who, role=Role.AGENT)
        await fleet.db.subtasks.create_subtask(actor_id=None, title=f"{who}'s")
        claim, _, _ = fleet.start_and_push(who, BREAKS if who == "ann" else {f"{who}.txt": f"{who}\n"})
        subtask[who] = claim.subtask_id
    async with fleet.db.pool.connection() as conn:
        for who, p in risks.items():
            await conn.execute("UPDATE candidates SET failure_risk = %s WHERE subtask_id = %s", (p, subtask[who]))
    await fleet.db.repos.set_paused(repo="demo", paused=False, reason=None)
    return subtask


def _covers(bare: pygit2.Repository, sha: str, tip: str) -> bool:
    return sha == tip or bare.descendant_of(sha, tip)


@pytest.mark.bot_env(**BATCHES)
async def test_a_failed_batch_leaves_its_likeliest_culprit_out_and_the_rest_lands_on_its_own_run(
        fleet: Fleet) -> None:
    sub = await _pushes(fleet, {"ann": 0.2, "bob": 0.01, "cat": 0.01, "dan": 0.01})
    safe = [sub[w] for w in ("bob", "cat", "dan")]
    await wait_for(fleet, safe, {"landed"})
    await wait_for(fleet, [sub["ann"]], {"running"})

    landed = {r.subtask_id: r for r in await fleet.db.landing.landed(repo="demo")}
    assert set(landed) == set(safe)
    rows = [landed[s] for s in safe]
    # one landing, on the run of the batch without its suspect, recorded as such
    assert len({r.batch_id for r in rows}) == 1 and len({r.run_id for r in rows}) == 1, rows
    assert all(r.policy == "speculative+batched+risk-aware+left-out" for r in rows), [r.policy for r in rows]
    bare = fleet.bare()
    tips = {w: (await fleet.db.landing.candidates(repo="demo", subtask_id=s))[0]["sha"] for w, s in sub.items()}
    runs = [j for j in await fleet.db.jobs.jobs(limit=100) if j["purpose"] == "candidate"]
    # two candidate runs in all: the batch of four (failed) and the three without the suspect (passed); no
    # bisection of the three was needed, and no run ever covered the suspect without the other three
    assert len(runs) == 2, runs
    first, rest = sorted(runs, key=lambda j: j["id"])
    assert first["outcome"] == "fail" and all(_covers(bare, first["commit_sha"], t) for t in tips.values())
    assert rest["outcome"] == "pass" and not _covers(bare, rest["commit_sha"], tips["ann"])
    assert rest["commit_sha"] == rows[0].main_sha
    # the suspect was judged alone on the very tree that failed, and told
    cand = (await fleet.db.landing.candidates(repo="demo", subtask_id=sub["ann"]))[0]
    assert cand["status"] == "rejected" and (cand["verdict"] or {}).get("kind") == "check_failed", cand
    assert "left candidate" in fleet.bot.log.read_text()
    assert await fleet.db.landing.pending_intents("demo") == []


@pytest.mark.bot_env(**BATCHES)
async def test_a_failed_batch_with_no_clear_culprit_is_judged_apart_and_its_good_candidates_land_after(
        fleet: Fleet) -> None:
    sub = await _pushes(fleet, {"ann": 0.04, "bob": 0.04, "cat": 0.04, "dan": 0.04})  # equal: no clear culprit
    good = [sub[w] for w in ("bob", "cat", "dan")]
    await wait_for(fleet, good, {"landed"})
    await wait_for(fleet, [sub["ann"]], {"running"})

    bare = fleet.bare()
    tips = {w: (await fleet.db.landing.candidates(repo="demo", subtask_id=s))[0]["sha"] for w, s in sub.items()}
    runs = sorted((j for j in await fleet.db.jobs.jobs(limit=100) if j["purpose"] == "candidate"),
                  key=lambda j: j["id"])
    # the batch of four failed; then each of the four ran on main alone (ann's failed), and no run after the
    # batch covered ann beside her own: no guess at the culprit spent a run on a tree that would fail again
    covers = {j["id"]: [w for w, t in tips.items() if _covers(bare, j["commit_sha"], t)] for j in runs}
    batch, after = runs[0], runs[1:]
    assert batch["outcome"] == "fail" and covers[batch["id"]] == list(tips), (runs, covers)
    alone = {covers[j["id"]][0]: j for j in after if len(covers[j["id"]]) == 1}
    assert set(alone) == set(tips) and alone["ann"]["outcome"] == "fail", covers
    assert all(alone[w]["outcome"] == "pass" for w in ("bob", "cat", "dan")), alone
    assert [j["id"] for j in after if "ann" in covers[j["id"]]] == [alone["ann"]["id"]], covers
    # the three landed in later runs (together or not: each goes back to the queue as its own run on main passes, so
    # how they batch depends on which of those runs ends first), each on a run that passed on exactly the commit
    # main moved to
    rows = [r for r in await fleet.db.landing.landed(repo="demo")]
    assert {r.subtask_id for r in rows} == set(good), rows
    passed = {j["commit_sha"] for j in after if j["outcome"] == "pass"}
    assert all(r.main_sha in passed for r in rows), (rows, runs)
    # ann was rejected on the run of her own change on main, and told so
    ann = (await fleet.db.landing.candidates(repo="demo", subtask_id=sub["ann"]))[0]
    assert ann["status"] == "rejected" and (ann["verdict"] or {}).get("kind") == "check_failed", ann
    assert ann["merged_sha"] == alone["ann"]["commit_sha"], ann
    assert "apart on" in fleet.bot.log.read_text()
    assert await fleet.db.landing.pending_intents("demo") == []


@pytest.mark.bot_env(**BATCHES)
async def test_a_likely_failure_runs_alone_behind_a_batch_of_likely_passes(fleet: Fleet) -> None:
    # ann's push came first, but the safer ones go before it; her estimate is below the batches' least chance
    sub = await _pushes(fleet, {"ann": 0.6, "bob": 0.01, "cat": 0.01, "dan": 0.01})
    safe = [sub[w] for w in ("bob", "cat", "dan")]
    await wait_for(fleet, safe, {"landed"})
    await wait_for(fleet, [sub["ann"]], {"running"})
    rows = [r for r in await fleet.db.landing.landed(repo="demo")]
    assert len(rows) == 3 and len({r.run_id for r in rows}) == 1 and {r.batch_size for r in rows} == {3}
    assert {r.policy for r in rows} == {"speculative+batched+risk-aware"}
    runs = sorted((j for j in await fleet.db.jobs.jobs(limit=100) if j["purpose"] == "candidate"),
                  key=lambda j: j["id"])
    bare = fleet.bare()
    ann = (await fleet.db.landing.candidates(repo="demo", subtask_id=sub["ann"]))[0]
    # two runs at once: the batch of three, and ann's alone on top of it
    assert len(runs) == 2 and runs[0]["outcome"] == "pass" and runs[1]["outcome"] == "fail", runs
    assert not _covers(bare, runs[0]["commit_sha"], ann["sha"]) and _covers(bare, runs[1]["commit_sha"], ann["sha"])
    assert runs[1]["created_at"] < runs[0]["finished_at"]
    assert ann["status"] == "rejected" and ann["passed_over"] >= 1, ann


async def test_a_push_after_failures_is_estimated_likelier_to_fail_and_says_why(fleet: Fleet) -> None:
    """Serial queue: the estimate is made from the records at push time and shown to reviewers."""
    first = await _pushes(fleet, {"bob": 0.01})
    await wait_for(fleet, [first["bob"]], {"landed"})
    await fleet.db.subtasks.create_subtask(actor_id=None, title="ann's")
    claim, wt = fleet.start("ann")
    for n in range(3):
        commit(wt, {"calc.py": f"def add(a, b):\n    return a - b - {n}\n"})
        git(["push", "-q", "origin", f"HEAD:refs/heads/{claim.branch}"], wt)
        await wait_for(fleet, [claim.subtask_id], {"running"})
        cands = await fleet.db.landing.candidates(repo="demo", subtask_id=claim.subtask_id)
        while cands[0]["status"] != "rejected":
            await wait_for(fleet, [claim.subtask_id], {"running"})
            cands = await fleet.db.landing.candidates(repo="demo", subtask_id=claim.subtask_id)
    estimates = [c["failure_risk"] for c in reversed(cands)]  # oldest first
    assert estimates[0] < estimates[1] < estimates[2], estimates
    facts = cands[0]["risk_facts"]
    assert facts["facts"]["attempt"] == 3 and facts["facts"]["after_failure"] is True, facts
    assert set(facts["terms"]) >= {"agent", "after_failure", "attempt"}
    page = await candidate_page(fleet, cands[0]["id"], "rita")
    assert "Failure estimate" in page and f"{cands[0]['failure_risk']:.0%} likely to fail" in page, page[-3000:]
    assert "after a failing check +" in page  # no fix here has passed yet: likelier to fail


async def test_a_redo_after_a_lost_conflict_goes_first_and_is_not_counted_as_a_further_attempt(
        fleet: Fleet) -> None:
    """Ann's first push conflicts with bob's, which lands first. Her redo goes before cat's fresher and safer push
    (else, behind fresher pushes on the same file, it could lose every next conflict too): main takes it first,
    alone or ahead of cat's in one batch. It is her first push to be judged on its check: no attempt term."""
    await fleet.db.repos.set_paused(repo="demo", paused=True, reason="two pushes of one new file")
    pushed = {}
    for who in ("bob", "ann"):
        await fleet.db.subtasks.create_subtask(actor_id=None, title=f"{who}'s")
        claim, wt, _ = fleet.start_and_push(who, {"NOTES.md": f"- {who}'s note\n"})
        pushed[who] = (claim, wt)
    await fleet.db.repos.set_paused(repo="demo", paused=False, reason=None)
    (bob, _), (ann, wt) = pushed["bob"], pushed["ann"]
    await wait_for(fleet, [bob.subtask_id], {"landed"})
    await wait_for(fleet, [ann.subtask_id], {"running"})
    first = (await fleet.db.landing.candidates(repo="demo", subtask_id=ann.subtask_id))[0]
    assert first["status"] == "rejected" and (first["verdict"] or {}).get("kind") == "conflict", first
    await fleet.db.repos.set_paused(repo="demo", paused=True, reason="a fresh push, then the redo")
    if "cat" not in fleet.tokens:
        _, fleet.tokens["cat"] = await fleet.db.agents.add_agent(name="cat", role=Role.AGENT)
    await fleet.db.subtasks.create_subtask(actor_id=None, title="cat's")
    cat, cat_wt = fleet.start("cat")
    commit(cat_wt, {"cat.txt": "cat\n"})
    git(["push", "-q", "origin", f"HEAD:refs/heads/{cat.branch}"], cat_wt)
    git(["fetch", "-q", "origin", "main"], wt)
    git(["reset", "-q", "--hard", "FETCH_HEAD"], wt)
    commit(wt, {"NOTES.md": "- bob's note\n- ann's note\n"})
    git(["push", "-q", "-f", "origin", f"HEAD:refs/heads/{ann.branch}"], wt)  # redone on main
    async with fleet.db.pool.connection() as conn:  # cat's is the safer too: the redo goes first all the same
        await conn.execute("UPDATE candidates SET failure_risk = 0.01 WHERE subtask_id = %s", (cat.subtask_id,))
        await conn.execute("UPDATE candidates SET failure_risk = 0.5 WHERE subtask_id = %s AND status = 'queued'",
                           (ann.subtask_id,))
    await fleet.db.repos.set_paused(repo="demo", paused=False, reason=None)
    await wait_for(fleet, [ann.subtask_id, cat.subtask_id], {"landed"})
    redo = (await fleet.db.landing.candidates(repo="demo", subtask_id=ann.subtask_id))[0]
    cats = (await fleet.db.landing.candidates(repo="demo", subtask_id=cat.subtask_id))[0]
    assert redo["id"] != first["id"] and redo["status"] == "landed", redo
    assert cats["id"] < redo["id"], (redo, cats)
    rows = {row.subtask_id: row for row in await fleet.db.landing.landed(repo="demo")}
    assert fleet.bare().descendant_of(rows[cat.subtask_id].merged_sha, rows[ann.subtask_id].merged_sha), rows
    facts = redo["risk_facts"]
    assert facts["facts"]["attempt"] == 1 and facts["facts"]["after_failure"] is False, facts
    assert "attempt" not in facts["terms"], facts


async def test_every_landing_records_where_its_time_went(fleet: Fleet) -> None:
    """Pushed, queued, merged, run created, started and finished, landed: on the candidate page, in the timeline's
    tooltips, and as medians from ``mergebot cost --stages`` (the API's ``/api/v1/cost/stages``)."""
    sub = await _pushes(fleet, {"bob": 0.01, "cat": 0.01})
    await wait_for(fleet, list(sub.values()), {"landed"})
    for sid in sub.values():
        c = (await fleet.db.landing.candidates(repo="demo", subtask_id=sid))[0]
        assert c["pushed_at"] <= c["queued_at"] <= c["merged_at"] <= c["finished_at"], c
    out = subprocess.run([sys.executable, "-m", "mergebot", "cost", "--stages", "--json", "--since", "1h"],
                         capture_output=True, text=True, check=True,
                         env={**os.environ, "MERGEBOT_URL": fleet.bot.url, "MERGEBOT_TOKEN": fleet.tokens["rita"]})
    stages = {s["stage"]: s for s in json.loads(out.stdout)["stages"]}
    assert list(stages)[:7] == ["pushed → queued", "queued → merged", "merged → run created", "run created → started",
                                "run setup", "the check", "run finished → landed"], stages
    assert all(s["n"] == 2 and s["p50"] >= 0 for name, s in stages.items() if name != "run setup"), stages
    whole = stages["pushed → landed"]["p50"]
    assert 0 < stages["beyond the check"]["p50"] < whole and stages["the check"]["p50"] > 0
    table = subprocess.run([sys.executable, "-m", "mergebot", "cost", "--stages", "--since", "1h"],
                           capture_output=True, text=True, check=True,
                           env={**os.environ, "MERGEBOT_URL": fleet.bot.url, "MERGEBOT_TOKEN": fleet.tokens["rita"]})
    assert "pushed → queued" in table.stdout and "beyond the check" in table.stdout, table.stdout
    cand = (await fleet.db.landing.candidates(repo="demo", subtask_id=sub["bob"]))[0]
    page = await candidate_page(fleet, cand["id"], "rita")
    assert "Where the time went" in page and "queued → merged" in page and "the check" in page
    async with httpx.AsyncClient(base_url=fleet.bot.url, timeout=30) as web:
        await web.post("/login", data={"token": fleet.tokens["rita"], "next": "/ui/timeline"},
                       headers={"Origin": fleet.bot.url})
        timeline = (await web.get("/ui/timeline", params={"span": "hour"})).text
    assert "pushed → queued" in timeline and "run asked for → started" in timeline, timeline[-2000:]


async def test_a_new_server_speculates_as_wide_as_its_workers_with_risk_aware_batches(fleet: Fleet) -> None:
    """The defaults a new user gets (no MERGEBOT_SPECULATION_WINDOW, no MERGEBOT_BATCH_SIZE): a window as wide as
    the verifier slots the bot knows (its two workers), batches of up to four shaped by the estimates."""
    queue = fleet.client("rita").get("/api/v1/queue", repo="demo")
    window = queue["repos"][0]["window"]
    assert (window["max"], window["batch"]) == (2, 4), window
    sub = await _pushes(fleet, {"bob": 0.01, "cat": 0.01, "dan": 0.01})
    await wait_for(fleet, list(sub.values()), {"landed"})
    rows = await fleet.db.landing.landed(repo="demo")
    assert len(rows) == 3 and all((r.policy or "").startswith("speculative") and "risk-aware" in (r.policy or "")
                                  for r in rows), [r.policy for r in rows]
    assert len({r.run_id for r in rows}) < 3  # at least two of them verified by one run
    # and each run says which candidates it was started for (its batch), so none of them looks free: every landed
    # candidate is named by a run, and a run that covers more than its own candidate names each of them once
    cands = {c["id"]: c for c in await fleet.db.landing.candidates(repo="demo", limit=50) if c["status"] == "landed"}
    jobs = await fleet.db.jobs.jobs(limit=100)
    started_for = [j.get("covers") or [j["candidate_id"]] for j in jobs if j["purpose"] == "candidate"]
    assert set(cands) <= {c for covers in started_for for c in covers}, (cands, started_for)
    batches = [covers for covers in started_for if len(covers) > 1]
    assert batches and all(len(set(b)) == len(b) and set(b) <= set(cands) for b in batches), started_for
    assert all(b[-1] == j["candidate_id"] for j in jobs for b in [j.get("covers")] if b), jobs
