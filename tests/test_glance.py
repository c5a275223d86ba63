"""The tree at a glance on a subtask's page, against a real PostgreSQL: a progress bar per child that counts
its whole subtree, and the graph of what still blocks the subtask (open dependencies, breadth first, bounded to
the nearest 60), both read back from the SVG and compared with a breadth-first walk done here over the tree.
"""

from __future__ import annotations

import re
from collections import deque

from mergebot.web import graph
from mergebot.web.sample import seeds_tree
from tests.support.site import Site

NODE = re.compile(r'<g class="gnode st-([a-z]+)" data-id="(\d+)">')
EDGE = re.compile(r'<line class="edge"[^>]* data-from="(\d+)" data-to="(\d+)"/>')


async def test_children_bars_and_the_blocking_graph(site: Site) -> None:
    nodes = seeds_tree(120, 6, groups=4, prefix="g", seed=3)
    made = await site.db.subtasks.create_tree(actor_id=None, nodes=nodes)
    ids = {k: s.id for k, s in made.items()}
    by_key = {n.key: n for n in nodes}
    root = nodes[0]
    # one direction's first child is cancelled: it blocks nothing any more, and the walk stops there
    gone = by_key[by_key[root.children[0]].children[0]]
    await site.db.subtasks.cancel(subtask_id=ids[gone.key], reason="not needed", actor_id=None)
    await site.login("rita")
    html = (await site.get(f"/ui/subtasks/{ids[root.key]}")).text

    # a bar per child (the four directions), counting its whole subtree
    def size(key: str) -> int:
        return 1 + sum(size(c) for c in by_key[key].children)

    glance = html.split('id="glance"', 1)[1].split("</section>", 1)[0]
    totals = dict(re.findall(r'<tr data-id="(\d+)">.*?data-total="(\d+)"', glance))
    assert totals == {str(ids[c]): str(size(c)) for c in root.children}
    assert sum(int(n) for n in re.findall(r'data-n="(\d+)"', glance)) == size(root.key) - 1

    # what still blocks the root: a breadth-first walk over the open dependencies (a node waits for its
    # children, which it integrates, and for what it depends on), nearest 60
    def deps(key: str) -> list[str]:
        return by_key[key].children + by_key[key].depends_on

    hops = {root.key: 0}
    todo = deque([root.key])
    while todo:
        k = todo.popleft()
        for d in deps(k):
            if d not in hops and d != gone.key and hops[k] < 6:
                hops[d] = hops[k] + 1
                todo.append(d)
    near = sorted(hops, key=lambda k: (hops[k], ids[k]))[:60]
    shown = {ids[k] for k in near}
    drawn = {int(i) for _, i in NODE.findall(html)}
    assert drawn == shown and len(drawn) == 60 and ids[gone.key] not in drawn
    edges = {(int(a), int(b)) for a, b in EDGE.findall(html)}
    assert edges == {(ids[d], ids[k]) for k in near for d in deps(k) if ids[d] in shown}
    assert "the nearest 59 only" in html

    # a leaf has neither children nor blockers
    leaf = next(n for n in nodes if not n.children and not n.depends_on)
    page = (await site.get(f"/ui/subtasks/{ids[leaf.key]}")).text
    assert 'id="glance"' not in page and "Nothing open: no dependency of it is still to land." in page


def test_the_graph_lays_nodes_out_by_distance() -> None:
    rows = [{"id": 1, "hops": 0, "title": "top", "status": "blocked", "blocked_by": [2, 3]},
            {"id": 3, "hops": 1, "title": "b", "status": "ready", "blocked_by": []},
            {"id": 2, "hops": 1, "title": "a <b>", "status": "running", "blocked_by": [3]}]
    pos, width, height = graph.layout(rows)
    assert width == 2 * graph.PAD + 2 * graph.BOX_W + graph.COL_GAP and height > 2 * graph.BOX_H
    assert pos[2][0] == pos[3][0] < pos[1][0] and pos[2][1] < pos[3][1]  # further left, in id order
    drawn = graph.blocking(rows)
    assert len(NODE.findall(drawn)) == 3 and len(EDGE.findall(drawn)) == 3 and "a &lt;b&gt;" in drawn
    # a long title wraps onto the box's second line, between words; what does not fit ends in "…", and the
    # whole title is the box's hover text
    title = "formalize the counterexample search for the induction step of lemma 7 in every case"
    drawn = graph.blocking([{"id": 1, "hops": 0, "title": title, "status": "ready", "blocked_by": []}])
    lines = re.findall(r"<tspan[^>]*>([^<]*)</tspan>", drawn)
    assert lines == ["#1 formalize the counterexample", "search for the induction step …"]
    assert f"<title>#1 {title} (ready)</title>" in drawn
    assert all(len(line) <= graph.LINE_CHARS for line in lines)
    short = graph.blocking([{"id": 22, "hops": 0, "title": "L3 prove lemma 40", "status": "ready", "blocked_by": []}])
    assert re.findall(r"<tspan[^>]*>([^<]*)</tspan>", short) == ["#22 L3 prove lemma 40"]  # whole, on one line
    bar = graph.progress({"landed": 3, "ready": 1})
    widths = [float(w) for w in re.findall(r'width="([\d.]+)"', bar)]
    assert widths == [graph.BAR_W * 0.25, graph.BAR_W * 0.75]  # lifecycle order: ready before landed
