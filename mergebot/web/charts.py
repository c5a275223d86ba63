"""The charts page's pure parts: the windows an operator picks, the series drawn from the bucket rows
(``page_chart_buckets``), and the SVG itself (server-rendered: no script, no framework, nothing inline that the
CSP forbids; colours come from classes in ``pages.css``).

Every mark carries what it shows as data attributes (``data-t`` the bucket's start, ``data-v`` its value), and
a ``<title>`` for the hover text, so a test (or a curious operator) can read the chart back.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from markupsafe import Markup, escape

# name -> (window, bucket): at most 28 buckets, whatever the window
SPANS: dict[str, tuple[timedelta, timedelta]] = {
    "hour": (timedelta(hours=1), timedelta(minutes=5)),
    "day": (timedelta(days=1), timedelta(hours=1)),
    "week": (timedelta(days=7), timedelta(hours=6)),
}
DEFAULT_SPAN = "day"

WIDTH, HEIGHT = 640, 180
LEFT, RIGHT, TOP, BOTTOM = 44, 8, 10, 24


def window(span: str, now: datetime) -> tuple[datetime, datetime, timedelta]:
    """(since, until, step) for a span name: ``until`` is ``now`` rounded up to the next whole step (so buckets
    stay put between reloads), ``since`` a whole window before it."""
    length, step = SPANS[span]
    epoch = datetime(2000, 1, 1, tzinfo=UTC)
    steps = -(-(now - epoch) // step)  # ceiling
    until = epoch + steps * step
    return until - length, until, step


@dataclass(frozen=True)
class Series:
    """One line or one set of bars: a value per bucket (None where there is nothing to show)."""

    name: str
    css: str
    values: list[float | None]


@dataclass(frozen=True)
class Chart:
    key: str
    title: str
    unit: str
    kind: str  # "bars" or "lines"
    series: list[Series]


def charts(rows: list[dict[str, Any]], step: timedelta) -> list[Chart]:
    """The page's charts from the bucket rows, oldest bucket first."""
    per_hour = timedelta(hours=1) / step

    def col(name: str, scale: float = 1.0) -> list[float | None]:
        return [None if r[name] is None else float(r[name]) * scale for r in rows]

    runs_per_landing: list[float | None] = [r["runs"] / r["landings"] if r["landings"] else None for r in rows]
    return [
        Chart("landings", "Landings per hour", "per hour", "bars",
              [Series("landings per hour", "landed", col("landings", per_hour))]),
        Chart("wait", "Push to landed", "seconds", "lines",
              [Series("p50", "p50", col("wait_p50_s")), Series("p95", "p95", col("wait_p95_s"))]),
        Chart("depth", "Queue depth and candidates in flight (at each bucket's end)", "candidates", "lines",
              [Series("waiting", "waiting", col("waiting")), Series("in flight", "in-flight", col("in_flight"))]),
        Chart("failures", "Failures, flaky passes and failures main already had", "runs", "bars",
              [Series("failed", "failed", col("failures")), Series("flaky", "flaky", col("flaky")),
               Series("pre-existing", "pre-existing", col("pre_existing"))]),
        Chart("runs", "Verifier runs per landing", "runs", "lines",
              [Series("runs per landing", "runs", runs_per_landing)]),
        Chart("window", "The speculation window's width (the widest a run was queued with)", "runs at once", "lines",
              [Series("width", "width", col("window_width"))]),
    ]


def _fmt(v: float) -> str:
    return f"{v:.0f}" if v == int(v) or v >= 100 else f"{v:.2g}" if v < 1 else f"{v:.1f}"


def _ceiling(top: float) -> float:
    """A round number at or above ``top`` for the y axis."""
    if top <= 0:
        return 1.0
    base = 10 ** (len(str(int(top))) - 1) if top >= 1 else 0.1
    for m in (1, 2, 2.5, 5, 10):
        if top <= m * base:
            return m * base
    return 10 * base


def svg(chart: Chart, starts: list[datetime], label_every: int = 4) -> Markup:
    """The chart as an SVG element: a y axis with its top value, x labels under every ``label_every``-th
    bucket, one ``rect.bar`` per non-zero value (side by side per bucket) or one ``circle.point`` per value
    with a polyline per series, and a legend."""
    n = max(1, len(starts))
    values = [v for s in chart.series for v in s.values if v is not None]
    top = _ceiling(max(values, default=0.0))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    slot = plot_w / n

    def y(v: float) -> float:
        return TOP + plot_h - plot_h * v / top

    out = [f'<svg class="chart" id="chart-{chart.key}" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
           f'aria-label="{escape(chart.title)}" data-kind="{chart.kind}">',
           f'<line class="axis" x1="{LEFT}" y1="{TOP + plot_h}" x2="{WIDTH - RIGHT}" y2="{TOP + plot_h}"/>',
           f'<line class="axis" x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{TOP + plot_h}"/>',
           f'<text class="tick" x="{LEFT - 4}" y="{TOP + 8}" text-anchor="end">{_fmt(top)}</text>',
           f'<text class="tick" x="{LEFT - 4}" y="{TOP + plot_h}" text-anchor="end">0</text>']
    for i, t in enumerate(starts):
        if i % label_every == 0:
            out.append(f'<text class="tick" x="{LEFT + i * slot + 2:.1f}" y="{HEIGHT - 8}">'
                       f'{t.strftime("%H:%M" if starts[-1] - starts[0] < timedelta(days=2) else "%a %H:%M")}</text>')
    k = len(chart.series)
    for si, s in enumerate(chart.series):
        points = []
        for i, v in enumerate(s.values):
            if v is None or (chart.kind == "bars" and v == 0):
                continue
            stamp, tip = starts[i].isoformat(), f"{s.name} {starts[i]:%Y-%m-%d %H:%M}: {_fmt(v)} {chart.unit}"
            if chart.kind == "bars":
                w = max(1.0, slot * 0.8 / k)
                x = LEFT + i * slot + slot * 0.1 + si * w
                out.append(f'<rect class="bar {s.css}" x="{x:.1f}" y="{y(v):.1f}" width="{w:.1f}" '
                           f'height="{TOP + plot_h - y(v):.1f}" data-t="{stamp}" data-v="{v:g}">'
                           f'<title>{escape(tip)}</title></rect>')
            else:
                cx = LEFT + i * slot + slot / 2
                points.append(f"{cx:.1f},{y(v):.1f}")
                out.append(f'<circle class="point {s.css}" cx="{cx:.1f}" cy="{y(v):.1f}" r="3" data-t="{stamp}" '
                           f'data-v="{v:g}"><title>{escape(tip)}</title></circle>')
        if len(points) > 1:
            out.insert(5, f'<polyline class="line {s.css}" points="{" ".join(points)}"/>')
    for si, s in enumerate(chart.series):
        x = LEFT + 8 + si * 130
        out.append(f'<rect class="key {s.css}" x="{x}" y="{TOP}" width="10" height="10"/>'
                   f'<text class="legend" x="{x + 14}" y="{TOP + 9}">{escape(s.name)}</text>')
    out.append("</svg>")
    return Markup("".join(out))  # noqa: S704 (every text in it went through escape)
