"""Near-duplicate subtasks (``mergebot.similar``): what counts as the same work, and the join that finds it."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from mergebot import similar


def test_reworded_is_a_twin_and_different_numbers_are_not() -> None:
    a = similar.text("a", "Add a mul function to calc", "calc.py needs mul(a, b)")
    b = similar.text("b", "add mul function to calc.", "calc.py needs mul(a,b)")
    other_bug = similar.text("c", "Fix bug 12 in the parser")
    same_bug = similar.text("d", "Fix bug 13 in the parser")
    unrelated = similar.text("e", "Document the release process")
    assert similar.similarity(a, b) >= similar.THRESHOLD
    assert similar.similarity(other_bug, same_bug) == 0.0  # alike words, different numbers: different work
    assert similar.similarity(a, unrelated) < 0.3
    assert similar.twins([a], [b, other_bug, same_bug, unrelated]) == [("a", "b", round(similar.similarity(a, b), 3))]
    assert similar.twins([], [a, b]) == []  # pairs among existing subtasks are not reported
    rules = "Follow the house rules: type hints everywhere, tests for every branch, no new dependencies. " * 5
    parser = similar.text("p", "Port the parser module", rules)
    printer = similar.text("q", "Port the printer module", rules)
    assert similar.similarity(parser, printer) >= similar.THRESHOLD  # alike as a whole, not as titles
    assert similar.twins([parser], [printer]) == []


WORDS = ["add", "mul", "calc", "parser", "fix", "bug", "the", "in", "docs", "test", "7", "12"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.sampled_from(WORDS), min_size=1, max_size=6), min_size=0, max_size=12),
       st.integers(0, 12))
def test_the_join_finds_exactly_the_pairs_a_full_comparison_finds(titles: list[list[str]], split: int) -> None:
    texts = [similar.text(i, " ".join(t)) for i, t in enumerate(titles)]
    new, old = texts[:split], texts[split:]
    expected = set()
    for a, b in itertools.combinations(texts, 2):
        if (a in new or b in new) and similar.similarity(a, b) >= similar.THRESHOLD:
            expected.add(frozenset((a.key, b.key)))
    found = similar.twins(new, old)
    assert {frozenset((x, y)) for x, y, _ in found} == expected
    assert all(x in {t.key for t in new} for x, _, _ in found)  # the new one of each pair comes first
