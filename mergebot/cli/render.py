"""Text for people: how every command prints, and the tables and one-line summaries of the views.

Pure: each function turns the API's JSON (or a command's result) into text and reads nothing else, no
network, no clock, no environment, so tests render recorded views. ``emit`` is the one that prints: a table,
``key: value`` lines or JSON with ``--json``. Tables and their cells come from ``mergebot.table``.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

from mergebot import messages as say
from mergebot.rules import Rules
from mergebot.table import render_table


def emit(args: argparse.Namespace, data: Any, table: list[dict[str, Any]] | None = None,
         columns: Sequence[str] = ()) -> None:
    if args.json:
        print(json.dumps(data, default=str, indent=2))
        return
    if table is not None:
        print(render_table(table, columns))
    elif isinstance(data, dict):
        for k, v in data.items():
            print(f"{k}: {v}")
    else:
        print(data)


def _short(sha: Any) -> str | None:
    return str(sha)[:12] if sha else None


def _when(ts: Any) -> str | None:
    """An API timestamp as 'YYYY-MM-DD HH:MM:SS' (UTC as the server wrote it)."""
    return str(ts)[:19].replace("T", " ") if ts else None


def _ids(ids: Sequence[Any], most: int = 5) -> str:
    shown = ", ".join(f"#{i}" for i in ids[:most])
    return shown + (f" (+{len(ids) - most})" if len(ids) > most else "")


def render_status(s: dict[str, Any]) -> str:
    total = s["total"] or 1
    counts = [{"status": k, "count": v, "share": f"{100 * v / total:.1f}%"} for k, v in s["counts"].items()]
    counts.append({"status": "total", "count": s["total"], "share": ""})
    parts = [render_table(counts, ("status", "count", "share")), ""]
    if s["queue"]:
        parts += [render_table(s["queue"], ("repo", "queued", "verifying", "landing", "parked")), ""]
    jobs, landed = s["verify_jobs"], s["landed"]
    parts.append(f"verify jobs: {jobs['queued']} queued, {jobs['running']} running; landed: {landed['total']} "
                 f"({landed['last_hour']} in the last hour)")
    parts.append(f"\n{s['agents_holding']} agent(s) hold {s['claims_held']} claim(s)" +
                 (":" if s["holders"] else "."))
    if s["holders"]:
        rows = [{**h, "subtasks": _ids(h["subtasks"], 3), "next_lease_expiry": _when(h["next_lease_expiry"])}
                for h in s["holders"]]
        parts.append(render_table(rows, ("agent", "role", "holding", "subtasks", "next_lease_expiry")))
        if s["agents_holding"] > len(rows):
            parts.append(f"(the {len(rows)} busiest of {s['agents_holding']}; --holders N for more)")
    admission = s.get("admission")
    if admission and (admission["lanes"] or not admission["on"]):
        parts.append("\n" + say.ADMISSION_HEADING)
        if not admission["on"]:
            parts.append("  " + say.ADMISSION_OFF)
        parts += ["  " + say.admission_line(lane) for lane in admission["lanes"]]
    return "\n".join(parts)


def status_line(s: dict[str, Any]) -> str:
    c = s["counts"]
    waiting = sum(q["queued"] + q["parked"] for q in s["queue"])
    verifying = sum(q["verifying"] + q["landing"] for q in s["queue"])
    return (f"landed {c['landed']}/{s['total']} running {c['running']} submitted {c['submitted']} "
            f"ready {c['ready']} blocked {c['blocked']} failed {c['failed']} | queue: {verifying} verifying, "
            f"{waiting} waiting | {s['agents_holding']} agent(s) hold claims")


def render_queue(q: dict[str, Any]) -> str:
    if not q["repos"]:
        return "no repositories (mergebot repo add NAME ...)"
    parts = []
    for r in q["repos"]:
        d, w = r["depth"], r["window"]
        flags = (f"  PAUSED: {r['paused_reason'] or 'by an admin'}" if r["paused"] else "") + (
            f"  RED since {_short(r['red_since'])}" if r["red_since"] else "")
        approval = f", {d['awaiting_approval']} awaiting approval" if d.get("awaiting_approval") else ""
        parts.append(f"{r['name']} -> {r['target_branch']}: {d['queued']} queued, {d['verifying']} verifying, "
                     f"{d['landing']} landing, {d['parked']} parked{approval}; speculation window "
                     f"{w['in_flight']}/{w['max']} in flight"
                     f"{', batches of up to ' + str(w['batch']) if w.get('batch', 1) > 1 else ''}{flags}")
    jobs = q["verify_jobs"]
    parts.append(f"verify jobs: {jobs['queued']} waiting for a worker, {jobs['running']} running")
    verifying = [{**v, "sha": _short(v["sha"]), "job": f"{v['job_purpose'] or '-'} {v['job_status'] or ''}".strip(),
                  "since": _when(v["started_at"])} for v in q["verifying"]]
    parts += ["", "VERIFYING NOW", render_table(verifying, ("id", "repo", "subtask_id", "owner", "sha", "status",
                                                            "job", "worker_name", "since", "title"))]
    waiting = [{"#": i, **v, "sha": _short(v["sha"]), "queued_at": _when(v["queued_at"])}
               for i, v in enumerate(q["waiting"], start=1)]
    parts += ["", "WAITING (in landing order)", render_table(waiting, (
        "#", "id", "repo", "subtask_id", "owner", "priority", "unblocks", "status", "queued_at", "title"))]
    refusals = [{**r, "at": _when(r["at"]), "message": (r["message"] or "").splitlines()[0] if r["message"] else ""}
                for r in q["refusals"]]
    parts += ["", "RECENT REFUSALS", render_table(refusals, ("at", "repo", "subtask_id", "actor", "kind", "reason",
                                                             "message"))]
    return "\n".join(parts)


def queue_line(q: dict[str, Any]) -> str:
    repos = []
    for r in q["repos"]:
        d, w = r["depth"], r["window"]
        now = " ".join(f"#{v['subtask_id']}" for v in q["verifying"] if v["repo"] == r["name"]) or "-"
        repos.append(f"{r['name']}: verifying {now} (window {w['in_flight']}/{w['max']}), {d['queued']} queued, "
                     f"{d['parked']} parked{' PAUSED' if r['paused'] else ''}")
    last = q["refusals"][0] if q["refusals"] else None
    tail = f" | last refusal: {last['reason']} (subtask {last['subtask_id']})" if last else ""
    return "; ".join(repos) + tail


def render_tree(t: dict[str, Any]) -> str:
    nodes = t["nodes"]
    if not nodes:
        return "(no subtasks)"
    lines = [_tree_line(n, t["depth"]) for n in nodes]
    cut = sum(1 for n in nodes if n["children"] and n["depth"] == t["depth"])
    if t["truncated"] or cut:
        lines.append(f"\n(showing {len(nodes)} of {t['total']} node(s) to depth {t['depth']}"
                     f"{', more below ' + str(cut) + ' of them' if cut else ''}: --root ID to look inside one, "
                     "--depth N to go deeper, --limit N for more)")
    return "\n".join(lines)


def _tree_line(n: dict[str, Any], depth: int) -> str:
    text = f"{'  ' * n['depth']}#{n['id']} {n['status']:<9} {n['title']}"
    if n["owner"]:
        text += f"  @{n['owner']}"
    if n["waits_on"]:
        text += f"  waits on {_ids(n['waits_on'])}"
    if n["descendants"]:
        hidden = " (not shown)" if n["depth"] == depth else ""
        text += f"  [{n['descendants_landed']}/{n['descendants']} below landed{hidden}]"
    return text


def _json_line(data: dict[str, Any]) -> str:
    return json.dumps(data, default=str, sort_keys=True)


CLEAR = "\x1b[H\x1b[2J"  # cursor home, clear the screen


def render_worktree(w: dict[str, Any]) -> str:
    """The claim a worktree holds: whether it still holds, whether it is kept and until when, or why not."""
    lines = [f"this worktree: subtask {w['subtask']} v{w['claim_version']} on {w['branch']}"]
    if w.get("head", w["branch"]) != w["branch"]:  # the claim's branch is where submit pushes, whatever HEAD is on
        lines.append("  " + say.head_elsewhere(w.get("head"), w["branch"]))
    ended = w["current_version"] != w["claim_version"] or w["status"] not in ("running", "submitted")
    if ended:
        lines.append(f"  the claim no longer holds: the subtask is {w['status']} at claim version "
                     f"{w['current_version']}" + (f", held by {w['owner']}" if w["owner"] else ""))
    else:
        lines.append(f"  {w['status']}; lease until {_when(w['lease_expires_at']) or '- (submitted: no lease)'}")
    k = w["keeper"]
    if k.get("running") and ended:
        lines.append(f"  its keeper (pid {k.get('pid')}) renews nothing now and stops at its next look (within a "
                     "third of the lease), with a note on the subtask")
    elif k.get("running"):
        lines.append(f"  kept by a keeper (pid {k.get('pid')}): last heartbeat {_when(k.get('last_beat')) or '-'}, "
                     f"kept until {_when(k.get('kept_until')) or '-'}")
    elif k.get("stopped_because"):
        lines.append(f"  not kept: the keeper stopped at {_when(k.get('stopped_at'))}: {k['stopped_because']}")
    else:
        lines.append("  not kept: no keeper runs here (`mergebot start` leaves one; or `mergebot heartbeat`)")
    verdict = w.get("verdict")
    if verdict:
        step = worktree_next(verdict, w.get("repo"), w.get("dir"), w["subtask"])
        lines.append(f"  latest verdict: {verdict.get('kind')}" + (f"; next: {step}" if step else ""))
        lines += ["  " + line for line in conflict_lines(verdict)]
    if w.get("footprint"):
        lines.append(f"  footprint: {', '.join(w['footprint'][:10])}")
    lines += ["  " + line.removeprefix("Mergebot: ") for line in w.get("forecast_lines") or []]
    return "\n".join(lines)


def conflict_lines(verdict: dict[str, Any]) -> list[str]:
    """A conflict verdict's paths, each with its hunks as the queue stored them (``mergebot.git.changes.conflict_hunks``
    cut them: at most 10 paths, 3 hunks a path, 30 lines a hunk); nothing for a verdict without hunks."""
    hunks = [h for h in verdict.get("hunks") or [] if isinstance(h, dict)]
    lines = []
    for h in hunks:
        lines.append("  " + say.conflict_path(str(h.get("path")), list(h.get("lines") or []), h.get("deleted")))
        for text in h.get("hunks") or []:
            lines += ["    " + line for line in str(text).splitlines()]
    if any(h.get("hunks") for h in hunks):
        lines.append("  " + say.CONFLICT_SIDES)
    return lines


def worktree_next(verdict: dict[str, Any], repo: str | None, workdir: str | None, subtask_id: int | None) -> str:
    """A verdict's ``next`` as a worktree's user runs it: the values the command knows filled in (an empty string
    for a verdict without one)."""
    step = str(verdict.get("next") or "")
    if not step or repo is None or workdir is None:
        return step
    sid = verdict.get("subtask_id") if verdict.get("subtask_id") is not None else subtask_id
    return say.for_worktree(step, repo=repo, workdir=workdir, subtask_id=sid)


FORGE_FIELDS = ("forge", "forge_repo", "forge_api_url")


def repo_rules(repo: dict[str, Any]) -> list[tuple[str, Any]]:
    """The rules of a repository record that are not their default (the check command always), then its forge."""
    out = []
    for name, field in Rules.model_fields.items():
        value = repo.get(name)
        if field.is_required() or (value is not None and value != field.default):
            out.append((name, [say.check_line(c) for c in value or []] if name == "checks" else value))
    return out + [(k, repo[k]) for k in FORGE_FIELDS if repo.get(k)]


def print_repo(args: argparse.Namespace, repo: dict[str, Any], verb: str, held_out: int | None) -> None:
    """``repo add`` / ``repo set``: the record with ``--json``, else the rules that are not their default."""
    if args.json:
        emit(args, {**repo, **({"held_out_files": held_out} if held_out is not None else {})})
        return
    print(say.repo_summary(repo["name"], verb, repo_rules(repo), held_out))
