"""What a pull request's check run says about its candidate, in GitHub's Checks API's own terms. Pure.

One check run per candidate, on its head commit (the pull request's: GitHub refuses a commit it does not have,
and the merged commit exists only in the bot's mirror until it lands), kept as the candidate moves:

  queued, parked, awaiting_approval  -> status ``queued``
  verifying, landing                 -> status ``in_progress``
  landed                             -> ``completed``, conclusion ``success``
  rejected                           -> ``completed``, conclusion ``failure``
  superseded, cancelled              -> ``completed``, conclusion ``cancelled``

``output.title`` is the verdict's one line; ``output.summary`` its kind, what to do next, the test comparison and
what the candidate's runs cost; ``output.text`` the log's tail (already masked, and empty for a held-out run,
whose log no agent reads); the annotations mark each failing test at its file and line (from the per-test
outcomes) and each conflict region where it starts. ``details_url`` is the candidate's page, ``external_id`` its
id. GitHub's limits hold: a title of one line, a summary and a text of at most 65,535 characters, 50 annotations
per request.
"""

from __future__ import annotations

from typing import Any

from mergebot import messages as say
from mergebot.models import Verdict
from mergebot.models.judgement import Judgement

NAME = "mergebot"
STATUS = {"queued": "queued", "parked": "queued", "awaiting_approval": "queued", "verifying": "in_progress",
          "landing": "in_progress"}
CONCLUSION = {"landed": "success", "rejected": "failure", "superseded": "cancelled", "cancelled": "cancelled"}
MAX_TEXT = 65_535
MAX_ANNOTATIONS = 50
TITLE_CHARS = 200


def body(*, status: str, verdict: Verdict, head_sha: str, details_url: str | None, log_tail: str,
         lines: dict[str, int], runs: int, seconds: float, create: bool,
         checks: tuple[str, ...] = ()) -> dict[str, Any]:
    """The request body for the candidate's check run (``create``: the POST that makes it, else the PATCH)."""
    out: dict[str, Any] = {"name": NAME, "external_id": str(verdict.candidate_id or "")}
    if create:
        out["head_sha"] = head_sha
    if details_url:
        out["details_url"] = details_url
    if status in CONCLUSION:
        out["status"], out["conclusion"] = "completed", CONCLUSION[status]
    else:
        out["status"] = STATUS.get(status, "queued")
    output: dict[str, Any] = {"title": title(verdict), "summary": summary(verdict, runs=runs, seconds=seconds)}
    if log_tail:
        output["text"] = _cut("Log (its tail):\n\n```\n" + log_tail[-(MAX_TEXT - 100):] + "\n```")
    notes = marks(verdict, lines, checks)
    if notes:
        output["annotations"] = notes
    out["output"] = output
    return out


MAIN_NAME = "mergebot (main)"
MAIN_CONCLUSION = {"pass": "success", "flaky": "success", "superseded": "neutral"}


def main_body(*, status: str, head_sha: str, target: str, subtasks: list[int], details_url: str | None,
              create: bool) -> dict[str, Any]:
    """The check run on main's new commit after a landing, as main's check on it goes (the landed rows'
    ``main_status``): in progress while pending, then success (passed, or passed on a second run), failure (any
    failing outcome: main is red, and the bot mends it), or neutral (main moved on before it was checked)."""
    landed = ", ".join(f"#{s}" for s in subtasks) or "?"
    out: dict[str, Any] = {"name": MAIN_NAME, "external_id": f"main:{head_sha}"}
    if create:
        out["head_sha"] = head_sha
    if details_url:
        out["details_url"] = details_url
    if status == "pending":
        out["status"] = "in_progress"
        title = f"main's check runs on the commit that landed subtask {landed}"
    else:
        out["status"], out["conclusion"] = "completed", MAIN_CONCLUSION.get(status, "failure")
        title = {"pass": f"{target} passes its check here",
                 "flaky": f"{target} passed its check here on a second run (flaky)",
                 "superseded": f"{target} moved on before its check ran here: a later commit's check covers it",
                 }.get(status, f"{target} fails its check here ({status}): the bot finds the culprit and reverts it")
    out["output"] = {"title": title[:TITLE_CHARS],
                     "summary": f"**{target}** after the landing of subtask {landed}: its check on this commit is "
                                f"**{status}**."}
    return out


def title(verdict: Verdict) -> str:
    if verdict.kind == "landed" and verdict.merged_sha:
        return f"landed as {verdict.merged_sha[:12]}: {verdict.message}"[:TITLE_CHARS]
    first = (verdict.message or verdict.kind).strip().splitlines()[0] if (verdict.message or verdict.kind) else ""
    return first if len(first) <= TITLE_CHARS else first[: TITLE_CHARS - 1] + "…"


def summary(verdict: Verdict, *, runs: int, seconds: float) -> str:
    parts = [f"**{verdict.kind}**: {verdict.message}"]
    if verdict.next:
        parts.append(f"**Next:** {verdict.next}")
    if verdict.failing_tests:
        parts.append("**Failing tests:**\n" + "\n".join(f"- `{t}`" for t in verdict.failing_tests[:50]))
    if verdict.paths:
        parts.append("**Paths:** " + ", ".join(f"`{p}`" for p in verdict.paths[:50]))
    tests = verdict.tests or {}
    if tests:
        parts.append(comparison(tests))
    parts.append(f"**Cost:** {runs} verifier run{'s' if runs != 1 else ''}, {seconds:.1f} s")
    return _cut("\n\n".join(p for p in parts if p))


def comparison(tests: dict[str, Any]) -> str:
    """The test comparison with main's, in a few lines."""
    lines = []
    counts = tests.get("counts") or {}
    if counts:
        lines.append("Tests now: " + ", ".join(f"{n} {o}" for o, n in sorted(counts.items())))
    judged = Judgement.from_json(tests, "")
    c = judged.comparison
    if c is not None:
        lines.append(f"Passed on main: {c.passed_before}; passing now: {c.passed_now}; "
                     f"added: {c.added_count}; removed with permission: {c.removed_count}")
        lines += [f"- weakened: `{w.id}` passed on main, {w.now} now" for w in c.weakened[:20]]
        lines += [f"- edited: `{t}`" for t in c.changed[:20]]
    if judged.held_out is not None:
        lines.append(f"Held-out checks: {judged.held_out.outcome}")
    return "**Tests:**\n" + "\n".join(lines) if lines else ""


def marks(verdict: Verdict, lines: dict[str, int], checks: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """A failure annotation for each failing test at its file and line, and one for each conflict region. ``checks``:
    the repository's named checks, whose name a test id may start with (``lint::path::test``: the path follows)."""
    out: list[dict[str, Any]] = []
    held_out = verdict.kind == "held_out_failed"  # their files are not the repository's: the ids say enough
    for test in [] if held_out else verdict.failing_tests:
        first, _, rest = test.partition("::")
        path = (rest if first in checks and rest else test).split("::", 1)[0]
        if "::" not in test or not path or path.startswith("/"):
            continue  # a JUnit report's dotted name: no file to point at
        line = lines.get(test, 1)
        out.append({"path": path, "start_line": line, "end_line": line, "annotation_level": "failure",
                    "title": "failing test", "message": f"{test} failed ({verdict.kind})"})
    for hunk in verdict.hunks:
        path, starts = str(hunk.get("path") or ""), list(hunk.get("lines") or [])
        for line in starts or [1]:
            out.append({"path": path, "start_line": int(line), "end_line": int(line), "annotation_level": "failure",
                        "title": "conflict", "message": f"{path} conflicts with the target branch here: rebase "
                                                        "onto it and resolve"})
    return out[:MAX_ANNOTATIONS]


def _cut(text: str) -> str:
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1] + "…"


NAMED_CONCLUSION = {True: "failure", False: "neutral"}  # a named check that did not pass: required, optional


def named_body(check: dict[str, Any], *, candidate_id: int, head_sha: str, details_url: str | None,
               create: bool) -> dict[str, Any]:
    """The check run of one named check of a decided candidate (``mergebot / NAME``), completed: success when it
    passed, else failure when it is required and neutral when it is optional (its failure never blocks)."""
    name, required, outcome = str(check.get("name")), bool(check.get("required")), str(check.get("outcome"))
    out: dict[str, Any] = {"name": f"{NAME} / {name}", "external_id": f"{candidate_id}:{name}",
                           "status": "completed",
                           "conclusion": "success" if outcome == "pass" else NAMED_CONCLUSION[required]}
    if create:
        out["head_sha"] = head_sha
    if details_url:
        out["details_url"] = details_url
    seconds = float(check.get("duration_ms") or 0) / 1000
    out["output"] = {"title": say.named_check_title(name, required, outcome)[:TITLE_CHARS],
                     "summary": _cut(say.named_check_summary(name, required, outcome, seconds))}
    return out
