"""The run timeline's pure parts: verify runs packed into lanes (one lane per run a worker had going at once:
its slots), and the SVG, one bar per run coloured by purpose (fill) and outcome (outline), each a link to its
candidate's log (or the run's own log when it judged no candidate), with each lane's busy share at its end, so
idle workers show as empty stretches and a low share.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from markupsafe import Markup, escape

WIDTH, LANE, LABEL, SHARE = 1000, 20, 180, 60


@dataclass(frozen=True)
class Lane:
    worker: str
    slot: int
    runs: list[dict[str, Any]]

    def busy(self, since: datetime, until: datetime) -> float:
        """The share of the window this lane spent running (its runs do not overlap)."""
        span = (until - since).total_seconds()
        used = sum((min(r["finished_at"], until) - max(r["started_at"], since)).total_seconds() for r in self.runs)
        return max(0.0, min(1.0, used / span)) if span > 0 else 0.0


def lanes(runs: list[dict[str, Any]]) -> list[Lane]:
    """Each worker's runs (sorted by start) in the fewest lanes where no two runs of a lane overlap: a run goes
    to the worker's first lane that is free at its start. Workers in name order, their lanes in slot order."""
    by_worker: dict[str, list[Lane]] = {}
    for r in sorted(runs, key=lambda r: (r["started_at"], r["id"])):
        worker = r["worker_name"] or "(unnamed worker)"
        mine = by_worker.setdefault(worker, [])
        free = next((lane for lane in mine if lane.runs[-1]["finished_at"] <= r["started_at"]), None)
        if free is None:
            free = Lane(worker, len(mine) + 1, [])
            mine.append(free)
        free.runs.append(r)
    return [lane for worker in sorted(by_worker, key=_natural) for lane in by_worker[worker]]


def _natural(name: str) -> list[Any]:
    """A sort key that puts "vm/1/2" before "vm/1/10"."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


# a worker's name: "[agent:]host/pid/slot" (``mergebot.verify.worker.worker_name``, an HTTP worker's prefixed
# with its agent's name by the server)
WORKER = re.compile(r"^(?:(?P<agent>[^:/]+):)?(?P<host>[^/]+)/(?P<pid>\d+)/(?P<slot>\d+)$")


def labels(rows: list[Lane]) -> list[str]:
    """Each lane's label, in words a person reads: "worker vm · slot 2", its machine (and the agent an HTTP
    worker runs as) and its slot, numbered from 1 per machine across its processes in the drawing; a worker
    whose name is not of that form keeps its name, with its lanes numbered."""
    out, seen = [], dict[str, int]()
    for lane in rows:
        m = WORKER.match(lane.worker)
        host = (f"{m['agent']} on {m['host']}" if m["agent"] else m["host"]) if m else lane.worker
        seen[host] = seen.get(host, 0) + 1
        out.append(f"worker {host[:14]} · slot {seen[host]}" if m else f"{host[:20]} · slot {lane.slot}")
    return out


def fit(runs: list[dict[str, Any]], since: datetime, until: datetime) -> datetime:
    """Where the drawing starts: the window's start, or, when every run in it started later, just before the first
    of them (a margin of a twentieth of what is drawn), so that a burst of short runs fills the width instead of a
    few pixels at its end. The idle time before the first run is then off the drawing, and the busy shares are of
    the drawn time."""
    first = min((r["started_at"] for r in runs), default=since)
    if first <= since:
        return since
    return max(since, first - (until - first) / 19)


def _href(r: dict[str, Any]) -> str:
    return f"/ui/candidates/{r['candidate_id']}/log" if r["candidate_id"] else f"/ui/jobs/{r['id']}/log"


def _before(run: dict[str, Any]) -> str:
    """The stages before a candidate's run started, for its bar's tooltip (``cost.stages``' first ones)."""
    marks = [("pushed", run.get("pushed_at")), ("queued", run.get("queued_at")), ("merged", run.get("merged_at")),
             ("run asked for", run.get("created_at")), ("started", run.get("started_at"))]
    known = [(name, t) for name, t in marks if t is not None]
    steps = [f"{a} → {b} {(tb - ta).total_seconds():.2f} s" for (a, ta), (b, tb) in itertools.pairwise(known)
             if tb >= ta]
    return ("; " + ", ".join(steps)) if len(steps) > 1 else ""


def svg(rows: list[Lane], since: datetime, until: datetime) -> Markup:
    plot = WIDTH - LABEL - SHARE
    span = max(1.0, (until - since).total_seconds())

    def x(t: datetime) -> float:
        return LABEL + plot * max(0.0, min(1.0, (t - since).total_seconds() / span))

    height = LANE * max(1, len(rows)) + 24
    clock = "%H:%M:%S" if until - since < timedelta(minutes=10) else "%H:%M"
    out = [f'<svg class="timeline" id="timeline" viewBox="0 0 {WIDTH} {height}" role="img" '
           f'aria-label="verify runs per worker slot" data-lanes="{len(rows)}">']
    for i in range(5):
        t = since + (until - since) * i / 4
        out.append(f'<line class="grid" x1="{x(t):.1f}" y1="0" x2="{x(t):.1f}" y2="{height - 18}"/>'
                   f'<text class="tick" x="{x(t):.1f}" y="{height - 6}" text-anchor="middle">{t:{clock}}</text>')
    for n, (lane, label) in enumerate(zip(rows, labels(rows), strict=True)):
        y = n * LANE
        out.append(f'<g class="lane" data-worker="{escape(lane.worker)}" data-slot="{lane.slot}">'
                   f'<text class="lane-name" x="4" y="{y + 14}">{escape(label)}'
                   f'<title>{escape(lane.worker)}</title></text>')
        for r in lane.runs:  # wait lines first: a later run's wait may lie across an earlier bar, never over it
            if r.get("created_at") and r["created_at"] < r["started_at"]:  # waiting for a worker, drawn faint
                w0, x0 = x(r["created_at"]), x(r["started_at"])
                out.append(f'<rect class="wait" x="{w0:.1f}" y="{y + LANE // 2 - 1}" width="{max(0.0, x0 - w0):.1f}" '
                           f'height="2" data-job="{r["id"]}"/>')
        for r in lane.runs:
            x0, x1 = x(r["started_at"]), x(r["finished_at"])
            outcome = r["outcome"] or r["status"]
            seconds = (r["finished_at"] - r["started_at"]).total_seconds()
            tip = (f"run {r['id']} ({r['purpose']}): {outcome}, {seconds:.0f} s from {r['started_at']:%H:%M:%S}"
                   + (f", candidate {r['candidate_id']}" if r["candidate_id"] else "") + _before(r))
            out.append(f'<a href="{_href(r)}"><rect class="run purpose-{escape(r["purpose"])} '
                       f'outcome-{escape(outcome)}" x="{x0:.1f}" y="{y + 3}" width="{max(1.5, x1 - x0):.1f}" '
                       f'height="{LANE - 6}" data-job="{r["id"]}"><title>{escape(tip)}</title></rect></a>')
        out.append(f'<text class="share" x="{WIDTH - 4}" y="{y + 14}" text-anchor="end">'
                   f'busy {100 * lane.busy(since, until):.0f}%</text></g>')
    out.append("</svg>")
    return Markup("".join(out))  # noqa: S704 (every text in it went through escape)
