"""Speculative landing, end to end: a real server with a window of 3 and 3 verifier workers, real pushes.

Correctness under speculation: main only ever moves to a commit that a verifier run passed on exactly that
commit; no landed row points at a commit that is not on main; a failing candidate in the middle of a window
lands nothing that was verified on top of it.
"""

from __future__ import annotations

import time

import pygit2
import pytest

from mergebot.auth import Role
from mergebot.rules import RulesChange
from tests.support.bot import Fleet


async def wait_for(fleet: Fleet, ids: list[int], statuses: set[str], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = [(await fleet.db.subtasks.get_subtask(i)).status for i in ids]
        if all(status in statuses for status in got):
            return
        time.sleep(0.2)
    raise AssertionError(f"subtasks {ids} never reached {statuses}:\n" + fleet.bot.log.read_text()[-3000:])

async def pushed_together(fleet: Fleet, pushes: list[tuple[str, dict[str, str]]]) -> dict[int, str]:
    """Each agent claims and pushes its files while the queue is held, so all of them are queued together and go
    into one window: each subtask's pushed commit."""
    await fleet.db.repos.set_paused(repo="demo", paused=True, reason="collecting a window")
    shas = {}
    for who, files in pushes:
        claim, _, sha = fleet.start_and_push(who, files)
        shas[claim.subtask_id] = sha
    await fleet.db.repos.set_paused(repo="demo", paused=False, reason=None)
    return shas



@pytest.mark.bot_env(MERGEBOT_SPECULATION_WINDOW="3", MERGEBOT_VERIFIER_WORKERS="3")
async def test_a_failing_candidate_mid_window_lands_nothing_built_on_it(fleet: Fleet) -> None:
    _, fleet.tokens["cat"] = await fleet.db.agents.add_agent(name="cat", role=Role.AGENT)
    subs = [(await fleet.db.subtasks.create_subtask(actor_id=None, title=t))[0] for t in ("one", "two", "three")]
    start = fleet.main()
    # Hold the queue so all three are queued together and go into one window.
    shas = await pushed_together(fleet, [
        ("ann", {"one.txt": "1\n"}),
        ("bob", {"calc.py": "def add(a, b):\n    return a - b\n"}),  # breaks the suite
        ("cat", {"three.txt": "3\n"})
    ])
    one, two, three = (s.id for s in subs)
    await wait_for(fleet, [one, three], {"landed"})
    await wait_for(fleet, [two], {"running"})  # rejected, back to its owner

    bare = fleet.bare()
    head = fleet.main()
    landed = await fleet.db.landing.landed(repo="demo")
    assert {row.subtask_id for row in landed} == {one, three}
    # every landed row's commit is on main, and main's first-parent chain is exactly the landed rows
    chain, cur = [], head
    while cur != start:
        chain.append(cur)
        cur = str(bare[cur].peel(pygit2.Commit).parent_ids[0])
    assert sorted(chain) == sorted(row.merged_sha for row in landed)
    # main moved only to commits a verifier run passed on exactly that commit
    jobs = await fleet.db.jobs.jobs(limit=100)
    passed = {j["commit_sha"] for j in jobs if j["status"] == "done" and j["outcome"] in ("pass", "flaky")}
    assert set(chain) <= passed
    # every run the window queued records the window's width then (the charts draw it); the others record none
    widths = {j["window_width"] for j in jobs if j["purpose"] == "candidate"}
    assert widths and all(w is not None and 1 <= w <= 3 for w in widths), widths
    assert all(j["window_width"] is None for j in jobs if j["purpose"] != "candidate")
    # the failing candidate's commit is in no landed commit's history
    for sha in chain:
        assert not bare.descendant_of(sha, shas[two]) and sha != shas[two]
    # it really was speculative: some run was made on top of the failing candidate, and was thrown away
    on_top = [j for j in jobs if j["purpose"] == "candidate" and j["commit_sha"] not in passed
              and j["commit_sha"] in bare and bare.descendant_of(j["commit_sha"], shas[two])
              and j["candidate_id"] is not None]
    assert on_top, "no run was ever made on top of the failing candidate: the window did not speculate"
    # the failing candidate was judged on a main that a run had just passed on: no base run was needed
    assert [j["purpose"] for j in jobs if j["purpose"] == "base"] == []
    assert any(j["purpose"] == "retry" for j in jobs)
    cands = await fleet.db.landing.candidates(repo="demo")
    assert {c["status"] for c in cands} <= {"landed", "rejected", "superseded", "queued"}
    assert await fleet.db.landing.pending_intents("demo") == []
    findings = fleet.client("rita").get("/api/v1/findings", repo="demo")["findings"]
    assert findings == [], findings


@pytest.mark.bot_env(MERGEBOT_VERIFIER_WORKERS="2")
async def test_a_failing_batch_is_bisected_and_the_rest_land_together(fleet: Fleet) -> None:
    """Batches of up to 4 (one run covers them), bisected on failure; every landed row names its own merge on
    main, the commit main moved to and the run that passed on it."""
    # the repository's rules: one batch at a time (a window one wide), batches of 4 by count (the plain policy's
    # bisection, not the risk-aware shaping)
    await fleet.db.repos.update_repo("demo", RulesChange.of(risk_aware=False, speculation_window=1, batch_size=4))
    for name in ("cat", "dan"):
        _, fleet.tokens[name] = await fleet.db.agents.add_agent(name=name, role=Role.AGENT)
    subs = [(await fleet.db.subtasks.create_subtask(actor_id=None, title=t))[0]
            for t in ("one", "two", "three", "four")]
    start = fleet.main()
    shas = await pushed_together(fleet, [
        ("ann", {"one.txt": "1\n"}),
        ("bob", {"calc.py": "def add(a, b):\n    return a - b\n"}),  # breaks the suite
        ("cat", {"three.txt": "3\n"}),
        ("dan", {"four.txt": "4\n"})
    ])
    one, two, three, four = (s.id for s in subs)
    await wait_for(fleet, [one, three, four], {"landed"})
    await wait_for(fleet, [two], {"running"})

    bare = fleet.bare()
    landed = {row.subtask_id: row for row in await fleet.db.landing.landed(repo="demo")}
    assert set(landed) == {one, three, four}
    chain, cur = [], fleet.main()
    while cur != start:
        chain.append(cur)
        cur = str(bare[cur].peel(pygit2.Commit).parent_ids[0])
    assert sorted(chain) == sorted(row.merged_sha for row in landed.values())  # every merge explained once
    jobs = await fleet.db.jobs.jobs(limit=100)
    passed = {j["commit_sha"] for j in jobs if j["status"] == "done" and j["outcome"] in ("pass", "flaky")}
    moved_to = {row.main_sha for row in landed.values()}
    assert moved_to <= passed and moved_to <= set(chain)  # main only ever moved to commits a run passed on
    # three and four were verified by one run and landed by one move of main
    assert landed[three].main_sha == landed[four].main_sha and landed[four].batch_size == 2
    assert {landed[three].merged_sha, landed[four].merged_sha} & passed == {landed[four].merged_sha}
    assert landed[one].batch_size == 1 and landed[one].main_sha == landed[one].merged_sha
    # each row names its landing (shared by a batch) and the run that passed on the commit main moved to
    assert landed[three].batch_id == landed[four].batch_id != landed[one].batch_id
    by_id = {j["id"]: j for j in jobs}
    for row in landed.values():
        run = by_id[row.run_id]
        assert (run["status"], run["outcome"], run["commit_sha"]) == ("done", "pass", row.main_sha)
    assert landed[three].run_id == landed[four].run_id != landed[one].run_id
    # the first run covered all four and failed; bisection then ran on a prefix before the culprit was judged
    candidate_runs = [j for j in jobs if j["purpose"] == "candidate"]
    first = min(candidate_runs, key=lambda j: j["id"])
    assert first["outcome"] == "fail" and bare.descendant_of(first["commit_sha"], shas[four])
    assert bare.descendant_of(first["commit_sha"], shas[one]) and bare.descendant_of(first["commit_sha"], shas[two])
    assert any(j["outcome"] == "pass" and j["commit_sha"] == landed[one].merged_sha for j in candidate_runs)
    assert any(j["purpose"] == "retry" for j in jobs)
    for sha in chain:
        assert sha != shas[two] and not bare.descendant_of(sha, shas[two])
    for row in landed.values():
        assert row.main_status in ("pending", "pass")
    assert await fleet.db.landing.pending_intents("demo") == []
    findings = fleet.client("rita").get("/api/v1/findings", repo="demo")["findings"]
    assert findings == [], findings


@pytest.mark.bot_env(MERGEBOT_SPECULATION_WINDOW="3", MERGEBOT_VERIFIER_WORKERS="3", MERGEBOT_BATCH_SIZE="4")
async def test_a_batch_is_bisected_at_once_and_never_spans_a_lane_being_judged(fleet: Fleet) -> None:
    """A batch of four whose first member breaks the suite, with three workers: the bisection runs on every
    free worker at once, the culprit is judged apart, and the next batch leaves out the candidate touching the
    culprit's file (its lane) until the verdict. The others land together: one move of main, one run, a row
    each."""
    # batches by count: the plain policy's bisection
    await fleet.db.repos.update_repo("demo", RulesChange.of(risk_aware=False))
    for name in ("cat", "dan", "eve"):
        _, fleet.tokens[name] = await fleet.db.agents.add_agent(name=name, role=Role.AGENT)
    subs = [(await fleet.db.subtasks.create_subtask(actor_id=None, title=t))[0]
            for t in ("breaks", "a", "b", "same", "c")]
    test = "from calc import add\n\n\ndef test_add():\n    assert add(2, 2) == {}\n"
    shas = await pushed_together(fleet, [
        ("ann", {"tests/test_calc.py": test.format(5)}),  # breaks the suite
        ("bob", {"a.txt": "a\n"}),
        ("cat", {"b.txt": "b\n"}),
        ("dan", {"tests/test_calc.py": "import os\n" + test.format(4)}),  # merges with it cleanly
        ("eve", {"c.txt": "c\n"})
    ])
    breaks, a, b, same, c = (s.id for s in subs)
    await wait_for(fleet, [a, b, same, c], {"landed"})
    await wait_for(fleet, [breaks], {"running"})

    bare = fleet.bare()
    landed = {row.subtask_id: row for row in await fleet.db.landing.landed(repo="demo")}
    assert set(landed) == {a, b, same, c}
    jobs = await fleet.db.jobs.jobs(limit=100)
    by_id = {j["id"]: j for j in jobs}
    # a, b and c: one landing, one run that passed on exactly the commit main moved to, a row each
    batch = [landed[i] for i in (a, b, c)]
    assert len({r.batch_id for r in batch}) == 1 and len({r.run_id for r in batch}) == 1
    assert {r.batch_size for r in batch} == {3} and len({r.merged_sha for r in batch}) == 3
    run = by_id[batch[0].run_id]
    assert (run["outcome"], run["commit_sha"]) == ("pass", batch[0].main_sha)
    assert landed[same].batch_id not in {r.batch_id for r in batch} and landed[same].batch_size == 1
    # the first batch failed, then one round of runs on three workers found the culprit: three runs on its
    # prefixes created together, before any of them finished
    first = min((j for j in jobs if j["purpose"] == "candidate"), key=lambda j: j["id"])
    assert first["outcome"] == "fail" and bare.descendant_of(first["commit_sha"], shas[same])
    def covers(sha: str, sid: int) -> bool:
        return sha == shas[sid] or bare.descendant_of(sha, shas[sid])

    split = [j for j in jobs if j["purpose"] == "candidate" and covers(j["commit_sha"], breaks)
             and not covers(j["commit_sha"], same)]
    assert len(split) == 3 and max(j["created_at"] for j in split) < min(j["finished_at"] for j in split), split
    # lanes: before the culprit's verdict, no run covered the candidate on its file without the culprit
    verdict_at = next(c["finished_at"] for c in await fleet.db.landing.candidates(repo="demo", subtask_id=breaks)
                      if c["status"] == "rejected")
    for j in jobs:
        if j["purpose"] == "candidate" and j["created_at"] < verdict_at and covers(j["commit_sha"], same):
            assert covers(j["commit_sha"], breaks)
    assert run["created_at"] < verdict_at  # while the other lane went on in a batch
    assert await fleet.db.landing.pending_intents("demo") == []
    findings = fleet.client("rita").get("/api/v1/findings", repo="demo")["findings"]
    assert findings == [], findings


@pytest.mark.bot_env(MERGEBOT_SPECULATION_WINDOW="3", MERGEBOT_VERIFIER_WORKERS="3")
async def test_lanes_a_failure_holds_back_only_what_touches_its_paths(fleet: Fleet) -> None:
    """The head fails alone: it is judged apart while the window refills without it. A candidate on other
    paths is verified without waiting for that verdict; one touching the same file waits for it."""
    _, fleet.tokens["cat"] = await fleet.db.agents.add_agent(name="cat", role=Role.AGENT)
    subs = [(await fleet.db.subtasks.create_subtask(actor_id=None, title=t))[0] for t in ("breaks", "same", "other")]
    shas = await pushed_together(fleet, [
        ("ann", {"calc.py": "def add(a, b):\n    return a - b\n"}),  # breaks the suite
        ("bob", {"calc.py": "def add(a, b):\n    return a + b\n\n\ndef one():\n    return 1\n"}),
        ("cat", {"other.txt": "other\n"})
    ])
    breaks, same, other = (s.id for s in subs)
    await wait_for(fleet, [same, other], {"landed"})
    await wait_for(fleet, [breaks], {"running"})

    bare = fleet.bare()
    rejected = [c for c in await fleet.db.landing.candidates(repo="demo", subtask_id=breaks)
                if c["status"] == "rejected"]
    verdict_at = rejected[0]["finished_at"]
    jobs = await fleet.db.jobs.jobs(limit=100)

    def runs_without_breaks(sid: int) -> list[dict[str, object]]:
        cand_ids = {c["id"] for c in await_cands[sid]}
        return [j for j in jobs if j["candidate_id"] in cand_ids and j["purpose"] == "candidate"
                and not bare.descendant_of(j["commit_sha"], shas[breaks])]

    await_cands = {sid: await fleet.db.landing.candidates(repo="demo", subtask_id=sid) for sid in (same, other)}
    other_runs = runs_without_breaks(other)
    same_runs = runs_without_breaks(same)
    assert other_runs and same_runs
    # the other lane went on while the failure was being judged ...
    assert min(j["created_at"] for j in other_runs) < verdict_at
    # ... while the candidate on the same file waited for the verdict before being verified without it
    assert min(j["created_at"] for j in same_runs) >= verdict_at
    assert any(j["purpose"] == "retry" for j in jobs)
    assert await fleet.db.landing.pending_intents("demo") == []


async def main_has_outcomes(fleet: Fleet) -> None:
    """A run of the check on main before the window opens, so the first candidate's tests have their baseline at
    once (without it, that candidate waits for a ``baseline`` run, and the one worker is free when it lands)."""
    repo = await fleet.db.repos.get_repo("demo")
    job = await fleet.db.jobs.enqueue_job(repo="demo", commit_sha=fleet.main(), command=repo.verifier_command,
                                          timeout_s=60, purpose="manual")
    done = await fleet.db.jobs.wait_job(job.id, timeout=90)
    assert done.status == "done" and (done.result or {}).get("tests", {}).get("source") == "pytest", done


@pytest.mark.bot_env(MERGEBOT_SPECULATION_WINDOW="3", MERGEBOT_VERIFIER_WORKERS="1", MERGEBOT_POST_LAND_RERUN="1")
async def test_post_land_checks_are_coalesced_to_main_s_newest_head(fleet: Fleet) -> None:
    """Three landings in a row with one worker: candidate runs go first, so the first head's post-land check is
    still queued when the second lands; it is cancelled and its row says ``superseded``. Main's newest head is
    always checked. (The post-land checks run again on purpose here: by default a head a run passed on reuses
    that run; and the repository lands one candidate per move of main, so there are three heads to check.)"""
    await fleet.db.repos.update_repo("demo", RulesChange.of(batch_size=1))
    await main_has_outcomes(fleet)
    _, fleet.tokens["cat"] = await fleet.db.agents.add_agent(name="cat", role=Role.AGENT)
    subs = [(await fleet.db.subtasks.create_subtask(actor_id=None, title=t))[0] for t in ("one", "two", "three")]
    await fleet.db.repos.set_paused(repo="demo", paused=True, reason="collecting a window")
    for who, name in (("ann", "one.txt"), ("bob", "two.txt"), ("cat", "three.txt")):
        fleet.start_and_push(who, {name: "x\n"})
    await fleet.db.repos.set_paused(repo="demo", paused=False, reason=None)
    await wait_for(fleet, [s.id for s in subs], {"landed"})

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        rows = {row.subtask_id: row for row in await fleet.db.landing.landed(repo="demo")}
        if all(row.main_status != "pending" for row in rows.values()):
            break
        time.sleep(0.2)
    first, second, third = (rows[s.id] for s in subs)
    assert third.main_sha == fleet.main() and third.main_status == "pass"
    assert first.main_status == "superseded"  # main moved on before a worker was free for its check
    assert second.main_status in ("pass", "superseded")  # the worker may take it before the third lands
    post = {j["landed_id"]: j["status"] for j in await fleet.db.jobs.jobs(limit=100) if j["purpose"] == "post_land"}
    assert post[first.id] == "cancelled" and post[third.id] == "done"
    assert post[second.id] == ("done" if second.main_status == "pass" else "cancelled")
    assert fleet.bare().descendant_of(third.main_sha, first.main_sha)  # the newer head's check covers it
