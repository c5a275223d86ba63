"""The tree at a glance, pure: a subtree's progress as a small bar per child, and what still blocks a node as a
graph (``page_blocking_graph``: open dependencies, breadth first, bounded), laid out in columns by distance from
the node (the node on the right, what it waits for to its left) and drawn as SVG, each box a link to its subtask.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from markupsafe import Markup, escape

from mergebot.web.present import STATUSES

BAR_W, BAR_H = 240, 12
BOX_W, BOX_H, COL_GAP, ROW_GAP, PAD = 220, 38, 50, 8, 10
LINE_CHARS, LINES = 32, 2  # a box's title: two lines of at most 32 characters at 11 px (some 200 px at most)


@dataclass
class Child:
    id: int
    title: str
    status: str
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def children(rows: list[dict[str, Any]]) -> list[Child]:
    """``page_child_progress`` rows (one per child and status) as one ``Child`` each, in id order."""
    out: dict[int, Child] = {}
    for r in rows:
        c = out.setdefault(r["id"], Child(r["id"], r["title"], r["own_status"]))
        c.counts[r["status"]] = r["n"]
    return list(out.values())


def progress(counts: Mapping[str, int]) -> Markup:
    """A subtree's statuses as one bar: a segment per status in lifecycle order, as wide as its share."""
    total = sum(counts.values()) or 1
    out, x = [f'<svg class="progress" viewBox="0 0 {BAR_W} {BAR_H}" data-total="{sum(counts.values())}">'], 0.0
    for s in STATUSES:
        if counts.get(s):
            w = BAR_W * counts[s] / total
            out.append(f'<rect class="seg st-{s}" x="{x:.2f}" y="0" width="{w:.2f}" height="{BAR_H}" '
                       f'data-status="{s}" data-n="{counts[s]}"><title>{counts[s]} {s}</title></rect>')
            x += w
    out.append("</svg>")
    return Markup("".join(out))  # noqa: S704 (statuses are ours, numbers are numbers)


def layout(rows: list[dict[str, Any]]) -> tuple[dict[int, tuple[int, int]], int, int]:
    """Each node's box position: column by hops (0 on the right), rows in id order within a column; and the
    drawing's width and height."""
    cols: dict[int, list[int]] = {}
    for r in rows:
        cols.setdefault(r["hops"], []).append(r["id"])
    deepest = max(cols, default=0)
    pos = {}
    for hops, ids in cols.items():
        x = PAD + (deepest - hops) * (BOX_W + COL_GAP)
        for i, n in enumerate(sorted(ids)):
            pos[n] = (x, PAD + i * (BOX_H + ROW_GAP))
    width = PAD * 2 + (deepest + 1) * BOX_W + deepest * COL_GAP
    height = PAD * 2 + max((len(v) for v in cols.values()), default=1) * (BOX_H + ROW_GAP)
    return pos, width, height


def wrapped(label: str) -> list[str]:
    """A box's title on its lines, broken between words; a title too long for them ends in "…" (the whole title
    is the box's hover text)."""
    return textwrap.wrap(label, LINE_CHARS, max_lines=LINES, placeholder=" …", break_on_hyphens=False) or [""]


def blocking(rows: list[dict[str, Any]]) -> Markup:
    """The open dependencies as boxes (``g.gnode``, coloured by status) and an edge (``line.edge``) from each
    dependency to what waits for it."""
    pos, width, height = layout(rows)
    out = [f'<svg class="graph" id="blocking" viewBox="0 0 {width:.0f} {height:.0f}" width="{width:.0f}" '
           f'height="{height:.0f}" role="img" '
           f'aria-label="what still blocks it" data-nodes="{len(rows)}">']
    for r in rows:
        x2, y2 = pos[r["id"]]
        for dep in r["blocked_by"]:
            x1, y1 = pos[dep]
            out.append(f'<line class="edge" x1="{x1 + BOX_W:.0f}" y1="{y1 + BOX_H / 2:.0f}" x2="{x2:.0f}" '
                       f'y2="{y2 + BOX_H / 2:.0f}" data-from="{dep}" data-to="{r["id"]}"/>')
    for r in rows:
        x, y = pos[r["id"]]
        label = f"#{r['id']} {r['title']}"
        lines = "".join(f'<tspan x="{x + 6:.0f}" y="{y + 15 + 14 * i:.0f}">{escape(line)}</tspan>'
                        for i, line in enumerate(wrapped(label)))
        out.append(f'<a href="/ui/subtasks/{r["id"]}"><g class="gnode st-{escape(r["status"])}" data-id="{r["id"]}">'
                   f'<rect x="{x:.0f}" y="{y:.0f}" width="{BOX_W}" height="{BOX_H}" rx="4"/>'
                   f'<text>{lines}</text>'
                   f'<title>{escape(label)} ({escape(r["status"])})</title></g></a>')
    out.append("</svg>")
    return Markup("".join(out))  # noqa: S704 (every text in it went through escape)
