"""The offered-load fleet benchmark's pure accounting (``python -m bench.fleet --offered``): Jain's index, the
verifiers' busy share while work waits, lost leases over a list of events, the most work in progress, the refusal
tally, reading a typed refusal, and the think times that offer a multiple of the verifier's capacity. No server."""

from __future__ import annotations

import math

from bench.common.fairness import busy_while_waiting, even_split_jain, jain, refill_gaps
from bench.fleet.offered_figures import (
    NOT_UNDER_CLAIM,
    Event,
    Refusal,
    claim_gone,
    every_refusal_named_next,
    lease_accounting,
    max_wip,
    refusal_tally,
    typed_refusal,
)
from bench.fleet.offered_report import per_agent_run_seconds, per_agent_seconds
from bench.fleet.offered_run import think_times


def test_the_benches_jain_is_the_queues_own_and_nan_when_nothing_was_shared() -> None:
    assert jain([3.0, 3.0, 3.0, 3.0]) == 1.0 and jain([5.0, 0.0, 0.0, 0.0]) == 0.25
    assert math.isnan(jain([])) and math.isnan(jain([0.0, 0.0]))

def test_busy_while_waiting_counts_only_the_moments_work_waited() -> None:
    # two workers; work waits over [0, 10); one run covers [0, 10), another [5, 10): 15 of 20 worker-seconds
    assert math.isclose(busy_while_waiting([(0, 10), (5, 10)], [(0, 4), (3, 10)], 2), 0.75)
    # runs outside the waits do not count, and more runs than workers count as all busy
    assert math.isclose(busy_while_waiting([(0, 2), (20, 30), (20, 30), (20, 30)], [(20, 25)], 2), 1.0)
    assert math.isclose(busy_while_waiting([(0, 2)], [(1, 3)], 1), 0.5)
    assert math.isnan(busy_while_waiting([(0, 1)], [], 4))


def test_the_even_split_bounds_what_a_fair_queue_scores_in_a_short_run() -> None:
    # fewer landings than agents: at best each of `units` agents got one, the rest none
    assert math.isclose(even_split_jain(503, 1000), 0.503)
    assert even_split_jain(8, 4) == 1.0
    # 6 over 4: two agents got 2, two got 1: 36 / (4 * 10)
    assert math.isclose(even_split_jain(6, 4), 0.9)
    assert math.isnan(even_split_jain(0, 4)) and math.isnan(even_split_jain(3, 0))


def test_refill_gaps_count_only_runs_that_ended_while_work_waited() -> None:
    runs = [(0.0, 1.0), (1.25, 2.0), (2.5, 3.0), (10.0, 11.0)]
    # work waits over [0, 3]: the run ending at 1 waited 0.25 for the next start, the one at 2 waited 0.5; the run
    # ending at 3 ended with nothing waiting, and the one ending at 11 has no run after it
    assert refill_gaps(runs, [(0.0, 2.9)]) == [0.25, 0.5]
    assert refill_gaps(runs, []) == []


def _events() -> list[Event]:
    gone = f"not_running:refs/heads/subtasks/2/v1: subtask 2 is ready; {NOT_UNDER_CLAIM} (`mergebot show 2`)"
    return [
        Event(0, 0, "claim", 1, 1), Event(1, 1, "claim", 2, 1), Event(2, 0, "claim", 3, 1),
        Event(5, 0, "pushed", 1, 1), Event(9, 0, "landed", 1, 1),
        # agent 1 lost subtask 2's lease while it worked: agent 2 claimed it again before agent 1 learnt of it
        Event(150, 2, "claim", 2, 2), Event(250, 1, "push_refused", 2, 1, gone),
        Event(260, 1, "given_up", 2, 1),
        # a heartbeat refused while subtask 3's landing raced it: it landed, so it was not lost
        Event(300, 0, "beat_refused", 3, 1), Event(300.2, 0, "landed", 3, 1),
        # a heartbeat refused and never landed: lost, nobody claimed it again (not redone)
        Event(310, 2, "claim", 4, 1), Event(400, 2, "beat_refused", 4, 1),
        # a push refused for another reason is not a lost claim
        Event(410, 2, "push_refused", 2, 2, "too_many_commits:brings more than 50 commits; rebase"),
    ]


def test_lease_accounting_counts_lost_claims_and_the_work_redone() -> None:
    assert lease_accounting(_events()) == {"claims": 5, "claims_lost_while_working": 2,
                                           "pushes_refused_not_under_claim": 1, "work_redone": 1}
    # git took the push but the claim had moved on before it reached the queue: the claim is gone too
    assert claim_gone("claim_superseded", "Mergebot: subtask 1 is no longer yours at claim version 2")
    assert not claim_gone("rebase_needed", "refs/heads/subtasks/1/v1: rebase onto main")
    held = [Event(0, 0, "claim", 1, 1), Event(1, 0, "pushed", 1, 1), Event(2, 0, "landed", 1, 1)]
    assert lease_accounting(held)["claims_lost_while_working"] == 0


def test_max_wip_is_the_most_claims_one_agent_held_at_once() -> None:
    assert max_wip(_events()) == {"max": 2, "agent": 0}
    many = [Event(t, 7, "claim", t, 1) for t in range(4)] + [Event(10, 7, "landed", 0, 1),
                                                             Event(11, 7, "claim", 9, 1)]
    assert max_wip(many) == {"max": 4, "agent": 7}


def test_refusals_are_tallied_by_kind_with_whether_they_named_a_next_step() -> None:
    tally = refusal_tally([Refusal("claim", "capacity", True, "lane fleet is backed up"),
                           Refusal("claim", "capacity", True), Refusal("push", "not_running", True),
                           Refusal("claim", "http_503", False, "the database is unreachable")])
    assert list(tally) == ["claim:capacity", "push:not_running", "claim:http_503"]
    assert tally["claim:capacity"] == {"n": 2, "named_next": 2, "example": "lane fleet is backed up"}
    assert not every_refusal_named_next(tally)
    assert every_refusal_named_next({k: v for k, v in tally.items() if k != "claim:http_503"})


def test_a_typed_refusal_is_read_with_its_wait_and_the_other_work_it_offers() -> None:
    body = {"error": {"code": "over_capacity", "kind": "capacity", "message": "lane fleet: 90 s of backlog",
                      "retry_after": 12.5, "other_work": [{"id": 41}, {"id": 42}]}}
    assert typed_refusal(429, body) == ("capacity", 12.5, True, [41, 42], "lane fleet: 90 s of backlog")
    wip = {"kind": "wip_limit", "message": "you hold 4", "next": "finish one first"}
    assert typed_refusal(429, wip) == ("wip_limit", None, True, [], "you hold 4")
    assert typed_refusal(503, {"error": {"code": "unavailable", "message": "db"}})[:3] == ("unavailable", None, False)
    assert typed_refusal(429, "not json")[0] == "http_429"


def test_think_times_offer_the_asked_multiple_of_the_verifiers_capacity() -> None:
    for share, g in ((0.0, 1.0), (0.1, 10.0)):
        thinks = think_times(1000, 1.0, 4, 10.0, share, g)
        assert math.isclose(sum(1.0 / t for t in thinks), 10.0 * 4)
    assert think_times(1000, 1.0, 4, 1.0) == [250.0] * 1000
    fast = think_times(10, 2.0, 2, 1.0, 0.2, 4.0)
    assert fast[0] == fast[1] == fast[2] / 4


def test_a_batch_runs_seconds_are_split_over_its_members() -> None:
    charges = [(1, 10, 4.0), (2, 10, 6.0), (2, 11, 6.0), (3, None, 9.0)]
    assert per_agent_seconds(charges, [10, 11, 12]) == {10: 7.0, 11: 3.0, 12: 0.0}


def test_a_run_s_seconds_go_to_the_candidates_it_was_started_for() -> None:
    # candidates 1 and 2 are ann's (10), 3 is bob's (11); a run of the batch 2+3, one of 1 alone, one of nobody's
    owner_of = {1: 10, 2: 10, 3: 11}
    runs = [([2, 3], 4.0), ([1], 1.0), ([None], 5.0), ([9], 2.0)]
    assert per_agent_run_seconds(runs, owner_of, [10, 11, 12]) == {10: 3.0, 11: 2.0, 12: 0.0}
