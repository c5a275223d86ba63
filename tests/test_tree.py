"""The pure task-tree planner: order, parents, cycles and field-named errors."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mergebot.errors import Invalid
from mergebot.tree import Node, parse_tree, parse_tree_text, plan


def test_parent_first_and_waits_for_children() -> None:
    nodes = parse_tree([{"key": "p", "title": "P", "children": [{"key": "c1", "title": "C1"},
                                                                {"key": "c2", "title": "C2", "depends_on": ["c1"]}]}])
    order = [n.key for n in nodes]
    # the parent row comes first (children name it); its wait on the children is kept apart
    assert order.index("p") < order.index("c1") < order.index("c2")
    by_key = {n.key: n for n in nodes}
    assert by_key["p"].children == ["c1", "c2"] and by_key["p"].depends_on == []
    assert by_key["c1"].parent == "p"


@pytest.mark.parametrize(("data", "field"), [
    ({"nope": 1}, "subtasks"),
    ([{"title": "no key"}], "subtasks[0].key"),
    ([{"key": "a"}], "subtasks[0].title"),
    ([{"key": "a", "title": "A", "depends_on": "b"}], "subtasks[0].depends_on"),
    ([{"key": "a", "title": "A", "priority": "high"}], "subtasks[0].priority"),
    ([{"key": "a", "title": "A", "depends_on": ["zzz"]}], "depends_on"),
    ([{"key": "a", "title": "A"}, {"key": "a", "title": "again"}], "key"),
    ([{"key": "a", "title": "A", "children": [{"key": "b", "title": "B", "depends_on": ["a"]}]}], "depends_on"),
    ([{"key": "a", "title": "A", "prio": 3}], "subtasks[0].prio"),  # misspelt: refused, never dropped
    ([{"key": "a", "title": "A", "children": [{"key": "b", "title": "B", "dependson": ["a"]}]}],
     "subtasks[0].children[0].dependson"),
])
def test_bad_trees_name_the_field(data: object, field: str) -> None:
    with pytest.raises(Invalid) as err:
        parse_tree(data)
    assert err.value.detail["field"] == field


def test_yaml_and_json_text() -> None:
    assert [n.key for n in parse_tree_text("- {key: a, title: A}\n")] == ["a"]
    assert [n.key for n in parse_tree_text('[{"key": "a", "title": "A"}]', "t.json")] == ["a"]
    with pytest.raises(Invalid):
        parse_tree_text("{{{", "t.yaml")


@given(st.integers(min_value=1, max_value=25).flatmap(
    lambda n: st.tuples(st.just(n), st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)),
                                             max_size=3 * n))))
def test_plan_orders_or_finds_a_real_cycle(case: tuple[int, list[tuple[int, int]]]) -> None:
    n, edges = case
    nodes = [Node(key=str(i), title=str(i)) for i in range(n)]
    for a, b in edges:
        nodes[a].depends_on.append(str(b))
    try:
        order = plan(nodes)
    except Invalid as e:
        cycle = e.detail["cycle"]
        assert cycle[0] == cycle[-1]
        for x, y in itertools.pairwise(cycle):
            assert (int(x), int(y)) in edges  # every step of the reported cycle is a real edge
        return
    pos = {node.key: i for i, node in enumerate(order)}
    assert len(order) == n
    for a, b in edges:
        assert pos[str(b)] < pos[str(a)]
