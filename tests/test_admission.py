"""Admission control at claim time and each agent's cap on work in progress (issue 45).

The decision is pure (``mergebot.landing.intake.admission``) and tested alone first, with hypothesis for its
hysteresis and its failing open. Then the claim route in process on a real database: a lane's backlog made of
queued candidates and verify runs recorded at known lengths through the stores (a real push and check would take
seconds each), refused with a typed ``capacity`` answer past the threshold, admitted again only under the low mark,
and shown on ``/metrics``, the status summary and the queue page; stale measurements and admission off admit; a
claim with ``wait`` is admitted once the backlog drains. The cap is refused naming what the agent holds, over HTTP
in process, and through a real server by ``mergebot start`` and the MCP tool.
"""

from __future__ import annotations

import asyncio
import math
import os
import subprocess
import sys
from dataclasses import replace

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mergebot.cli.render import render_status
from mergebot.landing.intake.admission import LOW, Lane, Standing, cap_for, caps, decide, stale_after, turn
from mergebot.landing.intake.admit import Admission
from mergebot.landing.window.fair import RECENT_RUNS, predicted_seconds, verifier_seconds
from mergebot.rules import Rules
from mergebot.settings import Settings
from tests.support.bot import Fleet
from tests.support.lanes import Lanes
from tests.support.site import SHA

# -- the decision, pure ---------------------------------------------------------------------------------------------


def lane(n: float, *, admitting: bool = True, d: float | None = 10.0, slots: int = 2, age: float | None = 1.0,
         window: int = 0, per_run: float = 1.0) -> Lane:
    return Lane(repo="app", candidates=math.ceil(n), weight=n, run_seconds=d, slots=slots, last_run_age=age,
                window=window, admitting=admitting, per_run=per_run)


def test_the_threshold_is_factor_windows_of_work_and_the_retry_the_time_to_the_low_mark() -> None:
    # d = 10 s, 2 slots, an automatic window (2 wide): one window of work is 20 verifier-seconds, T = 2 x 20
    over = decide(lane(5), factor=2.0)
    assert (over.admit, over.backlog_seconds, over.threshold_seconds, over.low_seconds) == (False, 50, 40, 30)
    assert over.retry_after == 10  # (50 - 30) / 2 slots
    assert decide(lane(4), factor=2.0).admit  # at the threshold: not over it
    assert not decide(lane(3), factor=1.0).admit  # a smaller factor refuses sooner
    assert decide(lane(5, window=4), factor=2.0).admit  # a repository's own wider window: T = 2 x 4 x 10
    assert decide(lane(10_000), factor=2.0).retry_after == 300  # never told to wait for ever
    assert decide(lane(5), factor=2.0, min_runs=8).admit  # under the floor of 8 runs: a small queue admits
    assert not decide(lane(9), factor=2.0, min_runs=8).admit
    batched = decide(lane(16, per_run=4.0), factor=2.0)  # batches of four: a run clears four candidates
    assert batched.admit and batched.backlog_seconds == 40
    assert decide(lane(5, per_run=0.5), factor=2.0).backlog_seconds == 50  # fewer than one a run counts as one


def test_a_refusing_lane_frees_a_slot_per_candidate_gone_and_gives_it_to_the_head_of_its_line() -> None:
    full = lane(3.5, admitting=False)  # d = 10 s, 2 slots: it clears one candidate every 5 s; 35 s within [30, 40]
    assert decide(full, factor=2.0).free == 0 and decide(full, factor=2.0).rate == 0.2
    three = decide(replace(full, freed=4, admitted=1), factor=2.0)  # four gone since it refused, one let in
    assert (three.admit, three.free, three.spent) == (False, 3, False)
    over = decide(replace(full, weight=4.5, freed=4, admitted=1), factor=2.0)  # 45 s: over the threshold
    assert (over.free, over.spent) == (0, True)  # no slot, and the three freed are written off
    # the first three in line
    assert turn(three, Standing(ahead=0)) == (True, 0) and turn(three, Standing(ahead=2)) == (True, 0)
    # the fourth waits for the next candidate to leave, in 5 s, but the lane drains to its low mark sooner (rule 4)
    assert turn(three, Standing(ahead=3)) == (False, 3)
    far = decide(replace(full, weight=20.0), factor=2.0)  # 200 s: 80 s to the threshold, 85 to the low mark
    assert (far.opens_in, far.retry_after) == (80.0, 85)
    assert turn(far, Standing(ahead=0)) == (False, 85)  # within the threshold in 80 s, then the first slot in 5
    later = replace(far, retry_after=300)
    assert turn(later, Standing(ahead=0)) == (False, 85)
    assert turn(later, Standing(ahead=1)) == (False, 90)  # the next in line, one slot later
    room = decide(lane(1), factor=2.0)
    assert turn(room, Standing(served=30, ahead=99)) == (True, 0)  # an admitting lane nobody waits for
    # rule 7: with a line, it lets in the agents served within one run (d = 10 s) of the least served waiting
    # (verifier-seconds: a quarter of a batch's run counts a quarter); the others come back soon
    assert turn(room, Standing(served=10, ahead=0, least=10)) == (True, 0)
    assert turn(room, Standing(served=17.5, ahead=0, least=10)) == (True, 0)
    # ... when the lane's rate (0.2 a second) reaches their place, never sooner (a thousand agents polling within
    # seconds starved the server), at most RETRY_MAX
    assert turn(room, Standing(served=20, ahead=3, least=10)) == (False, 20)
    assert turn(room, Standing(served=20, ahead=0, least=5)) == (False, 5)
    assert turn(room, Standing(served=20, ahead=999, least=0)) == (False, 300)


@given(n=st.floats(0, 1000), last=st.booleans(), d=st.floats(0.1, 3600), slots=st.integers(1, 64),
       factor=st.floats(0.1, 10))
def test_within_the_band_a_lane_keeps_its_state_and_outside_it_follows_the_backlog(
        n: float, last: bool, d: float, slots: int, factor: float) -> None:
    got = decide(lane(n, admitting=last, d=d, slots=slots, age=0.0), factor=factor)
    low, high = LOW * got.threshold_seconds, got.threshold_seconds
    if low <= got.backlog_seconds <= high:
        assert got.admit == last  # no flapping inside [low mark, threshold]
    elif got.backlog_seconds > high:
        assert not got.admit and got.retry_after >= 1
    else:
        assert got.admit and got.retry_after == 0


@given(walk=st.lists(st.floats(0, 12), min_size=1, max_size=40))
def test_a_lane_flips_only_across_the_whole_band(walk: list[float]) -> None:
    """A backlog wandering anywhere: between two flips the backlog crossed from one side of the band to the
    other (over the threshold to refuse, under the low mark to admit)."""
    admitting = True
    for n in walk:
        got = decide(lane(n, admitting=admitting), factor=2.0)
        if got.admit != admitting:
            assert (n * 10 > 40) if admitting else (n * 10 < 30)
        admitting = got.admit


@given(n=st.floats(0, 1e6), last=st.booleans(), d=st.one_of(st.none(), st.floats(0.1, 600)),
       age=st.one_of(st.none(), st.floats(0, 1e6)), slots=st.integers(0, 8))
def test_stale_measurements_admit(n: float, last: bool, d: float | None, age: float | None, slots: int) -> None:
    stale = d is None or age is None or age > stale_after(d) or slots == 0
    got = decide(lane(n, admitting=last, d=d, age=age, slots=slots), factor=2.0)
    assert got.stale == stale
    if stale:
        assert got.admit and got.retry_after == 0


def test_caps_are_per_role_with_an_agent_s_own_first() -> None:
    c = caps("agent=4, lead=8,ann=2,rita=0")
    assert cap_for(c, name="ann", role="agent") == 2
    assert cap_for(c, name="bob", role="agent") == 4
    assert cap_for(c, name="lea", role="lead") == 8
    assert cap_for(c, name="rita", role="agent") is None  # 0: no cap
    assert cap_for(c, name="root", role="admin") is None  # a role not named: no cap
    assert cap_for(caps(""), name="ann", role="agent") is None
    with pytest.raises(ValueError):
        Settings(agent_wip="agent=four")


# -- the claim route, in process on a real database -------------------------------------------------------------------


async def test_a_full_lane_answers_capacity_and_admits_again_only_under_its_low_mark(lanes: Lanes) -> None:
    await lanes.runs(10.0)  # 10 s runs, two at once: T = 2 x 2 x 10 = 40 s, the low mark 30 s
    cands = await lanes.queue(5)  # 50 s of work
    await lanes.db.subtasks.create_subtask(actor_id=None, title="ready work")
    r = await lanes.claim("ann", repo="app")
    # told to come back when the next slot frees: the backlog is back at the threshold in 5 s (10 s of work over it,
    # 2 runs at once), and a candidate leaves every 5 s (two runs of 10 s at once, one candidate each): in 10 s
    assert r.status_code == 429 and r.headers["Retry-After"] == "10", r.text
    err = r.json()["error"]
    assert (err["code"], err["kind"], err["lane"], err["backlog_seconds"], err["candidates"]) == (
        "capacity", "capacity", "app", 50.0, 5)
    assert (err["threshold_seconds"], err["capacity"], err["retry_after"], err["ready"]) == (40.0, 2, 10, 1)
    assert err["elsewhere"] == [] and "Claim again in 10 s" in err["message"], err["message"]
    assert err["in_line"] == 1 and err["lanes"][0]["free_slots"] == 0

    # a second repository, whose verifiers have not run lately: stale, so it admits; it is named as elsewhere, and
    # a claim naming no repository is admitted (the work may go there)
    await lanes.db.repos.create_repo(name="other", root_sha=SHA, rules=Rules.of(verifier_command="pytest -q"))
    r = await lanes.claim("ann", repo="app")
    assert [e["lane"] for e in r.json()["error"]["elsewhere"]] == ["other"]
    assert "claim for other instead" in r.json()["error"]["message"]

    # the views show it: /metrics, the status summary, the queue page
    metrics = (await lanes.api("rita", "/metrics")).text
    assert 'mergebot_admission_admitting{lane="app"} 0.0' in metrics
    assert 'mergebot_admission_backlog_seconds{lane="app"} 50.0' in metrics
    assert 'mergebot_admission_capacity{lane="app"} 2.0' in metrics
    assert 'mergebot_claim_refusals_total{lane="app",reason="capacity"} 2.0' in metrics, [
        line for line in metrics.splitlines() if "refusals" in line]
    assert 'mergebot_admission_admitting{lane="other"} 1.0' in metrics
    status = (await lanes.api("rita", "/api/v1/summary")).json()
    summary = status["admission"]
    assert summary["on"] and [(x["lane"], x["admitting"]) for x in summary["lanes"]] == [("app", False),
                                                                                         ("other", True)]
    text = render_status(status)  # mergebot status
    assert "app: refusing claims (try again in 10 s); backlog 50 s in 5 candidates, admits up to 40 s" in text, text
    await lanes.login("rita")
    page = (await lanes.get("/ui/queue")).text
    assert 'id="admission-app" data-admitting="0"' in page and "refusing claims" in page

    await lanes.done(cands[0], cands[1])  # 30 s: at the low mark, not under it: still refusing (hysteresis), but
    # two candidates left the queue since it began to refuse, with the backlog within the threshold: two free slots
    lane = (await lanes.api("rita", "/api/v1/summary")).json()["admission"]["lanes"][0]
    assert (lane["admitting"], lane["free_slots"]) == (False, 2), lane
    r = await lanes.claim("ann", repo="app")
    assert r.status_code == 200 and r.json()["subtask"]["title"] == "ready work", r.text
    assert (await lanes.claim("bob", repo="app")).status_code == 204  # the second slot; nothing is ready
    r = await lanes.claim("bob", repo="app")  # no slot left
    assert r.status_code == 429 and r.json()["error"]["lanes"][0]["free_slots"] == 0, r.text
    await lanes.done(cands[2])  # 20 s: under the low mark, admitting again
    assert (await lanes.claim("bob", repo="app")).status_code == 204
    await lanes.queue(2)  # 40 s: at the threshold again, and admitting: admitted
    assert (await lanes.api("rita", "/api/v1/summary")).json()["admission"]["lanes"][0]["admitting"] is True


async def test_a_full_lane_gives_each_freed_slot_to_the_least_served_agent_in_line(lanes: Lanes) -> None:
    await lanes.runs(10.0)  # T = 40 s, as above
    await lanes.db.subtasks.create_subtask(actor_id=None, title="early")
    assert (await lanes.claim("lead", repo="app")).status_code == 200  # admitted while admitting: one claim made
    cands = await lanes.queue(5)  # 50 s: full
    for title in ("one", "two"):
        await lanes.db.subtasks.create_subtask(actor_id=None, title=title)

    def line(r: httpx.Response) -> int:
        assert r.status_code == 429, r.text
        return int(r.json()["error"]["in_line"])

    assert line(await lanes.claim("lead", repo="app")) == 1  # alone in line
    assert line(await lanes.claim("bob", repo="app")) == 1  # bob has made no claim yet: ahead of the lead
    assert line(await lanes.claim("lead", repo="app")) == 2
    await lanes.done(cands[0])  # one candidate left the queue: one free slot, and it is bob's
    r = await lanes.claim("lead", repo="app")
    assert line(r) == 2 and r.json()["error"]["lanes"][0]["free_slots"] == 1
    r = await lanes.claim("bob", repo="app")
    assert r.status_code == 200 and r.json()["subtask"]["title"] == "one", r.text
    assert line(await lanes.claim("lead", repo="app")) == 1  # first in line now, but no slot is free
    await lanes.done(cands[1])
    r = await lanes.claim("lead", repo="app")
    assert r.status_code == 200 and r.json()["subtask"]["title"] == "two", r.text
    assert (await lanes.api("rita", "/api/v1/summary")).json()["admission"]["lanes"][0]["admitting"] is False

    # rule 7: bob (one claim) waits in line; the lane drains under its low mark and admits again, but not the lead
    # (two claims) before bob
    await lanes.db.subtasks.create_subtask(actor_id=None, title="three")
    assert line(await lanes.claim("bob", repo="app")) == 1
    await lanes.done(*cands[2:])
    r = await lanes.claim("lead", repo="app")
    err = r.json()["error"]
    # (served: a claim not yet run counts as one run of the lane, 10 s)
    assert r.status_code == 429 and (err["kind"], err["reason"], err["claims"], err["served"],
                                     err["least_waiting"]) == ("capacity", "fair_share", 2, 20, 10), r.text
    assert "less of the verifiers' time than you (10 verifier-seconds against your 20" in err["message"], err
    assert err["lanes"][0]["admitting"] is True
    r = await lanes.claim("bob", repo="app")
    assert r.status_code == 200 and r.json()["subtask"]["title"] == "three", r.text
    # nobody waits now, but rule 8 holds the lead back: the four claims made above (early, one, two, three) are out
    # and were never pushed (the queue's helper pushes at once, so a claim's measured time to its push is 0 and the
    # cap its floor, f x w = 4)
    err = (await lanes.claim("lead", repo="app")).json()["error"]
    assert (err["reason"], err["in_flight"], err["in_flight_cap"]) == ("in_flight", 4, 4.0), err


async def test_stale_measurements_and_admission_off_admit(lanes: Lanes, settings: Settings) -> None:
    await lanes.runs(10.0, ago=3600)  # the last run finished an hour ago: nobody knows what the verifiers do now
    await lanes.queue(6)
    assert (await lanes.claim("ann", repo="app")).status_code == 204  # admitted; nothing is ready
    await lanes.runs(10.0)  # fresh again: 60 s of work is over the threshold of 40
    assert (await lanes.claim("ann", repo="app")).status_code == 429
    lanes.services.admission = Admission(settings.model_copy(update={"admission": "off"}))
    assert (await lanes.claim("ann", repo="app")).status_code == 204
    await lanes.login("rita")
    assert "admission control is off" in (await lanes.get("/ui/queue")).text
    summary = (await lanes.api("rita", "/api/v1/summary")).json()["admission"]
    assert summary["on"] is False and summary["lanes"][0]["admitting"] is True


async def test_a_claim_with_wait_is_admitted_when_the_backlog_drains(lanes: Lanes) -> None:
    await lanes.runs(1.0)  # 1 s runs, two at once: T = 4 s, the low mark 3 s; retry after 1 s
    cands = await lanes.queue(6)
    sub, _ = await lanes.db.subtasks.create_subtask(actor_id=None, title="worth the wait")
    assert (await lanes.claim("ann", repo="app")).status_code == 429
    waiting = asyncio.create_task(lanes.claim("ann", repo="app", wait=20))
    await asyncio.sleep(0.3)
    assert not waiting.done()  # held: the lane is full
    await lanes.done(*cands[:4])
    r = await asyncio.wait_for(waiting, 10)
    assert r.status_code == 200 and r.json()["subtask"]["id"] == sub.id, r.text


async def test_the_backlog_and_the_fair_orders_charge_count_one_prediction_of_a_run(lanes: Lanes) -> None:
    """A single run of 10 s and a run of three named checks of 30 s side by side (30 s of wall time, 90
    verifier-seconds): one run is predicted at their median, 50 verifier-seconds (``predicted_run``, and
    ``fair.predicted_seconds`` in Python), and a candidate estimated to fail one time in four costs 1.25 runs of
    it in admission's backlog and in its owner's fair charge alike. Twenty newer runs of 4 s then outvote both."""
    await lanes.runs(10.0, n=1)
    await lanes.group(30.0, checks=3)
    assert predicted_seconds([verifier_seconds([30.0] * 3), 10.0]) == 50.0
    assert await lanes.predicted() == (50.0, 2)
    [first] = await lanes.queue(1, risk=0.25)
    assert await lanes.backlog() == pytest.approx(62.5)
    taken = await lanes.db.landing.next_candidate("app")
    assert taken is not None and taken.id == first
    assert await lanes.served() == pytest.approx(62.5)

    await lanes.runs(4.0, n=RECENT_RUNS)  # only the newest RECENT_RUNS runs count
    assert await lanes.predicted() == (4.0, RECENT_RUNS)
    [second] = await lanes.queue(1, risk=0.25)
    assert await lanes.backlog() == pytest.approx(2 * 1.25 * 4.0)  # the verifying one and the queued one
    taken = await lanes.db.landing.next_candidate("app")
    assert taken is not None and taken.id == second
    assert await lanes.served() == pytest.approx(62.5 + 1.25 * 4.0)


async def test_the_cap_refuses_naming_what_the_agent_holds(lanes: Lanes) -> None:
    for title in ("first", "second", "third", "fourth"):
        await lanes.db.subtasks.create_subtask(actor_id=None, title=title, idempotency_key=f"key-{title}")
    first = (await lanes.claim("ann")).json()
    r = await lanes.claim("ann")
    assert r.status_code == 429, r.text
    err = r.json()["error"]
    assert (err["code"], err["kind"], err["agent"], err["cap"]) == ("wip_limit", "wip_limit", "ann", 1)
    assert [(h["id"], h["key"], h["status"]) for h in err["holds"]] == [(first["subtask"]["id"], "key-first",
                                                                         "running")]
    assert f"subtask {first['subtask']['id']} [key-first] (running)" in err["message"]
    assert "release" in err["message"] and "Retry-After" not in r.headers
    # completing and claiming at once: the completion is done, the claim still refused (submitted work is held)
    done = {"id": first["subtask"]["id"], "claim_version": first["subtask"]["claim_version"], "sha": "e" * 40}
    r = await lanes.claim("ann", complete=done)
    assert r.status_code == 429 and r.json()["error"]["completed"] == first["subtask"]["id"]
    assert (await lanes.db.subtasks.get_subtask(first["subtask"]["id"])).status == "submitted"
    # bob, an agent of the default cap here (2), takes two
    assert [(await lanes.claim("bob")).status_code for _ in range(3)] == [200, 200, 429]
    assert 'mergebot_claim_refusals_total{lane="",reason="wip_limit"} 3.0' in (await lanes.api("rita", "/metrics")).text


# -- the cap through a real server: the command line and the MCP tool ----------------------------------------------


@pytest.mark.bot_env(MERGEBOT_AGENT_WIP="agent=1")
async def test_start_and_the_mcp_tool_tell_the_cap_as_a_sentence_and_a_record(fleet: Fleet) -> None:
    from tests.test_mcp import call, mcp_session

    for title in ("one", "two"):
        await fleet.db.subtasks.create_subtask(actor_id=None, title=title)
    held, _ = fleet.start("ann")
    env = {**os.environ, "MERGEBOT_URL": fleet.bot.url, "MERGEBOT_TOKEN": fleet.tokens["ann"]}
    out = subprocess.run([sys.executable, "-m", "mergebot", "start", "--repo", "demo", "--dir",
                          str(fleet.work / "ann-2")], capture_output=True, text=True, env=env, check=False, timeout=120)
    assert out.returncode == 8, out.stdout + out.stderr
    assert "Traceback" not in out.stderr and f"subtask {held.subtask_id} (running)" in out.stderr, out.stderr
    assert "give one back" in out.stderr
    async with mcp_session(fleet, "ann") as ann:
        got = await call(ann, "claim_and_start", repo="demo", dir=str(fleet.work / "ann-3"))
    assert got["refused"] == "wip_limit" and got["claimed"] is None, got
    assert [h["id"] for h in got["holds"]] == [held.subtask_id] and "give one back" in got["message"]
    assert not (fleet.work / "ann-3").exists()
