"""Held-out checks: a repository's tests that no agent ever sees, run on every candidate that passed its check.

Rules:
  * An operator stores them (``mergebot repo set NAME --held-out DIR``) in PostgreSQL (``held_out_files``); they
    are never in the repository, and nothing an agent's token reads returns them: not git, the API, MCP, the
    guide, statuses or pages. Only the verifier worker holding a held-out job reads them, fenced by its claim
    (``GET /api/v1/verify-jobs/ID/held-out`` for a remote worker).
  * A judging run that passed (``mergebot.landing.judge.step``) is followed by a run of its own on the same judged
    commit (the merged commit with main's tests: the same reset) and the same start: purpose ``held_out``, the
    repository's ``held_out_command`` (default ``python -m pytest -q "$VERIFIER_HELD_OUT"``) with the files mounted
    read-only at ``/held-out`` beside the checkout.
  * A held-out run that fails (or times out, or reaches a limit), or in which any test did not pass (a skip, an
    expected failure and a deselection count as not passing: code can make a test skip itself), judges the
    candidate ``held_out_failed`` (its run keeps its own outcome: the judgement is a record beside it); one that
    exits 0 but reports no test outcome is ``no_report``, never a pass
    (code that notices the held-out mount and exits at once); one past the outcome bounds is ``report_flood``. One
    that could not run (``error``) is no verdict on the change: the candidate is judged an ``error`` too, and is
    retried.
  * Every test the bot itself finds in the files (``required``) must have reported a pass: a run that stops after
    its first test, or skips the rest, fails.
  * The agent is told pass or fail and the failing test ids, but only ids that each name a test the bot itself
    found in the held-out files (``named``: the file, and a function or class it defines); anything else the run
    reported is "a held-out test failed", with no text, and no count, from the run (``summary``).
  * Its log is for reviewers and admins only (``for_viewer`` hides everything else of a held-out run's result
    from other roles, wherever a job is shown: they see its outcome and how many failed).
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from typing import Any

from mergebot.landing.context import Context
from mergebot.landing.judge import runs
from mergebot.models import Repo
from mergebot.models.judgement import HeldOut, Judged
from verifier import compare as cmp
from verifier import outcomes
from verifier.runner import Result

SEES_LOGS = frozenset({"reviewer", "admin"})
SHOWN = 50  # failing held-out ids named, at most
UNNAMED = "a held-out test failed"  # what an agent is told of a failure the bot cannot name from the files

Known = Mapping[str, set[tuple[str, ...]]]  # each held-out file's path -> the functions and classes it defines


def known_tests(files: list[tuple[str, bytes]]) -> dict[str, set[tuple[str, ...]]]:
    """What the bot itself finds in the held-out files: each Python file's functions and classes, by name path."""
    found: dict[str, set[tuple[str, ...]]] = {}
    for path, content in files:
        if path.endswith(".py"):
            defs = cmp.definitions(content.decode("utf-8", "replace"))
            if defs:
                found[path] = defs
    return found


def named(test_id: str, known: Known) -> str | None:
    """The held-out test ``test_id`` names, as the bot names it (``path::name``, without parameters: their values
    come from the held-out files too), or None when it names none: its file must be one of them (as pytest names it
    from any rootdir) and its name path defined there."""
    file, names = cmp.split_id(test_id)
    if not names or len(test_id) > 2000:
        return None
    file = posixpath.normpath(file)
    for path, defs in known.items():
        if (file == path or file.endswith("/" + path)) and names in defs:
            return f"{path}::{'::'.join(names)}"
    return None


def required(known: Known) -> set[str]:
    """The held-out tests the bot itself finds (``test*`` functions, at the top or in ``Test*`` classes): each must
    have passed, so a run that stops after the first one cannot pass."""
    return {f"{path}::{'::'.join(names)}" for path, defs in known.items() for names in defs
            if names[-1].startswith("test") and all(n.startswith("Test") for n in names[:-1])}


def unrun(run: Result, known: Known) -> list[str]:
    """The required held-out tests with no passing report."""
    seen = outcomes.unpack(run.tests)
    passed = {n for t, o in seen.tests.items() if o == "passed" and (n := named(t, known)) is not None}
    return sorted(required(known) - passed)


def outcome_of(run: Result, known: Known) -> str:
    """The held-out run's verdict: ``pass`` (it exited 0, every test it reported passed, and so did every test the
    bot finds in the files), ``no_report`` (it exited 0 and reported no test), ``report_flood``, ``error`` (no verdict
    on the change) or ``fail``."""
    seen = outcomes.unpack(run.tests)
    if seen.flood:
        return "report_flood"
    if run.outcome == "error":
        return "error"
    if not run.passed:
        return "fail"
    if seen.none or not seen.tests:
        return "no_report"
    return "pass" if all(o == "passed" for o in seen.tests.values()) and not unrun(run, known) else "fail"


def summary(run: Result, known: Known) -> dict[str, Any]:
    """What an agent may learn of a held-out run (see the module's rules): its outcome and the ids of the bot's own
    tests that did not pass (every reported test that did not pass counts, and every test of the files that did not
    report a pass); no count, nothing from the run's own words."""
    seen = outcomes.unpack(run.tests)
    failing = sorted(t for t, o in seen.tests.items() if o != "passed") if not seen.none else []
    told = sorted({n for t in failing if (n := named(t, known)) is not None} | set(unrun(run, known)))
    verdict = outcome_of(run, known)
    out: dict[str, Any] = {"outcome": verdict, "failing": told[:SHOWN] if verdict == "fail" else []}
    if verdict == "fail" and (not told or any(named(t, known) is None for t in failing)):
        out["unnamed"] = UNNAMED
    return out


async def start(ctx: Context, repo: Repo, judged: Judged, *, candidate_id: int,
                sandbox: dict[str, Any] | None = None) -> int | None:
    """The held-out run that follows ``judged`` (its job id), when it passed and the repository has held-out checks:
    on the same commit, started as the judging run was (``sandbox``: its plugins)."""
    if not judged.passed or not await ctx.db.repos.held_out_count(repo.name):
        return None
    return await runs.start_check(ctx, repo, judged.run.commit_sha, "held_out", candidate_id=candidate_id,
                                  command=repo.held_out_command, sandbox=sandbox)


async def combine(ctx: Context, repo: Repo, judged: Judged, held: Result) -> Judged:
    """The candidate's judgement with its held-out run's verdict (see the module's rules); the run is unchanged."""
    said = summary(held, known_tests(await ctx.db.repos.held_out(repo.name)))
    verdict = said["outcome"]
    kind = {"pass": judged.outcome, "error": "error", "fail": "held_out_failed"}.get(verdict, verdict)
    return judged.with_kind(kind, held_out=HeldOut.from_json(said))


def for_viewer(job: dict[str, Any], role: str) -> dict[str, Any]:
    """A job as a viewer of ``role`` may see it: a held-out run's result reduced to ``summary`` for anyone but a
    reviewer or an admin (its log, its tests' names and sources stay with them)."""
    if job.get("purpose") != "held_out" or role in SEES_LOGS:
        return job
    result = job.get("result")
    if isinstance(result, dict):
        job = {**job, "result": {"outcome": summary(Result.from_json(result), {})["outcome"]},
               "command": "(held-out checks)"}
    return job
