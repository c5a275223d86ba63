"""The records the store returns, and ``record``: the API's dict of one, as ``dataclasses.asdict`` gives it for
the records the API returns (flat, or with a dataclass field)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime

from mergebot.models import Agent, Handle, Subtask, record


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
