"""Main's first-parent history checked against its landing statements (pure; ``mergebot attest verify``).

Every value main took from its head back to ``since`` (the commit main stood at when the bot took the repository,
named by the statements themselves unless given) must have exactly one landing statement that opens with a trusted
key valid when it was signed, names the commit as its subject and, as main before, the value main took before it:
its first parent, or further down the first-parent history when the landing fast-forwarded a branch of several
commits (those between were carried onto main by that landing and never were its value). Along the history the
landings' numbers (``sequence``) go down strictly, and a verifier that accepted a head before (``accepted``) finds
that head still on main with a number no greater than today's: main never goes backwards and an older statement
is never taken again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mergebot import messages as say
from mergebot.attest import notes
from mergebot.attest.envelope import IN_TOTO, Untrusted, open_envelope
from mergebot.attest.keys import Trust, when
from mergebot.attest.statement import LANDING, STATEMENT


@dataclass(frozen=True)
class Finding:
    sha: str
    why: str


@dataclass
class Report:
    checked: int = 0
    findings: list[Finding] = field(default_factory=list)
    head: str | None = None
    head_sequence: int | None = None
    since: str | None = None
    keys: dict[str, int] = field(default_factory=dict)  # key id -> statements it signed

    @property
    def ok(self) -> bool:
        return not self.findings


def landing_of(sha: str, note: str | None, trust: Trust, repo: str | None = None) -> tuple[dict[str, Any], str]:
    """The one landing statement of ``sha`` in its note, opened and checked alone (subject, signature, key valid at
    its signing time), and the key that signed it; ``Untrusted`` with the reason otherwise."""
    found: list[tuple[dict[str, Any], str]] = []
    problems: list[str] = []
    for envelope in notes.envelopes(note):
        if not isinstance(envelope, dict) or envelope.get("payloadType") != IN_TOTO:
            if isinstance(envelope, dict) and _claims_landing(envelope):
                problems.append(say.attest_wrong_payload_type(envelope.get("payloadType"), IN_TOTO))
            continue
        try:
            statement, keyid = open_envelope(envelope, [k.key() for k in trust.keys], IN_TOTO)
        except Untrusted as e:
            problems.append(e.message)
            continue
        if statement.get("_type") != STATEMENT or statement.get("predicateType") != LANDING:
            continue
        key = trust.key(keyid)
        signed_at = when((statement.get("predicate") or {}).get("timings", {}).get("signedAt"))
        if key is None or not key.valid_at(signed_at):
            problems.append(say.attest_key_not_valid_then(keyid, signed_at.isoformat()))
            continue
        subjects = [s.get("digest", {}).get("gitCommit") for s in statement.get("subject") or []
                    if isinstance(s, dict)]
        if subjects != [sha]:
            problems.append(say.attest_subject_mismatch(sha, subjects))
            continue
        if repo is not None and statement["predicate"].get("repository") != repo:
            problems.append(say.attest_other_repository(statement["predicate"].get("repository"), repo))
            continue
        found.append((statement, keyid))
    if len(found) > 1:
        raise Untrusted(say.attest_several_statements(len(found)))
    if not found:
        raise Untrusted(problems[0] if problems else say.ATTEST_NO_STATEMENT)
    return found[0]


def _claims_landing(envelope: dict[str, Any]) -> bool:
    return isinstance(envelope.get("payload"), str) and isinstance(envelope.get("signatures"), list)


def carried_to(history: Sequence[tuple[str, str | None]], i: int, before: object, end: str | None = None) -> int | None:
    """Where a landing statement of ``history[i]`` whose main-before is ``before`` hands over along main's first-parent
    history: the index of ``before`` (the commits between were carried onto main by that one landing, as a
    fast-forward of a branch of several commits carries them; they never were main's value), ``len(history)`` when
    ``before`` is ``end`` (where a walk stopped), or None when ``before`` is not below ``history[i]``."""
    for k in range(i + 1, len(history)):
        if history[k][0] == before:
            return k
    return len(history) if end is not None and before == end else None


def verify(history: Sequence[tuple[str, str | None]], note_of: Mapping[str, str], trust: Trust, *,
           since: str | None = None, accepted: tuple[str, int] | None = None, repo: str | None = None) -> Report:
    """``history``: main's first-parent chain, head first, each commit with its first parent (None for a root);
    ``note_of``: each commit's note text. See the module's rules: each value main took has its landing statement,
    whose main-before is the value main took before it (a landing that fast-forwards several commits carries the
    ones between)."""
    report = Report(head=history[0][0] if history else None)
    last_sequence: int | None = None
    seen: set[str] = set()
    i = 0
    while i < len(history):
        sha, parent = history[i]
        if since is not None and sha == since:
            report.since = since
            break
        seen.add(sha)
        report.checked += 1
        try:
            statement, keyid = landing_of(sha, note_of.get(sha), trust, repo)
        except Untrusted as e:
            report.findings.append(Finding(sha, e.message))
            if since is None:
                report.findings.append(Finding(sha, say.ATTEST_NO_START))
                return report
            i += 1
            continue
        p = statement["predicate"]
        report.keys[keyid] = report.keys.get(keyid, 0) + 1
        if since is None:
            since = str(p.get("since") or "")
        before = (p.get("main") or {}).get("before")
        k = i + 1 if before == parent else carried_to(history, i, before)
        if k is None:
            report.findings.append(Finding(sha, say.attest_not_its_parent(before, parent)))
            k = i + 1
        for carried, _ in history[i + 1:k]:  # on main by this landing, never main's value: no statement of its own
            seen.add(carried)
            report.checked += 1
        sequence = p.get("sequence")
        if not isinstance(sequence, int) or (last_sequence is not None and sequence >= last_sequence):
            report.findings.append(Finding(sha, say.attest_sequence_backwards(sequence, last_sequence)))
        if report.head_sequence is None and isinstance(sequence, int):
            report.head_sequence = sequence
        last_sequence = sequence if isinstance(sequence, int) else last_sequence
        i = k
    else:
        if since is not None and history:
            report.findings.append(Finding(history[-1][0], say.attest_since_not_found(since)))
    if accepted is not None and report.head is not None:
        commit, sequence = accepted
        if commit not in seen and commit != report.since:
            report.findings.append(Finding(report.head, say.attest_accepted_gone(commit)))
        elif report.head_sequence is not None and report.head_sequence < sequence:
            report.findings.append(Finding(report.head, say.attest_sequence_backwards(report.head_sequence,
                                                                                       sequence)))
    return report
