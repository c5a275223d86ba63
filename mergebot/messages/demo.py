"""What ``mergebot demo`` tells a new user as its scenes play: the narration, each agent's moves as they happen,
and the summary read back from the records (its errors are in ``setup``)."""

from __future__ import annotations

from typing import Any

SCENE_CONFLICT = "-- scene 1: a conflict --"
SCENE_FAILING_TEST = "-- scene 2: a failing test --"
SCENE_SILENT_AGENT = "-- scene 3: a silent agent, and scene 5 begins: a long thinker --"
SCENE_HANDOFF = "-- scene 4: the next owner picks up the handoff --"
SCENE_LONG_THINKER = "-- scene 5: the long thinker lands --"
SHORTCUT_TAKEN_OUT = "took the conftest out; fixing mul for real"
WENT_SILENT = "left a handoff note, and goes silent: no keeper, no heartbeat"
CAME_BACK = "came back and pushes its work"
LANDED_HEADING = "\nlanded, newest first:"
HAPPENED_HEADING = "\nwhat happened (from the records):"


def no_sandbox(problem: str) -> str:
    return (f"sandbox: none for the demo's own checks ({problem}); a real server refuses checks without it, "
            "unless MERGEBOT_SANDBOX=none")


def data_directory(data_dir: object, keep: bool) -> str:
    return (f"data directory: {data_dir} ({'kept' if keep else 'removed at the end'}; embedded PostgreSQL unless "
            "MERGEBOT_DATABASE_URL is set)")


def serving(url: str) -> str:
    return f"server: {url}   repository: {url}/git/calc.git\n"


def tree_created(count: int) -> str:
    return f"created {count} subtasks in a tree with dependencies"


def failing_test(tests: list[str]) -> str:
    return f"the failing test: {', '.join(tests) or '(not named)'}; a shortcut first: a conftest.py that skips it"


def thinks(think: float, lease: float) -> str:
    return f"thinks for {think:.0f} s ({think / lease:.1f} leases) with a keeper and no heartbeat of his own"


def lease_lapsed(subtask_id: int) -> str:
    return f"lease lapsed: subtask #{subtask_id} is ready again"


def done_thinking(seconds: float, claim_version: Any, lease_until: Any) -> str:
    return f"done thinking after {seconds:.0f} s: still claim version {claim_version}, lease until {lease_until}"


def keeper_stopped(reason: Any) -> str:
    return f"his keeper stopped: {reason}"


def claimed(subtask_id: int, key: str, version: int, branch: str, kept: bool) -> str:
    return f"claimed #{subtask_id} {key!r} v{version} -> {branch}" + (" (kept by a keeper)" if kept else "")


def handoff_read(author: str, version: Any, first: str) -> str:
    return f"handoff note from {author} (v{version}): {first[:100]}"


def conflict_hunk(path: Any, lines: list[str]) -> str:
    return f"the hunk in {path}: {' | '.join(lines)}"


def rebased(command: str) -> str:
    return f"ran `{command}`, resolved CHANGES.md, committed"


def landed_as(sha: str) -> str:
    return f"landed as {sha}"


def refused(kind: str, first_line: str) -> str:
    return f"{kind}: {first_line}"


def next_step(text: Any) -> str:
    return f"  next: {text}"


def counts(candidates: int, landed: int, rejected: int) -> str:
    return f"\ncandidates: {candidates}, landed {landed}, rejected {rejected}"


def rejection(kind: str, subtask_id: int, key: str, facts: list[str], fixed: bool) -> str:
    return (f"  {kind}: #{subtask_id} {key!r} ({', '.join(facts)})"
            + ("; fixed and landed" if fixed else "; not landed"))


def lapsed_and_refused(subtask_id: int, key: str, version: Any, refused: list[tuple[Any, Any]]) -> str:
    return (f"  lease lapsed: #{subtask_id} {key!r} went back to ready from claim version {version}; "
            + "; ".join(f"a late push refused ({code}, claim version {v})" for code, v in refused))


def handed_over(author: str, subtask_id: int, key: str, owner: str, version: Any) -> str:
    return (f"  handoff: {author}'s note on #{subtask_id} {key!r} was handed to {owner}, who landed it at claim "
            f"version {version}")


def kept_claim(subtask_id: int, key: str, owner: str, version: Any, think: float, lease: float, note: str) -> str:
    return (f"  kept claim: #{subtask_id} {key!r} landed by {owner} at claim version {version} after a quiet spell "
            f"of {think:.0f} s (leases of {lease:.0f} s); the keeper's note: {note}")


def main_log(log: str) -> str:
    return "\nmain (first parent):\n" + log


def findings(report: list[Any]) -> str:
    return "reconciler findings: " + ("none: every commit on main is explained by a landed row" if not report
                                      else str(report))
