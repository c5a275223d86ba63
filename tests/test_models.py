"""The records the stores return, and ``record``: the API's dict of one, as ``dataclasses.asdict`` gives it for
the records the API returns (flat, or with a dataclass field)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime

from mergebot.models import Agent, Evidence, Handle, Intent, Member, Subtask, record


@dataclass
class _Outer:
    name: str
    handle: Handle
    tags: list[str] = field(default_factory=list)
    kind: type = int  # a class as a value stays a value


def test_record_equals_asdict() -> None:
    now = datetime(2026, 12, 1, tzinfo=UTC)
    sub = Subtask(id=3, title="t", status="running", priority=1, claim_version=2, attempts=0, max_attempts=3,
                  owner="ann", claimed_at=now, depends_on=[1, 2])
    assert record(sub) == asdict(sub)
    assert list(record(sub)) == list(asdict(sub))  # same keys, same order
    outer = _Outer("x", Handle(3, 2), ["a"])
    assert record(outer) == asdict(outer) == {"name": "x", "handle": {"id": 3, "claim_version": 2}, "tags": ["a"],
                                              "kind": int}


def test_from_row_takes_only_the_fields() -> None:
    agent = Agent.from_row({"id": 1, "name": "ann", "role": "agent", "token_hash": b"x"})
    assert agent == Agent(1, "ann", "agent")


RUN = {"commit_sha": "m" * 40, "tree_sha": "t" * 40, "command": "pytest -q", "outcome": "pass", "exit_code": 0,
       "duration_ms": 12, "log_head": "", "log_tail": "", "log_size": 0, "log_digest": "d" * 64}


def test_evidence_is_a_record_that_round_trips_through_its_json() -> None:
    member = Member(7, 3, 2, 1, "c" * 40, "b" * 40, "m" * 40, "t" * 40)
    one = Evidence(3, 2, 1, "c" * 40, "merge", RUN, "flaky")
    batch = Evidence(3, 2, 1, "c" * 40, "merge", RUN, "pass", (member,))
    for e in (one, batch):
        assert Evidence.from_json(e.to_json()) == e
    assert "batch" not in one.to_json() and batch.to_json()["batch"] == [record(member)]


def test_evidence_written_before_its_outcome_was_a_field_still_reads() -> None:
    """An intent left pending across the upgrade: the verdict was the run's own outcome, overwritten to flaky."""
    old = {"subtask_id": 3, "claim_version": 2, "owner_id": 1, "candidate_sha": "c" * 40, "merge_kind": "merge",
           "verifier": {**RUN, "outcome": "flaky", "runs": {}}}
    assert Evidence.from_json(old).outcome == "flaky"


def test_an_intent_names_its_members_in_landing_order() -> None:
    row = {"id": 1, "candidate_id": 7, "repo": "demo", "target_ref": "refs/heads/main", "old_sha": "o" * 40,
           "new_sha": "n" * 40, "tree_sha": "t" * 40, "status": "pending",
           "evidence": Evidence(3, 2, 1, "c" * 40, "fast-forward", RUN, "pass").to_json()}
    [alone] = Intent.from_row(row).members()
    assert (alone.candidate_id, alone.base_sha, alone.merged_sha, alone.merge_kind) == (7, "o" * 40, "n" * 40,
                                                                                        "fast-forward")
    members = (Member(5, 1, 1, 1, "a" * 40, "o" * 40, "x" * 40, "u" * 40), Member(7, 3, 2, 1, "c" * 40, "x" * 40,
                                                                                  "n" * 40, "t" * 40))
    batch = Intent.from_row({**row, "evidence": Evidence(3, 2, 1, "c" * 40, "merge", RUN, "pass", members).to_json()})
    assert batch.members() == members
