"""The trends pages' router: the charts (``mergebot.web.charts``) and the run timeline (``mergebot.web.timeline``),
for a window an operator picks (last hour, day or week; the timeline also the last 10 minutes) and one
repository or all. Like every page, each handler takes who is looking (``deps.Who``), reads (``db.pages``),
shapes and renders.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import UTC, datetime, timedelta

from fastapi import APIRouter, Request
from fastapi.responses import Response

from mergebot.web import charts as drawn
from mergebot.web import render, timeline
from mergebot.web.deps import Site, Who

router = APIRouter(include_in_schema=False)

TIMELINE_RUNS = 1000  # bars in one timeline
# the timeline's windows: the charts' plus a short one, where a burst of runs a few seconds long is wide enough
# to read (and to click) rather than slivers of a pixel
TIMELINE_SPANS = {"10min": timedelta(minutes=10), **{name: length for name, (length, _) in drawn.SPANS.items()}}


async def _span_and_repo(request: Request, site: Site, spans: Collection[str], default: str
                         ) -> tuple[str, str | None, list[str], list[str]]:
    """The window (one of ``spans``) and repository a chart page asks for: (span, repo, every repository's name,
    errors)."""
    q, errors = request.query_params, list[str]()
    span = q.get("span") or default
    if span not in spans:
        errors.append(f"span must be one of {', '.join(spans)}")
        span = default
    names = [r["name"] for r in await site.db.pages.repos()]
    repo = q.get("repo") or None
    if repo is not None and repo not in names:
        errors.append(f"repo must be one of {', '.join(names) or '(no repositories yet)'}")
        repo = None
    return span, repo, names, errors


@router.get("/ui/charts")
async def charts(request: Request, who: Who, site: Site) -> Response:
    span, repo, names, errors = await _span_and_repo(request, site, drawn.SPANS, drawn.DEFAULT_SPAN)
    reader = site.db.pages
    since, until, step = drawn.window(span, datetime.now(UTC))
    rows = await reader.chart_buckets(since=since, until=until, step=step, repo=repo)
    starts = [r["start"] for r in rows]
    totals = {k: sum(r[k] for r in rows) for k in ("landings", "runs", "failures", "flaky", "pre_existing")}
    return render.html(request, "charts.html", who, errors=errors, span=span, spans=list(drawn.SPANS), repo=repo,
                       repos=names, since=since, until=until, bucket=drawn.every(step), rows=rows,
                       charts=[(c, drawn.svg(c, starts)) for c in drawn.charts(rows, step)], totals=totals,
                       hourly=totals["landings"] / ((until - since) / timedelta(hours=1)))


@router.get("/ui/timeline")
async def run_timeline(request: Request, who: Who, site: Site) -> Response:
    span, repo, names, errors = await _span_and_repo(request, site, TIMELINE_SPANS, "hour")
    now = datetime.now(UTC)
    since, until = now - TIMELINE_SPANS[span], now
    runs = await site.db.pages.timeline_runs(since=since, until=until, repo=repo, limit=TIMELINE_RUNS)
    rows, start = timeline.lanes(runs), timeline.fit(runs, since, until)
    return render.html(request, "timeline.html", who, errors=errors, span=span, spans=list(TIMELINE_SPANS), repo=repo,
                       repos=names, since=since, until=until, start=start, runs=len(runs),
                       capped=len(runs) >= TIMELINE_RUNS, drawing=timeline.svg(rows, start, until), lanes=len(rows))
