"""Admission control's rule 8 (issue 45): claims in flight count, so a lane that begins to admit lets in no flood.

A claim adds to a lane's backlog only when its work is pushed, a think time later. The lane now counts the claims
still out (running subtasks claimed for it, or for no lane, with no live candidate) against what its verifiers need
on the way by Little's law: ``max(f x rate x t, f x w, m)``, with t the measured mean time from a claim to its
push (before any claim came back, or while the lane is stale: its floor, so a cold start lets in no flood). Pure
first, with hypothesis for the cap; then on the claim route with a real database: a claim held back with a typed
answer and a sentence naming when to come back, let in once one of the claims out is pushed; a burst between two
measurements held by this replica's own count; a lane that never ran; another lane's claims and an unknown lane's
name.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mergebot.landing.intake.admission import RETRY_MIN, UNMEASURED_RETRY, Lane, decide, flight_wait
from mergebot.landing.intake.admit import Admission
from mergebot.rules import Rules
from mergebot.settings import Settings
from tests.support.lanes import Lanes, _at
from tests.support.site import SHA


def lane(*, flight: int = 0, t: float | None = 15.0, d: float | None = 10.0, slots: int = 2,
         age: float | None = 1.0) -> Lane:
    return Lane(repo="app", candidates=1, weight=1.0, run_seconds=d, slots=slots, last_run_age=age,
                in_flight=flight, push_seconds=t)


def test_the_cap_is_what_the_verifiers_clear_while_a_claim_is_out_with_the_windows_as_its_floor() -> None:
    # 10 s runs, 2 at once: 0.2 candidates a second; a claim is pushed 15 s after it is made: 3 on the way, f = 2
    got = decide(lane(flight=5), factor=2.0)
    assert (got.flight_cap, got.room) == (6.0, 1.0)
    assert flight_wait(got, let_in=0, ahead=0) is None  # one more may go
    # the sixth is out now (let in since the measurement of 5): claims come back at 5 / 15 a second, the next in
    # 3 s (one more agent ahead in line: 6 s)
    assert flight_wait(got, let_in=1, ahead=0) == 3
    assert flight_wait(got, let_in=1, ahead=1) == 6
    assert decide(lane(t=1.0), factor=2.0).flight_cap == 4.0  # the floor: f windows (w = 2 slots), as rule 2
    assert decide(lane(t=1.0), factor=2.0, min_runs=8).flight_cap == 8.0  # and m, a small team's floor
    # a lane holding a window of work (two candidates: 20 s, w x d) that clears less than its verifiers could (a
    # starved leader, a narrow window): Little's law with what it clears, 0.1 a second: 2 x 0.1 x 15 = 3, under the
    # floor of 4
    full = replace(lane(), candidates=2, weight=2.0)
    assert decide(replace(full, cleared_rate=0.1), factor=2.0).flight_cap == pytest.approx(4.0)
    assert decide(replace(full, push_seconds=60.0, cleared_rate=0.1), factor=2.0).flight_cap == pytest.approx(12.0)
    assert decide(replace(full, push_seconds=60.0, cleared_rate=5.0),
                  factor=2.0).flight_cap == pytest.approx(24.0)  # never over the rate
    # a lane with less than a window of work is waiting for work: what left it is what the claims out brought (at
    # 1x with long think times a cap from it only doubled once a think time), so the verifiers' rate takes over as
    # the window empties: in full with nothing waiting, half of the way with half a window (10 s of 20 s)
    empty = replace(lane(t=60.0), candidates=0, weight=0.0, cleared_rate=0.1)
    assert decide(empty, factor=2.0).flight_cap == pytest.approx(24.0)
    assert decide(replace(lane(t=60.0), cleared_rate=0.1), factor=2.0).flight_cap == pytest.approx(18.0)
    over = replace(full, candidates=3, weight=3.0, push_seconds=60.0, cleared_rate=0.1)
    assert decide(over, factor=2.0).flight_cap == pytest.approx(12.0)  # more than a window: what it clears
    # unmeasured (no claim pushed yet) or stale (no run lately, or ever: a cold start): the floor holds, and the
    # wait is a guess, since no claim came back to tell how long one takes
    for unknown in (decide(lane(flight=3, t=None), factor=2.0), decide(lane(flight=3, age=None), factor=2.0),
                    decide(lane(flight=3, d=None, slots=0, age=None), factor=2.0)):
        assert unknown.admit and unknown.room is not None
        assert flight_wait(unknown, let_in=int(unknown.room) - 1, ahead=0) is None
    cold = decide(lane(flight=8, t=None, d=None, slots=0, age=None), factor=2.0, min_runs=8)
    assert (cold.stale, cold.flight_cap, flight_wait(cold, let_in=0, ahead=0)) == (True, 8.0, UNMEASURED_RETRY)
    # with a line: a floor's worth of agents each guessed interval (at a thousand agents a flat 5 s was a storm)
    assert flight_wait(cold, let_in=0, ahead=7) == UNMEASURED_RETRY
    assert flight_wait(cold, let_in=0, ahead=16) == 3 * UNMEASURED_RETRY
    assert flight_wait(cold, let_in=0, ahead=10_000) == 300
    # the server's defaults (f = 2, m = 8, c = 32): a team of up to 32 starting at once is never held back
    d = Settings.model_construct()
    team = decide(lane(flight=31, t=None, d=None, slots=0, age=None), factor=d.admission_factor,
                  min_runs=d.admission_min_runs, min_claims=d.admission_min_claims)
    assert (team.flight_cap, flight_wait(team, let_in=0, ahead=0)) == (32.0, None)


@given(flight=st.integers(0, 5000), let_in=st.integers(0, 500), ahead=st.integers(0, 500),
       t=st.floats(0.0, 3600.0), d=st.floats(0.1, 600.0), slots=st.integers(1, 64), factor=st.floats(0.1, 10.0))
def test_rule_8_lets_a_claim_in_only_under_its_cap_and_never_says_come_back_never(
        flight: int, let_in: int, ahead: int, t: float, d: float, slots: int, factor: float) -> None:
    got = decide(lane(flight=flight, t=t, d=d, slots=slots), factor=factor)
    assert got.flight_cap is not None and got.flight_cap >= factor * slots * (1 - 1e-9)
    wait = flight_wait(got, let_in=let_in, ahead=ahead)
    assert (wait is None) == (flight + let_in + 1 <= got.flight_cap)
    assert wait is None or RETRY_MIN <= wait <= 300


async def _pushed_after(lanes: Lanes, seconds: float, *, cleared: int = 20, waiting: int = 21) -> None:
    """``waiting`` candidates of the lead's queued ``seconds`` after their claims, and ``cleared`` more, as long after
    theirs, that already left the queue (landed): the lane's measured time from a claim to its push, and what it
    clears. With two runs of 100 s that began 105 s ago: they cleared 10 candidates a run, so its verifiers could
    clear 2 x 10 / 100 = 0.2 a second, and 20 left in 105 s, 0.19 a second: the lesser is what counts (rule 8) while
    the lane holds a window of work (21 sure passes waiting: 21 x 100 / 10 = 210 s, over w x d = 200 s)."""
    cands = await lanes.queue(waiting + cleared, risk=0.0)
    assert lanes.owner is not None
    await _at(lanes.owner, "UPDATE subtasks SET claimed_at = claimed_at - make_interval(secs => %s) "
              "WHERE id IN (SELECT subtask_id FROM candidates WHERE id = ANY(%s))", seconds, cands)
    await _at(lanes.owner, "UPDATE subtasks SET status = 'submitted' "
              "WHERE id IN (SELECT subtask_id FROM candidates WHERE id = ANY(%s))", cands[waiting:])
    await _at(lanes.owner, "UPDATE candidates SET status = 'landed', finished_at = now() WHERE id = ANY(%s)",
              cands[waiting:])


async def test_a_lane_holds_a_claim_back_while_its_verifiers_have_enough_on_the_way(lanes: Lanes) -> None:
    await lanes.runs(100.0)  # 100 s runs, two at once
    await _pushed_after(lanes, 15.0)  # t = 15 s, 0.19 cleared a second: the cap is 2 x 0.19 x 15 = 5.7 claims out
    for i in range(6):
        await lanes.db.subtasks.create_subtask(actor_id=None, title=f"work {i}")
    out = []
    for _ in range(5):
        r = await lanes.claim("lead", repo="app")
        assert r.status_code == 200, r.text
        out.append(r.json()["subtask"]["id"])
    lane = (await lanes.api("rita", "/api/v1/summary")).json()["admission"]["lanes"][0]
    assert (lane["admitting"], lane["in_flight"]) == (True, 5) and 5.5 < lane["in_flight_cap"] < 5.75, lane

    r = await lanes.claim("bob", repo="app")  # the queue has room, but five claims are on their way to it
    assert r.status_code == 429, r.text
    err = r.json()["error"]
    assert (err["kind"], err["reason"], err["lane"], err["in_flight"], err["push_seconds"], err["in_line"]) == (
        "capacity", "in_flight", "app", 5, 15.0, 1), err
    # the next of the five is back in about 15 / 5 s less the 0.7 of a claim still free: 1 or 2 s
    assert err["retry_after"] in (1, 2) and r.headers["Retry-After"] == str(err["retry_after"]), err
    assert err["next"] and "has 5 claims out whose work is not pushed yet" in err["message"], err["message"]
    assert f"Claim again in {err['retry_after']} s" in err["message"]
    metrics = (await lanes.api("rita", "/metrics")).text
    assert 'mergebot_admission_claims_in_flight{lane="app"} 5.0' in metrics

    # one of them is pushed (15 s after its claim too): four out, and bob (first in line) is let in
    assert lanes.owner is not None
    await _at(lanes.owner, "UPDATE subtasks SET claimed_at = claimed_at - interval '15 seconds' WHERE id = %s", out[0])
    await lanes.db.landing.enqueue(superseded="newer", repo="app", subtask_id=out[0], claim_version=1,
                                   owner_id=lanes.agents["lead"].id, sha=f"{out[0] + 7:040x}",
                                   ref=f"refs/heads/subtasks/{out[0]}/v1")
    r = await lanes.claim("bob", repo="app")
    assert r.status_code == 200, r.text


async def test_a_burst_between_two_measurements_is_held_by_the_replica_s_own_count(
        lanes: Lanes, settings: Settings) -> None:
    lanes.services.admission = Admission(settings.model_copy(update={"admission_cache_seconds": 60.0}))
    await lanes.runs(100.0)
    await _pushed_after(lanes, 15.0)  # the cap: 5.7 claims out
    for i in range(8):
        await lanes.db.subtasks.create_subtask(actor_id=None, title=f"work {i}")
    got = [(await lanes.claim("lead", repo="app")).status_code for _ in range(8)]
    # measured once (0 out): five let in on this replica's count, then held though the measurement is 60 s old
    assert got == [200] * 5 + [429] * 3, got


async def test_claims_for_another_lane_do_not_count_and_an_unknown_name_counts_as_none(lanes: Lanes) -> None:
    await lanes.db.repos.create_repo(name="other", root_sha=SHA, rules=Rules.of(verifier_command="pytest -q"))
    await lanes.runs(100.0)
    await _pushed_after(lanes, 15.0)  # app: 5.7 claims out at most
    for i in range(8):
        await lanes.db.subtasks.create_subtask(actor_id=None, title=f"work {i}")
    # "other" never ran (stale, a cold start): it admits, but only its floor out at once, f x w = 2 x 2 (the
    # verifiers are shared: 2 at once); its claims are its own
    assert [(await lanes.claim("lead", repo="other")).status_code for _ in range(4)] == [200] * 4
    err = (await lanes.claim("lead", repo="other")).json()["error"]
    assert (err["reason"], err["in_flight"], err["in_flight_cap"], err["push_seconds"], err["retry_after"]) == (
        "in_flight", 4, 4.0, None, UNMEASURED_RETRY), err
    assert "none has come back yet" in err["message"] and "Claim again in 5 s" in err["message"], err["message"]
    r = await lanes.claim("lead", repo="nowhere")  # no such lane: admitted, and counted as naming none
    assert r.status_code == 200, r.text
    assert (await lanes.claim("lead", repo="app")).status_code == 200
    lanes_now = {x["lane"]: x for x in (await lanes.api("rita", "/api/v1/summary")).json()["admission"]["lanes"]}
    assert (lanes_now["app"]["in_flight"], lanes_now["other"]["in_flight"]) == (2, 5), lanes_now
    r = await lanes.claim("lead")  # naming none: it could become work for any lane; "other" is full, "app" is not
    assert r.status_code == 200, r.text
    lanes_now = {x["lane"]: x for x in (await lanes.api("rita", "/api/v1/summary")).json()["admission"]["lanes"]}
    assert (lanes_now["app"]["in_flight"], lanes_now["other"]["in_flight"]) == (3, 6), lanes_now


@pytest.mark.parametrize("t", [0.0, 0.5])
def test_a_claim_pushed_at_once_still_leaves_the_floor(t: float) -> None:
    got = decide(lane(t=t), factor=2.0)
    assert got.flight_cap == 4.0 and math.isclose(got.room or 0.0, 4.0)


async def test_a_claim_s_time_to_its_push_is_the_mean_as_little_s_law_asks(lanes: Lanes) -> None:
    """Think times are skewed: four claims pushed 2 s after they were made and one 22 s after count 6 s, not the
    median's 2 s (with the median, a lane whose agents took long now and then counted half the claims it needed on
    the way, and its cap settled on the claims already out: 100 agents offering ten times the verifiers' capacity
    kept them at 0.56-0.63 of it)."""
    await lanes.runs(100.0)
    cands = await lanes.queue(5)
    assert lanes.owner is not None
    for cand, seconds in zip(cands, (2, 2, 2, 2, 22), strict=True):
        await _at(lanes.owner, "UPDATE subtasks SET claimed_at = claimed_at - make_interval(secs => %s) "
                  "WHERE id = (SELECT subtask_id FROM candidates WHERE id = %s)", seconds, cand)
    [got] = await lanes.services.admission.decisions(lanes.db, record=False)
    assert got.push_seconds is not None and 5.9 < got.push_seconds < 6.1, got
