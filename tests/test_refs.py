"""A subtask's branch name, made and read in one place (``mergebot.messages.refs``). Pure."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mergebot.messages.refs import GLOB, PATTERN, parse_subtask_ref, subtask_branch, subtask_ref

NUMBERS = st.integers(1, 10**18 - 1)


@given(subtask_id=NUMBERS, claim_version=NUMBERS)
def test_every_claim_makes_a_ref_that_parses_back(subtask_id: int, claim_version: int) -> None:
    ref = subtask_ref(subtask_id, claim_version)
    assert parse_subtask_ref(ref) == (subtask_id, claim_version)
    assert ref == f"refs/heads/{subtask_branch(subtask_id, claim_version)}"


@given(ref=st.text(max_size=60) | st.builds(
    lambda pre, i, v, post: f"{pre}refs/heads/subtasks/{i}/v{v}{post}",
    st.sampled_from(["", " ", "x", "/", "refs/heads/"]), st.integers(-3, 10**19) | st.text(max_size=3),
    st.integers(-3, 10**19) | st.text(max_size=3), st.sampled_from(["", "\n", "/", " ", "x", "/x", "\x00"])))
def test_whatever_parses_is_the_one_name_of_its_claim(ref: str) -> None:
    parsed = parse_subtask_ref(ref)
    if parsed is not None:
        assert ref == subtask_ref(*parsed)  # nothing before, after or inside: one name per claim


@pytest.mark.parametrize("ref", [
    "subtasks/5/v2",  # a short name: only the full ref is read
    "refs/heads/subtasks/05/v2", "refs/heads/subtasks/5/v02",  # leading zeros
    "refs/heads/subtasks/0/v2", "refs/heads/subtasks/5/v0", "refs/heads/subtasks/-5/v2", "refs/heads/subtasks/+5/v2",
    "refs/heads/subtasks/5/v2/x", "refs/heads/subtasks/5/v2\n", " refs/heads/subtasks/5/v2",
    "refs/heads/subtasks/5/2", "refs/heads/subtasks/5", "refs/heads/subtasks/v2",
    "refs/tags/subtasks/5/v2", "refs/heads/main", "refs/heads/subtasks/$(touch x)/v2",
    "refs/heads/subtasks/\u0665/v2",  # a digit, but not an ASCII one
    f"refs/heads/subtasks/{10**18}/v2",  # past 18 digits: would not fit a bigint
    PATTERN, GLOB, "",
])
def test_malformed_names_are_no_subtask_branch(ref: str) -> None:
    assert parse_subtask_ref(ref) is None


@pytest.mark.parametrize(("subtask_id", "claim_version"), [(0, 1), (1, 0), (-1, 1), (1, 10**18)])
def test_a_ref_that_would_not_parse_back_is_not_made(subtask_id: int, claim_version: int) -> None:
    with pytest.raises(ValueError, match="subtask branch"):
        subtask_ref(subtask_id, claim_version)


def test_the_names_as_agents_read_them() -> None:
    assert subtask_ref(12, 3) == "refs/heads/subtasks/12/v3"
    assert subtask_branch(12, 3) == "subtasks/12/v3"
    assert PATTERN == "refs/heads/subtasks/<id>/v<claim_version>" and GLOB == "refs/heads/subtasks/*"
