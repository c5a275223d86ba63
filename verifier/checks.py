"""Named checks (issue 43): the one result of a run of several checks on one commit, from each check's own result.

A repository may declare several named checks (lint, types, unit); the checks of one commit run in parallel, each
in a job of its own, and whoever judges the commit reads ONE result, as for a single check. ``combine`` makes it:

  * **outcome**: ``pass`` when every required check passed (an optional check's failure is recorded in ``checks``
    and never blocks); else the outcome of the first required check, in the declared order, that did not pass, with
    its exit code and failing tests. A check that gave no result (cancelled, lost) is an ``error``. Checks that
    disagree about the tree they ran on make the whole an ``error`` (each must have run the same commit).
  * **tests**: every check's outcomes merged (``verifier.outcomes``). The first check's node ids stay as they are
    (it is the one that also runs the candidate's own tests, and acceptance tests, deleted-test permission and the
    own tests' files are read from plain ids); every other check's ids are prefixed with its name (``lint::...``),
    so that main's baseline, a run of the same group, is compared check by check (PASS_TO_PASS per check) by the
    comparison that knows nothing of checks. One check's flood floods the whole.
  * **own**: the first check's (the candidate's own tests run in that check only).
  * **log**: each check's log head under a header naming it (shares of ``head_bytes``), and the deciding check's
    tail (the failing one's, else the last check's) under its header; size the sum, digest over the checks' digests.
  * **duration**: the slowest check's (they ran at the same time); ``checks``: one record per check (name,
    required, outcome, duration_ms, job), what verdicts and pages show.

Pure: results in, result out.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from verifier import outcomes
from verifier.result import Result

HEAD_BYTES = 16 * 1024
PASSING = frozenset({"pass"})


@dataclass(frozen=True)
class Ran:
    """One check of a group and what it gave (``result`` None: it gave none, cancelled or lost)."""

    name: str
    required: bool
    job_id: int | None
    result: Result | None


def header(name: str, required: bool, outcome: str) -> str:
    return f"===== check {name} ({'required' if required else 'optional'}): {outcome} =====\n"


def prefixed(out: outcomes.Outcomes, name: str) -> outcomes.Outcomes:
    """``out`` with every node id prefixed by the check's name."""
    return outcomes.Outcomes({f"{name}::{t}": o for t, o in out.tests.items()},
                             {f"{name}::{t}": n for t, n in out.lines.items()}, out.source, out.sessions, out.problem,
                             out.flood, out.plugins)


def merged_tests(ran: list[Ran]) -> dict[str, object] | None:
    """The checks' outcomes as one ``Result.tests`` record (None when no check reported any)."""
    parts = []
    for i, r in enumerate(ran):
        if r.result is None or not r.result.tests:
            continue
        got = outcomes.unpack(r.result.tests)
        if got.flood:
            return outcomes.Outcomes(source=got.source, flood=f"check {r.name}: {got.flood}").record()
        if got.source:
            parts.append(got if i == 0 else prefixed(got, r.name))
    if not parts:
        return None
    out = outcomes.Outcomes(source=parts[0].source, sessions=sum(p.sessions for p in parts),
                            problem="; ".join(p.problem for p in parts if p.problem),
                            plugins=next((p.plugins for p in parts if p.plugins is not None), None))
    for p in parts:
        out.tests.update(p.tests)
        out.lines.update(p.lines)
    return out.record()


def combine(commit_sha: str, command: str, ran: list[Ran], head_bytes: int = HEAD_BYTES) -> Result:
    """The group's one result (see the module's rules); ``command`` names the group (``Repo.check_command``)."""
    got = {r.name: r.result or Result(commit_sha, "", "", "error", None, 0, "this check gave no result", "", 0, "")
           for r in ran}
    trees = {g.tree_sha for g in got.values() if g.tree_sha}
    deciding = next((r for r in ran if r.required and got[r.name].outcome not in PASSING), None)
    outcome = got[deciding.name].outcome if deciding is not None else "pass"
    if len(trees) > 1:
        outcome = "error"
    first = got[ran[0].name] if ran else None
    tail_of = deciding or (ran[-1] if ran else None)
    share = max(256, head_bytes // max(1, len(ran)))
    head = "".join(header(r.name, r.required, got[r.name].outcome) + _cut(got[r.name].log_head, share) for r in ran)
    if len(trees) > 1:
        head = f"the checks ran on different trees ({', '.join(sorted(trees))}): no result can be vouched for\n" + head
    tail = (header(tail_of.name, tail_of.required, got[tail_of.name].outcome) + got[tail_of.name].log_tail
            if tail_of is not None and got[tail_of.name].log_tail else "")
    failing = [] if deciding is None else [
        t if deciding is ran[0] else f"{deciding.name}::{t}" for t in got[deciding.name].failing_tests]
    return Result(
        commit_sha=commit_sha, tree_sha=min(trees) if len(trees) == 1 else "", command=command, outcome=outcome,
        exit_code=got[deciding.name].exit_code if deciding is not None else 0,
        duration_ms=max((g.duration_ms for g in got.values()), default=0),
        log_head=head, log_tail=tail, log_size=sum(g.log_size for g in got.values()),
        log_digest=hashlib.sha256("".join(g.log_digest for g in got.values()).encode()).hexdigest(),
        sandbox=first.sandbox if first is not None else "none", failing_tests=failing,
        failing_tests_from=got[deciding.name].failing_tests_from if deciding is not None else "",
        cache=first.cache if first is not None else None, setup=first.setup if first is not None else None,
        limits=got[deciding.name].limits if deciding is not None else (first.limits if first is not None else None),
        tests=merged_tests(ran), own=first.own if first is not None else None,
        checks=[{"name": r.name, "required": r.required, "outcome": got[r.name].overall,
                 "duration_ms": got[r.name].duration_ms, "job": r.job_id} for r in ran])


def _cut(text: str, most: int) -> str:
    text = text if len(text) <= most else text[:most] + "\n[...]\n"
    return text if not text or text.endswith("\n") else text + "\n"
