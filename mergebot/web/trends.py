"""The trends pages' router: the charts (``mergebot.web.charts``) and the run timeline (``mergebot.web.timeline``),
for a window an operator picks (last hour, day or week) and one repository or all. Like every page, each
handler takes who is looking (``deps.Who``), reads (``db.pages``), shapes and renders.
"""

from __future__ import annotations

from datetime import UTC, datetime

from fastapi import APIRouter, Request
from fastapi.responses import Response

from mergebot.web import charts as drawn
from mergebot.web import render, timeline
from mergebot.web.deps import Site, Who

router = APIRouter(include_in_schema=False)

TIMELINE_RUNS = 1000  # bars in one timeline


async def _span_and_repo(request: Request, site: Site, default: str) -> tuple[str, str | None, list[str], list[str]]:
    """The window and repository a chart page asks for: (span, repo, every repository's name, errors)."""
    q, errors = request.query_params, list[str]()
    span = q.get("span") or default
    if span not in drawn.SPANS:
        errors.append(f"span must be one of {', '.join(drawn.SPANS)}")
        span = default
    names = [r["name"] for r in await site.db.pages.repos()]
    repo = q.get("repo") or None
    if repo is not None and repo not in names:
        errors.append(f"repo must be one of {', '.join(names) or '(no repositories yet)'}")
        repo = None
    return span, repo, names, errors


@router.get("/ui/charts")
async def charts(request: Request, who: Who, site: Site) -> Response:
    span, repo, names, errors = await _span_and_repo(request, site, drawn.DEFAULT_SPAN)
    reader = site.db.pages
    since, until, step = drawn.window(span, datetime.now(UTC))
    rows = await reader.chart_buckets(since=since, until=until, step=step, repo=repo)
    starts = [r["start"] for r in rows]
    return render.html(request, "charts.html", who, errors=errors, span=span, spans=list(drawn.SPANS), repo=repo,
                       repos=names, since=since, until=until, step=step, rows=rows,
                       charts=[(c, drawn.svg(c, starts)) for c in drawn.charts(rows, step)],
                       totals={k: sum(r[k] for r in rows) for k in ("landings", "runs", "failures", "flaky",
                                                                    "pre_existing")})


@router.get("/ui/timeline")
async def run_timeline(request: Request, who: Who, site: Site) -> Response:
    span, repo, names, errors = await _span_and_repo(request, site, "hour")
    now = datetime.now(UTC)
    since, until = now - drawn.SPANS[span][0], now
    runs = await site.db.pages.timeline_runs(since=since, until=until, repo=repo, limit=TIMELINE_RUNS)
    rows = timeline.lanes(runs)
    return render.html(request, "timeline.html", who, errors=errors, span=span, spans=list(drawn.SPANS), repo=repo,
                       repos=names, since=since, until=until, runs=len(runs), capped=len(runs) >= TIMELINE_RUNS,
                       drawing=timeline.svg(rows, since, until), lanes=len(rows))
