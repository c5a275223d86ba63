"""The statements a landing is proven by (pure): in-toto Statement v1 with the Mergebot landing predicate, and with
in-toto's test-result predicate.

The landing predicate (``LANDING``; documented as a JSON schema in ``schema/landing-v1.json``) holds what a reviewer
needs to trust a landing without the database: main before (the compare-and-swap's old value) and after, the
commit the run verified, the subtask, claim version, owner and pusher, each check's command and outcome, the digest
of the configuration they ran with, the sandbox and its enforced limits, the tests (counts; every test that did not
pass named with its outcome and, for a skip, its message; a skipped test is never counted as passed), the acceptance
and held-out results (pass or fail and a digest of the files, never their text), the log's digest, what a lead
allowed, who approved, and the times. ``sequence`` numbers a repository's landings 1, 2, 3, ... so a verifier can
tell a replay of an older statement; ``since`` is the commit main stood at when the bot took the repository.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

STATEMENT = "https://in-toto.io/Statement/v1"
LANDING = "https://mergebot.dev/attestation/landing/v1"
TEST_RESULT = "https://in-toto.io/attestation/test-result/v0.1"
PASSING = frozenset({"passed", "xfailed"})  # outcomes that count as a pass (an expected failure that failed)
SKIPPING = frozenset({"skipped", "deselected"})
MAX_NAMED = 1000  # tests named per list; the counts stay whole


@dataclass(frozen=True)
class Check:
    name: str
    command: str
    required: bool
    outcome: str
    duration_ms: int
    log_digest: str


@dataclass(frozen=True)
class Facts:
    """One landing's facts, as the landing step gathers them (``mergebot.landing.main.provenance``)."""

    repo: str
    target_ref: str
    since: str  # main when the bot took the repository
    sequence: int
    before: str  # main before this commit (its first parent)
    after: str  # the landed commit
    tree: str
    moved_to: str  # the commit main moved to (a batch's last)
    verified: str  # the commit the run passed on
    candidate_id: int
    candidate_sha: str
    branch: str
    subtask_id: int
    claim_version: int
    owner: str
    pushed_by: str
    outcome: str  # the verdict: pass or flaky
    checks: tuple[Check, ...]
    config_digest: str
    sandbox: str
    limits: str
    tests: Mapping[str, str]  # test id -> outcome (``verifier.outcomes.OUTCOMES``); empty when none were reported
    tests_source: str
    log_digest: str
    reasons: Mapping[str, str] = field(default_factory=dict)  # why a skipped or xfailed test was (its message)
    acceptance: Mapping[str, Any] | None = None  # {"result", "digest", "files"}
    held_out: Mapping[str, Any] | None = None  # {"result", "digest"}
    allowed: Mapping[str, bool] = field(default_factory=dict)
    approved_by: tuple[str, ...] = ()
    policy: str = ""
    batch_size: int = 1
    batch_position: int = 1
    merge_kind: str = "merge"
    timings: Mapping[str, Any] = field(default_factory=dict)  # pushedAt, queuedAt, verifiedMs, signedAt


def subject(f: Facts) -> list[dict[str, Any]]:
    return [{"name": f"{f.repo}:{f.target_ref}", "digest": {"gitCommit": f.after, "gitTree": f.tree}}]


def tests_summary(tests: Mapping[str, str], reasons: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The tests as a statement says them: counts by outcome, the passed count, and each test that did not pass
    named with its outcome (failed, error, skipped, ...) and, for a skip, its message; a skipped test is never
    among the passed."""
    counts: dict[str, int] = {}
    for outcome in tests.values():
        counts[outcome] = counts.get(outcome, 0) + 1
    not_passed = sorted((t, o) for t, o in tests.items() if o not in PASSING)
    why = reasons or {}
    return {"counts": dict(sorted(counts.items())), "passed": sum(1 for o in tests.values() if o in PASSING),
            "notPassed": [{"id": t, "outcome": o, **({"reason": why[t]} if t in why else {})}
                          for t, o in not_passed[:MAX_NAMED]],
            "notPassedCount": len(not_passed)}


def landing(f: Facts) -> dict[str, Any]:
    predicate = {
        "repository": f.repo, "targetRef": f.target_ref, "since": f.since, "sequence": f.sequence,
        "main": {"before": f.before, "after": f.after, "movedTo": f.moved_to},
        "verifiedCommit": f.verified, "mergeKind": f.merge_kind,
        "candidate": {"id": f.candidate_id, "commit": f.candidate_sha, "branch": f.branch},
        "subtask": {"id": f.subtask_id, "claimVersion": f.claim_version, "owner": f.owner, "pushedBy": f.pushed_by},
        "verdict": f.outcome,
        "checks": [{"name": c.name, "command": c.command, "required": c.required, "outcome": c.outcome,
                    "durationMs": c.duration_ms, "logDigest": c.log_digest} for c in f.checks],
        "checkConfigDigest": f.config_digest,
        "sandbox": {"kind": f.sandbox, "limits": f.limits},
        "tests": {"source": f.tests_source, **tests_summary(f.tests, f.reasons)},
        "acceptance": dict(f.acceptance) if f.acceptance is not None else None,
        "heldOut": dict(f.held_out) if f.held_out is not None else None,
        "logDigest": f.log_digest,
        "allowed": dict(sorted(f.allowed.items())),
        "approvedBy": list(f.approved_by),
        "policy": f.policy,
        "batch": {"size": f.batch_size, "position": f.batch_position},
        "timings": dict(f.timings),
    }
    return {"_type": STATEMENT, "subject": subject(f), "predicateType": LANDING, "predicate": predicate}


def test_result(f: Facts) -> dict[str, Any]:
    """in-toto's test-result predicate: PASSED only when every test passed, WARNED when some were skipped and none
    failed (or when the check reported no test one by one), FAILED otherwise."""
    passed = sorted(t for t, o in f.tests.items() if o in PASSING)
    skipped = sorted(t for t, o in f.tests.items() if o in SKIPPING)
    failed = sorted(t for t, o in f.tests.items() if o not in PASSING and o not in SKIPPING)
    result = "FAILED" if failed else "WARNED" if skipped or not f.tests else "PASSED"
    predicate = {
        "result": result,
        "configuration": [{"name": f"check:{c.name}", "digest": {"sha256": f.config_digest},
                           "annotations": {"command": c.command}} for c in f.checks],
        "passedTests": passed[:MAX_NAMED], "warnedTests": skipped[:MAX_NAMED], "failedTests": failed[:MAX_NAMED],
    }
    return {"_type": STATEMENT, "subject": subject(f), "predicateType": TEST_RESULT, "predicate": predicate}


def reports_pass(statement: Mapping[str, Any]) -> bool:
    """Whether a statement says its tests passed (a landing predicate: nothing failed or skipped; a test result:
    PASSED)."""
    p = statement.get("predicate") or {}
    if statement.get("predicateType") == TEST_RESULT:
        return p.get("result") == "PASSED"
    tests = p.get("tests") or {}
    return not tests.get("notPassedCount") and bool(tests.get("passed"))
