"""What ``mergebot demo`` tells a new user as its scenes play: the narration, each agent's moves as they happen,
and the summary read back from the records (its errors are in ``setup``)."""

from __future__ import annotations

from typing import Any

# The scenes' titles, in the order they play (scene 5 begins inside scene 3 and lands after scene 4).
SCENES = ("-- scene 1: a conflict --", "-- scene 2: a failing test --",
          "-- scene 3: a silent agent, and scene 5 begins: a long thinker --",
          "-- scene 4: the next owner picks up the handoff --", "-- scene 5: the long thinker lands --")

# One line each, filled by ``line(name, **facts)``.
LINES = {
    "tree_created": "created {count} subtasks in a tree with dependencies",
    "shortcut_taken_out": "took the conftest out; fixing mul for real",
    "went_silent": "left a handoff note, and goes silent: no keeper, no heartbeat",
    "thinks": "thinks for {think:.0f} s ({leases:.1f} leases) with a keeper and no heartbeat of his own",
    "lease_lapsed": "lease lapsed: subtask #{subtask_id} is ready again",
    "came_back": "came back and pushes its work",
    "done_thinking": "done thinking after {seconds:.0f} s: still claim version {claim_version}, lease until {until}",
    "keeper_stopped": "his keeper stopped: {reason}",
    "handoff_read": "handoff note from {author} (v{version}): {first}",
    "rebased": "ran `{command}`, resolved CHANGES.md, committed",
    "landed_as": "landed as {sha}",
    "refused": "{kind}: {first_line}",
    "next_step": "  next: {text}",
    "serving": "server: {url}   repository: {url}/git/calc.git\n",
    "landed_heading": "\nlanded, newest first:",
    "counts": "\ncandidates: {candidates}, landed {landed}, rejected {rejected}",
    "happened_heading": "\nwhat happened (from the records):",
    "handed_over": "  handoff: {author}'s note on #{subtask_id} {key!r} was handed to {owner}, who landed it at claim "
                   "version {version}",
    "kept_claim": "  kept claim: #{subtask_id} {key!r} landed by {owner} at claim version {version} after a quiet "
                  "spell of {think:.0f} s (leases of {lease:.0f} s); the keeper's note: {note}",
    "main_log": "\nmain (first parent):\n{log}",
}


def line(name: str, **facts: Any) -> str:
    """The narration's line ``name`` (``LINES``) with its facts."""
    return LINES[name].format(**facts)


def no_sandbox(problem: str) -> str:
    return (f"sandbox: none for the demo's own checks ({problem}); a real server refuses checks without it, "
            "unless MERGEBOT_SANDBOX=none")


def data_directory(data_dir: object, keep: bool) -> str:
    return (f"data directory: {data_dir} ({'kept' if keep else 'removed at the end'}; embedded PostgreSQL unless "
            "MERGEBOT_DATABASE_URL is set)")


def failing_test(tests: list[str]) -> str:
    return f"the failing test: {', '.join(tests) or '(not named)'}; a shortcut first: a conftest.py that skips it"


def claimed(subtask_id: int, key: str, version: int, branch: str, kept: bool) -> str:
    return f"claimed #{subtask_id} {key!r} v{version} -> {branch}" + (" (kept by a keeper)" if kept else "")


def conflict_hunk(path: Any, lines: list[str]) -> str:
    return f"the hunk in {path}: {' | '.join(lines)}"


def rejection(kind: str, subtask_id: int, key: str, facts: list[str], fixed: bool) -> str:
    return (f"  {kind}: #{subtask_id} {key!r} ({', '.join(facts)})"
            + ("; fixed and landed" if fixed else "; not landed"))


def lapsed_and_refused(subtask_id: int, key: str, version: Any, refused: list[tuple[Any, Any]]) -> str:
    return (f"  lease lapsed: #{subtask_id} {key!r} went back to ready from claim version {version}; "
            + "; ".join(f"a late push refused ({code}, claim version {v})" for code, v in refused))


def findings(report: list[Any]) -> str:
    return "reconciler findings: " + ("none: every commit on main is explained by a landed row" if not report
                                      else str(report))
