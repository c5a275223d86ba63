"""The pages' router (login is ``mergebot.web.login``; the charts and the timeline ``mergebot.web.trends``): the
pages, the logs, the live queue stream and the one admin action.

Every page handler takes who is looking (``deps.Who``: from the cookie, re-authenticated on every request); a
visitor is sent to /login and sees nothing else. Then it reads (``db.pages``, ``mergebot.db.pages``), shapes
(``present``) and renders (``render``). Identifiers in paths are parsed here rather than by FastAPI, so a
visitor gets the login page for any /ui URL, never a validation error that tells what exists.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, RedirectResponse, Response, StreamingResponse

from mergebot import cost as costs
from mergebot import messages as say
from mergebot.attest import keys as attest_keys
from mergebot.attest import shown
from mergebot.db.base import Row
from mergebot.db.pages import PAGE
from mergebot.errors import Conflict, Forbidden, NotFound
from mergebot.landing.judge import heldout, told, verdicts
from mergebot.landing.main import reverify
from mergebot.landing.main.repos import hold
from mergebot.web import charts as drawn
from mergebot.web import diffstat, graph, live, present, render, session
from mergebot.web.deps import Site, Who
from mergebot.web.login import read_form
from mergebot.web.session import Viewer

router = APIRouter(include_in_schema=False)

TREE_FIRST_LEVEL = 50  # first-level nodes per tree page
TREE_DEPTH, TREE_MAX_DEPTH = 3, 5
GLANCE_CHILDREN = 50  # children with a progress bar on a subtask's page
BLOCKING_NODES, BLOCKING_HOPS = 60, 6  # the blocking graph's bound
QUEUE_CHARTS = ("depth", "landings", "failures")  # the last hour's, on the queue page (the rest on /ui/charts)
QUEUE_CHART_WIDTH = 440  # drawn narrower than on /ui/charts: three abreast, their text stays readable


def _id(value: str) -> int | None:
    return int(value) if value.isascii() and value.isdigit() and len(value) < 19 else None


async def _find(value: str, read: Callable[[int], Awaitable[Row | None]]) -> Row | None:
    """The row an id in a path names, read by ``read``; None for no such row or no id at all."""
    n = _id(value)
    return await read(n) if n else None


def _not_found(request: Request, who: Viewer, what: str) -> Response:
    return render.message(request, who, 404, "Not found", f"{what} does not exist.")


async def _diffs(root: Path, rows: list[dict[str, Any]]) -> dict[int, diffstat.DiffSummary | None]:
    keys = {r["id"]: (r["repo"], r["base_sha"], r["merged_sha"]) for r in rows}
    found = await asyncio.to_thread(diffstat.summaries, root, list(keys.values()))
    return {i: found[k] for i, k in keys.items()}


@router.get("/ui/static/{name}")
async def static(name: str) -> Response:
    return render.static(name)


# -- landed and logs ------------------------------------------------------------------------------------------


@router.get("/ui/landed")
async def landed(request: Request, who: Who, site: Site) -> Response:
    f, errors = present.parse_landed_filter(request.query_params)
    reader = site.db.pages
    rows = [] if errors else await reader.landed_page(repo=f.repo, owner=f.agent, subtask_id=f.subtask, since=f.since,
                                                  until=f.until, before_id=f.before, limit=PAGE)
    cursor = present.next_cursor(rows, PAGE)
    return render.html(request, "landed.html", who, f=f, errors=errors, rows=rows, repos=await reader.repos(),
                       diffs=await _diffs(site.root, rows),
                       older=present.link("/ui/landed", **f.params(before=cursor)) if cursor else None)


@router.get("/ui/landed/{landed_id}")
async def landed_one(landed_id: str, request: Request, who: Who, site: Site) -> Response:
    row = await _find(landed_id, site.db.pages.landed_one)
    if row is None:
        return _not_found(request, who, f"Landed record {landed_id[:20]!r}")
    # What it cost: every run charged to it since its subtask was made (``mergebot.cost``)
    window = await site.db.views.cost(since=row["subtask_created_at"], until=datetime.now(UTC), repo=row["repo"])
    cost = costs.add_up(window["runs"], window["pushes"], window["landed"]).landings.get(row["id"])
    return render.html(request, "landed_one.html", who, r=row, diff=(await _diffs(site.root, [row]))[row["id"]],
                       cost=cost, tests=present.tests_view({"tests": row["tests"]}) if row["tests"] else None,
                       provenance=await _provenance(site, row),
                       reverified=await site.queue.on_loop(reverify.latest, row["id"]))


async def _provenance(site: Site, row: Row) -> shown.Provenance:
    """Whether a landed record's landing statement verifies with the data directory's trust file, and its
    statements (``mergebot.attest.shown``)."""
    rows = await site.db.attest.of_landed(row["id"], row["repo"], row["merged_sha"])
    trust = await asyncio.to_thread(attest_keys.trust_text, site.settings.attest_folder)
    return shown.of_landed(row["merged_sha"], row["repo"], rows, trust)


@router.get("/ui/landed/{landed_id}/attestations.json")
async def landed_attestations(landed_id: str, request: Request, who: Who, site: Site) -> Response:
    """The landed page's statements as JSON (``GET /api/v1/landed/{id}/attestations`` for a token)."""
    row = await _find(landed_id, site.db.pages.landed_one)
    if row is None:
        return _not_found(request, who, f"Landed record {landed_id[:20]!r}")
    got = await _provenance(site, row)
    return JSONResponse({"landed_id": row["id"], "repo": row["repo"], "sha": row["merged_sha"], **got.as_json()})


@router.post("/ui/landed/{landed_id}/reverify")
async def landed_reverify(landed_id: str, request: Request, who: Who, site: Site) -> Response:
    """Re-verify a landed record (``mergebot reverify``): reviewers, leads and admins, from this site's own form."""
    form = await read_form(request) or {}
    if not session.post_allowed(request, who, form.get(session.CSRF_FIELD)):
        return render.message(request, who, 403, "Refused", say.REVERIFY_FORM_REFUSED)
    n = _id(landed_id)
    if n is None:
        return _not_found(request, who, f"Landed record {landed_id[:20]!r}")
    try:
        await site.queue.on_loop(reverify.start, n, who.agent)
    except NotFound:
        return _not_found(request, who, f"Landed record {landed_id[:20]!r}")
    except (Forbidden, Conflict) as e:
        return render.message(request, who, e.status, "Refused", e.message)
    return RedirectResponse(f"/ui/landed/{n}#reverify", status_code=303)


@router.get("/ui/candidates/{cand_id}")
async def candidate_page(cand_id: str, request: Request, who: Who, site: Site) -> Response:
    """One candidate: its verdict (the words its agent was told then, when they were kept), a conflict's hunks, the
    test comparison, its log, and for a reviewer the held-out runs' logs."""
    c = await _find(cand_id, site.db.pages.candidate)
    if c is None:
        return _not_found(request, who, f"Candidate {cand_id[:20]!r}")
    verdict = await told.candidate_verdict(site.db, await site.db.landing.get_candidate(c["id"]))
    crumbs = [("/ui/queue", "Queue")] + ([("/ui/landed", "Landed"), (f"/ui/landed/{c['landed_id']}",
                                                                       f"#{c['landed_id']}")] if c["landed_id"] else [])
    held = [j for j in await site.db.jobs.jobs(candidate_id=c["id"], limit=50) if j["purpose"] == "held_out"] \
        if who.role.value in heldout.SEES_LOGS else []
    stages = costs.stages(await site.db.pages.candidate_stages(c["id"]))
    conflicts = [(say.conflict_path(str(h.get("path")), list(h.get("lines") or []), h.get("deleted")),
                  [str(t) for t in h.get("hunks") or []]) for h in verdict.hunks if isinstance(h, dict)]
    told_words = {"then": say.CANDIDATE_TOLD_THEN, "now": say.CANDIDATE_NEXT_NOW, "unknown": say.CANDIDATE_TOLD_UNKNOWN,
                  "sides": say.CONFLICT_SIDES if any(hunks for _, hunks in conflicts) else ""}
    return render.html(request, "candidate.html", who, c=c, v=verdict, crumbs=crumbs, held_logs=held, stages=stages,
                       tests=present.tests_view(c["verifier"]), conflicts=conflicts, told_words=told_words,
                       approvals=await site.db.landing.approvals(c["id"]),
                       checks=[k for k in (c["verifier"] or {}).get("checks") or [] if isinstance(k, dict)])


@router.get("/ui/candidates/{cand_id}/log")
async def candidate_log(cand_id: str, request: Request, who: Who, site: Site) -> Response:
    c = await _find(cand_id, site.db.pages.candidate)
    if c is None:
        return _not_found(request, who, f"Candidate {cand_id[:20]!r}")
    crumbs = [("/ui/queue", "Queue")]
    if c["landed_id"]:
        crumbs = [("/ui/landed", "Landed"), (f"/ui/landed/{c['landed_id']}", f"#{c['landed_id']}")]
    facts = [("Subtask", f"#{c['subtask_id']} {c['title']}"), ("Owner", f"{c['owner']} at claim version "
             f"{c['claim_version']}"), ("Repository", c["repo"]), ("Commit", c["sha"]),
             ("Merged", c["merged_sha"] or "—"), ("Status", c["status"] + (f": {c['reason']}" if c["reason"] else ""))]
    return render.html(request, "log.html", who, heading=f"Candidate {c['id']}: the verifier's log", crumbs=crumbs,
                       facts=facts, logs=present.log_views(c["verifier"], "deciding run"))


@router.get("/ui/jobs/{job_id}/log")
async def job_log(job_id: str, request: Request, who: Who, site: Site) -> Response:
    j = await _find(job_id, site.db.pages.job)
    if j is None:
        return _not_found(request, who, f"Verify job {job_id[:20]!r}")
    if j["purpose"] == "held_out" and who.role.value not in heldout.SEES_LOGS:  # reviewers and admins only
        return render.message(request, who, 403, "Held-out checks", say.held_out_log_hidden(j["outcome"] or "none"))
    crumbs = [("/ui/landed", "Landed")] + ([(f"/ui/landed/{j['landed_id']}", f"#{j['landed_id']}")]
                                           if j["landed_id"] else [])
    facts = [("Purpose", j["purpose"]), ("Repository", j["repo"]), ("Commit", j["commit_sha"]),
             ("Status", f"{j['status']} ({j['outcome'] or 'no outcome yet'})"), ("Worker", j["worker_name"] or "—")]
    return render.html(request, "log.html", who, heading=f"Verify job {j['id']} ({j['purpose']})", crumbs=crumbs,
                       facts=facts, logs=present.log_views(j["result"], "run"))


# -- the queue ------------------------------------------------------------------------------------------------


async def _stalled(site: Site) -> str | None:
    """What the queue page says when commits hang on a synchronous standby (``/healthz`` says it too)."""
    return say.commits_stalled(*await site.db.commits_waiting())


async def _queue_context(site: Site) -> dict[str, Any]:
    reader = site.db.pages
    since, until, step = drawn.window("hour", datetime.now(UTC))
    rows = await reader.chart_buckets(since=since, until=until, step=step, repo=None)
    starts = [r["start"] for r in rows]
    view = await site.admission.view(site.db)
    admission = {**view, "off": say.ADMISSION_OFF,
                 "lanes": [{**lane, "line": say.admission_line(lane)} for lane in view["lanes"]]}
    return {"admission": admission, "repos": await reader.queue_repos(), "active": await reader.queue_active(),
            "waiting": await reader.queue_waiting(PAGE), "parked": await reader.queue_parked(),
            "rejected": await reader.queue_rejected(), "refusals": await reader.push_refusals(),
            "landed": await reader.recently_landed(), "limit": PAGE, "stalled": await _stalled(site),
            "trend": [(c, drawn.svg(c, starts, width=QUEUE_CHART_WIDTH)) for c in drawn.charts(rows, step)
                      if c.key in QUEUE_CHARTS]}


@router.get("/ui/queue")
async def queue(request: Request, who: Who, site: Site) -> Response:
    fingerprint = await site.db.pages.queue_fingerprint()
    return render.html(request, "queue.html", who, window=site.queue.window,
                       fingerprint=fingerprint, sandbox=site.sandbox, sandbox_problem=site.sandbox_problem,
                       **await _queue_context(site))


@router.get("/ui/queue/live")
async def queue_live(request: Request, who: Who, site: Site) -> Response:
    return render.html(request, "_queue_live.html", who, **await _queue_context(site))


@router.get("/ui/queue/events")
async def queue_events(request: Request, who: Who, site: Site) -> Response:
    hub = site.live_queue
    if hub.full:
        return Response("too many live pages are open; this one reloads by itself", status_code=503,
                        media_type="text/plain", headers={"Retry-After": "10"})
    reader = site.db.pages

    async def still_allowed() -> bool:
        return await session.viewer(site.db, request) is not None

    return StreamingResponse(live.stream(hub, reader.queue_fingerprint, still_allowed),
                             media_type="text/event-stream",
                             headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


@router.post("/ui/repos/{name}/{action}")
async def repo_action(name: str, action: str, request: Request, who: Who, site: Site) -> Response:
    """Pause or resume landing on a repository: admins only, from this site's own form."""
    form = await read_form(request) or {}
    if not session.post_allowed(request, who, form.get(session.CSRF_FIELD)):
        return render.message(request, who, 403, "Refused", "This form did not come from this site's pages "
                              "(its origin or its CSRF token is wrong). Reload the page and try again.")
    if not who.may("admin"):
        return render.message(request, who, 403, "Refused", f"Role {who.agent.role!r} may not pause or resume "
                              "repositories; ask an admin.")
    if action not in ("pause", "resume"):
        return _not_found(request, who, f"Action {action[:20]!r}")
    try:
        await hold(site.db, name, action, who.agent, site.queue.poke, site.queue.reconcile_now)
    except NotFound:
        return _not_found(request, who, f"Repository {name[:64]!r}")
    await site.db.subtasks.log_event(actor_id=who.agent.id, kind=f"repo_{action}d",
                                     detail={"repo": name, "via": "pages"})
    return RedirectResponse("/ui/queue", status_code=303)


# -- subtasks -------------------------------------------------------------------------------------------------


@router.get("/ui/subtasks")
async def subtasks(request: Request, who: Who, site: Site) -> Response:
    q, errors = request.query_params, list[str]()
    status = q.get("status") or None
    if status is not None and status not in present.STATUSES:
        errors.append(f"status must be one of {', '.join(present.STATUSES)}")
        status = None
    root = present.int_param(q.get("root"), "root", errors, lo=1)
    after = present.int_param(q.get("after"), "after", errors) or 0
    depth = present.int_param(q.get("depth"), "depth", errors, lo=1, hi=TREE_MAX_DEPTH) or TREE_DEPTH
    reader = site.db.pages
    ctx: dict[str, Any] = {"errors": errors, "status": status, "counts": await site.db.subtasks.counts(), "root": root,
                           "after": after, "depth": depth, "max_depth": TREE_MAX_DEPTH, "crumbs": [], "focus": None,
                           "nodes": [], "flat": [], "more": None, "shown": 0}
    if status is not None:
        ctx["flat"] = await reader.subtasks_by_status(status=status, after_id=after, limit=PAGE)
        cursor = present.next_cursor(ctx["flat"], PAGE)
        ctx["more"] = present.link("/ui/subtasks", status=status, after=cursor) if cursor else None
        return render.html(request, "subtasks.html", who, **ctx)
    if root is not None:
        crumbs = await reader.ancestors(root)
        if not crumbs:
            return _not_found(request, who, f"Subtask {root}")
        counts = await reader.subtree_counts(root)
        ctx.update(crumbs=crumbs, focus=crumbs[-1], bar=present.status_bar(counts),
                   subtree_total=sum(counts.values()) - 1, subtree_capped=sum(counts.values()) >= 50_000)
    first = await reader.first_level(root=root, after_id=after, limit=TREE_FIRST_LEVEL)
    nodes = present.nest(await reader.tree_window(ids=first, depth=depth))
    cursor = first[-1] if len(first) >= TREE_FIRST_LEVEL else None
    ctx.update(nodes=nodes, shown=present.count_nodes(nodes),
               more=present.link("/ui/subtasks", root=root, after=cursor, depth=depth) if cursor else None)
    return render.html(request, "subtasks.html", who, **ctx)


@router.get("/ui/subtasks/{subtask_id}")
async def subtask(subtask_id: str, request: Request, who: Who, site: Site) -> Response:
    sid = _id(subtask_id)
    reader = site.db.pages
    try:
        s = await site.db.subtasks.get_subtask(sid) if sid else None
    except NotFound:
        s = None
    if s is None or sid is None:
        return _not_found(request, who, f"Subtask {subtask_id[:20]!r}")
    crumbs = (await reader.ancestors(sid))[:-1]
    children = len(await reader.first_level(root=sid, after_id=0, limit=200))
    notes = await site.db.subtasks.notes(subtask_id=sid, limit=PAGE)
    told_now = await told.subtask_record(site.db, s)  # what the agent is told: its branch and latest verdict
    candidates = []
    for c in await reader.subtask_candidates(sid):
        kind = verdicts.kind_for(c["status"], c["verdict"])
        candidates.append({**c, "kind": kind, "final": verdicts.KINDS[kind].final})
    kids = graph.children(await reader.child_progress(sid, limit=GLANCE_CHILDREN))
    blocking = await reader.blocking_graph(sid, hops=BLOCKING_HOPS, limit=BLOCKING_NODES)
    return render.html(request, "subtask.html", who, s=s, crumbs=crumbs,
                       kids=[(k, graph.progress(k.counts)) for k in kids], kids_capped=len(kids) >= GLANCE_CHILDREN,
                       blocking=graph.blocking(blocking) if len(blocking) > 1 else None,
                       blocking_shown=len(blocking) - 1, blocking_capped=len(blocking) >= BLOCKING_NODES,
                       deps=await reader.deps(sid),
                       dependents=await reader.dependents(sid), notes=notes, branch=told_now["branch"],
                       verdict=told_now["verdict"], candidates=candidates, events=await reader.subtask_events(sid),
                       landed_id=await reader.subtask_landed_id(sid),
                       children=f"{children}+" if children >= 200 else children)


# -- agents, board, reconciliation ----------------------------------------------------------------------------


@router.get("/ui/agents")
async def agents(request: Request, who: Who, site: Site) -> Response:
    errors: list[str] = []
    after = present.int_param(request.query_params.get("after"), "after", errors) or 0
    rows = await site.db.pages.agents(after_id=after, limit=100)
    cursor = present.next_cursor(rows, 100)
    return render.html(request, "agents.html", who, rows=rows, errors=errors,
                       more=present.link("/ui/agents", after=cursor) if cursor else None)


@router.get("/ui/board")
async def board(request: Request, who: Who, site: Site) -> Response:
    q, errors = request.query_params, list[str]()
    subtask_id = present.int_param(q.get("subtask"), "subtask", errors, lo=1)
    group = (q.get("group") or "").strip() or None
    if group is not None and not present.NAME.match(group):
        errors.append("group must be a name (letters, digits, '.', '_', '-')")
        group = None
    ann_before = present.int_param(q.get("ann_before"), "ann_before", errors, lo=1)
    note_before = present.int_param(q.get("note_before"), "note_before", errors, lo=1)
    reader = site.db.pages
    anns = await reader.announcements_page(before_id=ann_before)
    notes = await reader.notes_page(subtask_id=subtask_id, group_name=group, before_id=note_before)
    a_cursor, n_cursor = present.next_cursor(anns, PAGE), present.next_cursor(notes, PAGE)
    return render.html(
        request, "board.html", who, announcements=anns, notes=notes, errors=errors, subtask=subtask_id, group=group,
        older_announcements=present.link("/ui/board", ann_before=a_cursor, subtask=subtask_id, group=group)
        if a_cursor else None,
        older_notes=present.link("/ui/board", note_before=n_cursor, subtask=subtask_id, group=group)
        if n_cursor else None)


@router.get("/ui/reconcile")
async def reconcile(request: Request, who: Who, site: Site) -> Response:
    errors: list[str] = []
    before = present.int_param(request.query_params.get("before"), "before", errors, lo=1)
    reader = site.db.pages
    findings = await reader.findings_page(before_id=before)
    cursor = present.next_cursor(findings, PAGE)
    held = [r for r in await reader.repos() if r["paused"] or r["red_since"]]
    return render.html(request, "reconcile.html", who, errors=errors, findings=findings, held=held,
                       intents=await reader.intents_pending(), not_green=await reader.main_not_green(),
                       unqueued=await reader.submitted_unqueued(), orphans=await reader.landed_without_row(),
                       older=present.link("/ui/reconcile", before=cursor) if cursor else None)
