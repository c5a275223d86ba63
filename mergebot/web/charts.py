"""The charts page's pure parts: the windows an operator picks, the series drawn from the bucket rows
(``page_chart_buckets``), and the SVG itself (server-rendered: no script, no framework, nothing inline that the
CSP forbids; colours come from classes in ``pages.css``).

Every mark carries what it shows as data attributes (``data-t`` the bucket's start, ``data-v`` its value), and
a ``<title>`` for the hover text, so a test (or a curious operator) can read the chart back.
"""

from __future__ import annotations

import math
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

WIDTH, HEIGHT = 640, 200
LEFT, RIGHT, TOP, BOTTOM = 62, 10, 26, 34
MOST_TICKS = 5  # intervals on the y axis, at most


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
    unit: str  # what the y axis counts, in the plural ("seconds", "landings"): its title, and every hover's
    kind: str  # "bars" or "lines"
    series: list[Series]
    whole: bool = True  # counts: the axis ticks are whole numbers


def every(step: timedelta) -> str:
    """A bucket's width in words: "5 minutes", "hour", "6 hours"."""
    minutes = int(step.total_seconds() // 60)
    if minutes % 60:
        return f"{minutes} minutes" if minutes != 1 else "minute"
    hours = minutes // 60
    return f"{hours} hours" if hours != 1 else "hour"


def charts(rows: list[dict[str, Any]], step: timedelta) -> list[Chart]:
    """The page's charts from the bucket rows, oldest bucket first. Landings are counted per bucket, and the
    chart says how wide a bucket is: one landing in five minutes is 1 per 5 minutes, never 12 per hour."""

    def col(name: str) -> list[float | None]:
        return [None if r[name] is None else float(r[name]) for r in rows]

    runs_per_landing: list[float | None] = [r["runs"] / r["landings"] if r["landings"] else None for r in rows]
    return [
        Chart("landings", f"Landings per {every(step)}", "landings", "bars",
              [Series(f"landings per {every(step)}", "landed", col("landings"))]),
        Chart("wait", "Push to landed", "seconds", "lines",
              [Series("p50", "p50", col("wait_p50_s")), Series("p95", "p95", col("wait_p95_s"))], whole=False),
        Chart("depth", "Queue depth and candidates in flight (at each bucket's end)", "candidates", "lines",
              [Series("waiting", "waiting", col("waiting")), Series("in flight", "in-flight", col("in_flight"))]),
        Chart("failures", f"Failures, flaky passes and failures main already had, per {every(step)}", "runs", "bars",
              [Series("failed", "failed", col("failures")), Series("flaky", "flaky", col("flaky")),
               Series("pre-existing", "pre-existing", col("pre_existing"))]),
        Chart("runs", "Verifier runs per landing", "runs per landing", "lines",
              [Series("runs per landing", "runs", runs_per_landing)], whole=False),
        Chart("window", "The speculation window's width (the widest a run was queued with)", "runs at once", "lines",
              [Series("width", "width", col("window_width"))]),
    ]


def _fmt(v: float) -> str:
    return f"{v:.0f}" if v == int(v) or v >= 100 else f"{v:.2g}" if v < 1 else f"{v:.1f}"


def ticks(top: float, whole: bool = True) -> list[float]:
    """The y axis's ticks: 0 up to a round value at or above ``top``, in two to ``MOST_TICKS`` equal round steps
    (1, 2, 2.5 or 5 times a power of ten; whole numbers only when ``whole``)."""
    if top <= 0:
        return [0.0, 1.0, 2.0]
    e = math.floor(math.log10(top / MOST_TICKS))  # top / MOST_TICKS is in [10^e, 10^(e+1)): 10^(e+1) fits
    steps = [m * 10.0 ** p for p in (e, e + 1) for m in (1, 2, 2.5, 5)]
    if whole:
        steps = [1.0] + [s for s in steps if s >= 1 and s == int(s)]
    step = next(s for s in sorted(steps) if math.ceil(top / s - 1e-9) <= MOST_TICKS)
    return [round(i * step, 10) for i in range(max(2, math.ceil(top / step - 1e-9)) + 1)]  # never 0 and top alone


def svg(chart: Chart, starts: list[datetime], label_every: int | None = None, width: int = WIDTH) -> Markup:
    """The chart as an SVG element: the legend above the plot; a y axis titled with the chart's unit, with a few
    round ticks (``ticks``) and a faint line across at each; x labels under every ``label_every``-th bucket (UTC;
    by default four or five labels whatever the window);
    one ``rect.bar`` per non-zero value (side by side per bucket) or one ``circle.point`` per value with a
    polyline per series. A narrower ``width`` (the queue page's small charts) keeps the text as large when the
    drawing is shown smaller."""
    n = max(1, len(starts))
    values = [v for s in chart.series for v in s.values if v is not None]
    marks = ticks(max(values, default=0.0), chart.whole)
    top = marks[-1]
    plot_w, plot_h = width - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    slot = plot_w / n
    base = TOP + plot_h

    def y(v: float) -> float:
        return base - plot_h * v / top

    out = [f'<svg class="chart" id="chart-{chart.key}" viewBox="0 0 {width} {HEIGHT}" role="img" '
           f'aria-label="{escape(chart.title)}" data-kind="{chart.kind}" data-unit="{escape(chart.unit)}">']
    for tick in marks:
        out.append(f'<line class="gridline" x1="{LEFT}" y1="{y(tick):.1f}" x2="{width - RIGHT}" y2="{y(tick):.1f}"/>'
                   f'<text class="tick y" x="{LEFT - 5}" y="{y(tick) + 3.5:.1f}" text-anchor="end" data-v="{tick:g}">'
                   f'{_fmt(tick)}</text>')
    out += [f'<line class="axis" x1="{LEFT}" y1="{base}" x2="{width - RIGHT}" y2="{base}"/>',
            f'<line class="axis" x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{base}"/>',
            f'<text class="unit" x="14" y="{TOP + plot_h / 2:.0f}" text-anchor="middle" '
            f'transform="rotate(-90 14 {TOP + plot_h / 2:.0f})">{escape(chart.unit)}</text>',
            f'<text class="unit" x="{width - RIGHT}" y="{HEIGHT - 3}" text-anchor="end">time (UTC)</text>']
    lines_at = len(out)
    label_every = label_every or max(1, n // 4)
    clock = "%H:%M" if not starts or starts[-1] - starts[0] < timedelta(days=2) else "%a %H:%M"
    for i, t in enumerate(starts):
        if i % label_every == 0:
            out.append(f'<text class="tick x" x="{LEFT + i * slot:.1f}" y="{base + 14}" text-anchor="middle">'
                       f'{t.strftime(clock)}</text>')
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
                           f'height="{base - y(v):.1f}" data-t="{stamp}" data-v="{v:g}">'
                           f'<title>{escape(tip)}</title></rect>')
            else:
                cx = LEFT + i * slot + slot / 2
                points.append(f"{cx:.1f},{y(v):.1f}")
                out.append(f'<circle class="point {s.css}" cx="{cx:.1f}" cy="{y(v):.1f}" r="3" data-t="{stamp}" '
                           f'data-v="{v:g}"><title>{escape(tip)}</title></circle>')
        if len(points) > 1:
            out.insert(lines_at, f'<polyline class="line {s.css}" points="{" ".join(points)}"/>')
    x = float(LEFT)
    for s in chart.series:
        out.append(f'<rect class="key {s.css}" x="{x:.0f}" y="6" width="10" height="10"/>'
                   f'<text class="legend" x="{x + 14:.0f}" y="15">{escape(s.name)}</text>')
        x += 34 + 7 * len(s.name)
    out.append("</svg>")
    return Markup("".join(out))  # noqa: S704 (every text in it went through escape)
