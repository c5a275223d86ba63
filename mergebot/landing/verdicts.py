"""Every verdict an agent can be given, as a typed record: what each kind means, whether it is final, and the
command that comes next. Pure: the queue and the push checks record a kind and its facts; this module turns them,
with the subtask as it is now, into the ``Verdict`` every door shows (API, CLI, MCP tools, pages, statuses).

Rules:
  * ``KINDS`` is the whole list; the agents' guide (``docs/agents.md``) explains each one (a test checks it).
  * A verdict is ``final`` when nothing more happens by itself. Waiting (queued, verifying, landing) and a
    pre-existing failure (parked: it lands once main is green again) are not final.
  * ``next`` is one command. While the claim still holds, ``branch`` is the exact ref to push to; once it does
    not (the subtask landed, was reclaimed, went back to ready), there is no branch and ``next`` says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from mergebot.messages.refs import subtask_ref
from mergebot.models import Candidate, Verdict


class Now(Protocol):
    """The subtask as it is now (a ``Subtask``, or the push checks' ``Owner``)."""

    @property
    def status(self) -> str: ...

    @property
    def claim_version(self) -> int: ...


@dataclass(frozen=True)
class Kind:
    final: bool
    meaning: str
    next: str  # with {sid}, {id}, {target} filled in


KINDS: dict[str, Kind] = {
    # the queue's verdicts on a candidate
    "queued": Kind(False, "waits in the merge queue", "`mergebot wait {sid}` (or `mergebot submit` waits for it)"),
    "verifying": Kind(False, "its check runs on the merged commit", "`mergebot wait {sid}`"),
    "landing": Kind(False, "it passed; main is moving to it", "`mergebot wait {sid}`"),
    "landed": Kind(True, "it is on {target}", "`mergebot start --repo REPO --dir DIR` for the next subtask"),
    "pre_existing": Kind(False, "the check fails on {target} too: not the change's fault; parked until {target} is "
                         "green, then it is verified again by itself", "nothing: `mergebot wait {sid}`"),
    "conflict": Kind(True, "it conflicts with {target} in the paths given (hunks shows where)",
                     "`git fetch origin {target} && git rebase origin/{target}`, resolve, commit, `mergebot submit`"),
    "nothing_to_land": Kind(True, "the commit is already on {target}",
                            "commit the subtask's work and `mergebot submit` (or, if it is done, tell the lead with "
                            "`mergebot note`)"),
    "check_failed": Kind(True, "the check failed on the merged commit, and again on a retry (failing_tests names "
                         "the tests; log_tail is the end of the log)",
                         "fix it, commit, `mergebot submit`"),
    "check_timeout": Kind(True, "the check ran past its time limit on the merged commit",
                          "make it finish in time (a hang, a slow test), commit, `mergebot submit`"),
    "disk_limit": Kind(True, "the check wrote more than the repository's disk limit on the merged commit (its "
                       "checkout's changes, /tmp and /dev/shm together) and was ended; never retried",
                       "write less (a test that leaves large files, a build into the checkout, a runaway log), "
                       "commit, `mergebot submit`"),
    "memory_limit": Kind(True, "the check used more resident memory than the repository's limit on the merged "
                         "commit: the kernel killed a process of it, and the run was ended; never retried",
                         "use less memory (a leak, a test that loads too much at once), commit, `mergebot submit`"),
    "tests_weakened": Kind(True, "the check exited 0 on the merged commit, but tests that pass on {target} do not "
                           "pass now (failed, skipped, xfailed, deselected, missing or deleted: tests.weakened names "
                           "each and what it became)",
                           "make those tests pass again without changing them (`git diff origin/{target} -- "
                           "'*test*'` shows what you changed), commit, `mergebot submit`; if a test must go, ask a "
                           "lead: `mergebot allow {sid} --test-removal`"),
    "no_report": Kind(True, "the check exited 0 on the merged commit, but reported no test outcome at all, where "
                      "{target}'s tests do: something stopped pytest from reporting (an exit before the tests ran, "
                      "a disabled plugin, a report that was not written)",
                      "let the suite run and report as it does on {target} (do not exit early, disable plugins or "
                      "move the report), commit, `mergebot submit`"),
    "report_flood": Kind(True, "the check reported more test outcomes than the verifier keeps (more lines, tests "
                         "or bytes than its bounds, or a test id that is too long: tests.problem says which): nothing "
                         "of what it reported was kept, so nothing of it can pass", "let the suite report as it does "
                         "on {target} (no code of the change writes to the test report, prints outcomes or makes up "
                         "test ids), commit, `mergebot submit`"),
    "acceptance_failed": Kind(True, "the check exited 0 on the merged commit, but the subtask's acceptance tests "
                              "did not all pass (tests.comparison.acceptance names each; a file none of whose tests "
                              "ran counts too)", "make the acceptance tests pass as they are (`mergebot show {sid}` "
                              "names them, GET /api/v1/subtasks/{sid}/acceptance gives them; they are written into "
                              "every merge, whatever your branch has at their paths), commit, `mergebot submit`"),
    "tests_changed": Kind(True, "the change edits existing tests (tests.comparison.changed names them), and the "
                          "repository refuses that unless a lead marked the subtask as changing behaviour",
                          "keep the existing tests as they are and add new ones (`git diff origin/{target} -- "
                          "'*test*'`), commit, `mergebot submit`; if the behaviour they test must change, ask a "
                          "lead: `mergebot allow {sid} --behaviour-change`"),
    "held_out_failed": Kind(True, "the check passed on the merged commit, but the repository's held-out checks "
                            "failed (failing_tests names them; held-out checks are never shown: only whether they "
                            "pass, and which failed)", "make the change do what the subtask asks, not only what its "
                            "visible tests check (a hard-coded answer fails them), commit, `mergebot submit`"),
    "flaky_then_failed": Kind(True, "it failed once and passed on a retry (flaky), then failed again when it was "
                              "verified on the newer {target}", "fix it, commit, `mergebot submit`; if the test is "
                              "flaky, `mergebot submit --again`"),
    "verifier_error": Kind(True, "the verifier could not run the check (twice): no verdict on the change",
                           "`mergebot submit --again`"),
    "superseded": Kind(True, "replaced: a newer push of the subtask, or its claim moved on",
                       "`mergebot submit` follows your newest push; if the claim moved on, claim other work"),
    "cancelled": Kind(True, "the queue dropped it (its subtask was cancelled, or its landing could not be "
                      "recorded)", "`mergebot show {sid}`, then claim other work"),
    # the push checks' refusals (git refused the push; nothing was queued)
    "protected_ref": Kind(True, "only subtask branches may be pushed; {target} and other refs are the bot's",
                          "`mergebot submit` (it pushes to your claim's branch)"),
    "unknown_subtask": Kind(True, "the branch names a subtask that does not exist", "`mergebot claim` for work"),
    "not_owner": Kind(True, "the subtask is not yours", "`mergebot start --repo REPO --dir DIR` for your own work"),
    "stale_claim": Kind(True, "the branch's claim version is not the subtask's current one (the claim was "
                        "superseded, or the version does not exist yet)",
                        "`mergebot start --repo REPO --dir DIR --carry` to claim again with your commits"),
    "landing_now": Kind(True, "the previous push of the subtask is being landed right now", "`mergebot wait {sid}`"),
    "not_running": Kind(True, "the subtask is not being worked on (landed, ready, failed or cancelled)",
                        "`mergebot show {sid}`, then claim other work"),
    "too_large": Kind(True, "the push, or a file in it, is over the repository's size limits",
                      "keep generated and binary files out of the change, amend, `mergebot submit`"),
    "history_anomaly": Kind(True, "the pushed history is not a change on {target} (an unrelated root, too many "
                            "commits, or other agents' unlanded commits)",
                            "`git fetch origin {target} && git rebase origin/{target}`, `mergebot submit`"),
    "check_config": Kind(True, "the change touches what decides how the check runs (paths lists them: conftest.py, "
                         "pytest.ini, the check's own script...): the check runs as {target} configures it",
                         "take those changes out (`git restore --source origin/{target} -- PATH`), commit, `mergebot "
                         "submit`; if the subtask must change the check, ask a lead: `mergebot allow {sid} "
                         "--check-changes`"),
    "protected_path": Kind(True, "the change touches paths the operator protects (paths lists them)",
                           "take those changes out (`git restore --source origin/{target} -- PATH`), commit, "
                           "`mergebot submit`"),
    "outside_footprint": Kind(True, "the change touches paths outside its subtask's footprint (paths lists them), "
                              "and the repository refuses that", "take those changes out, commit, `mergebot "
                              "submit`; or claim with a wider footprint (`mergebot start --touch PATH`)"),
    "suspicious": Kind(True, "the change's non-test code reaches into the machinery that checks it (suspicious names "
                       "each line and why: the outcome pipe, pytest's variables, the held-out checks, sys.modules or "
                       "builtins written, an exit at import, an always-true __eq__...), and the repository refuses "
                       "that",
                       "take those lines out (code that behaves the same whether or not it is tested), commit, "
                       "`mergebot submit`; if the subtask must touch the test machinery, ask a lead: `mergebot allow "
                       "{sid} --check-changes`"),
    "duplicate": Kind(True, "the same change (patch id) as another subtask's, landed or in the queue (twin names "
                      "it): the work is done once", "if subtask {sid} is that work, `mergebot note {sid} ...` for the "
                      "lead and `mergebot release {sid}`; else make the change it asks for and `mergebot submit`"),
    "claim_superseded": Kind(True, "git took the push, but the claim had changed before it reached the queue",
                             "`mergebot show {sid}`; `mergebot start --repo REPO --dir DIR --carry` to claim again"),
    # what the agent's side says without a verdict from the bot
    "unchanged": Kind(True, "nothing was pushed: the branch already held the commit, so nothing was queued",
                      "commit a change and `mergebot submit`, or `mergebot submit --again`"),
    "push_failed": Kind(True, "git could not push (the server refused the connection or the credentials)",
                        "read git's message; check `mergebot status` and the token"),
}

_PUSH_CODES = {"landing": "landing_now"}  # a push refusal's code, where its kind is named apart
_STATUS_KINDS = {"queued": "queued", "verifying": "verifying", "landing": "landing", "landed": "landed",
                 "parked": "pre_existing", "superseded": "superseded", "cancelled": "cancelled"}
_REASON_KINDS = (("conflicts with ", "conflict"), ("nothing to land", "nothing_to_land"),
                 ("the verifier could not run", "verifier_error"), ("the check ", "check_failed"))


def kind_of(cand: Candidate) -> str:
    """The kind of a candidate's verdict: as recorded, else from its status (or, for rows older than recorded
    kinds, from its reason's first words)."""
    return kind_for(cand.status, cand.reason, cand.verdict)


def kind_for(status: str, reason: str | None, verdict: dict[str, Any] | None) -> str:
    """``kind_of`` for a candidate's columns as a page reads them."""
    if verdict and verdict.get("kind") in KINDS and status == "rejected":
        return str(verdict["kind"])
    if status != "rejected":
        return _STATUS_KINDS.get(status, "queued")
    reason = reason or ""
    if reason.startswith("the check ") and " gave timeout" in reason:
        return "check_timeout"
    for limit in ("disk limit", "memory limit"):
        if reason.startswith("the check ") and f" reached its {limit}" in reason:
            return limit.replace(" ", "_")
    return next((k for prefix, k in _REASON_KINDS if reason.startswith(prefix)), "check_failed")


def holds(sub: Now | None, claim_version: int) -> bool:
    """Whether the claim at ``claim_version`` still owns the subtask (so its branch is the one to push to)."""
    return sub is not None and sub.claim_version == claim_version and sub.status in ("running", "submitted")


def recorded(kind: str, *, paths: list[str] | None = None, hunks: list[dict[str, Any]] | None = None,
             failing_tests: list[str] | None = None, **more: Any) -> dict[str, Any]:
    """What the queue records with a candidate's new status: the verdict's kind and its facts."""
    assert kind in KINDS, kind
    out: dict[str, Any] = {"kind": kind, **more}
    for name, value in (("paths", paths), ("hunks", hunks), ("failing_tests", failing_tests)):
        if value:
            out[name] = value
    return out


def for_candidate(cand: Candidate, sub: Now | None, target_branch: str) -> Verdict:
    kind = kind_of(cand)
    facts = cand.verdict or {}
    run = cand.verifier or {}
    message = cand.reason or KINDS[kind].meaning.format(target=target_branch)
    return _verdict(kind, message, sub, cand.subtask_id, cand.claim_version, target_branch, candidate_id=cand.id,
                    sha=cand.sha, base_sha=cand.base_sha, merged_sha=cand.merged_sha,
                    paths=list(facts.get("paths") or []), hunks=list(facts.get("hunks") or []),
                    failing_tests=list(facts.get("failing_tests") or run.get("failing_tests") or []),
                    outside_footprint=list(cand.outside_footprint or []), suspicious=list(cand.suspicious or []),
                    log_tail=(run.get("log_tail") or run.get("log_head") or "")[-4000:] if kind in _WITH_LOG else "",
                    sandbox=run.get("sandbox") or None, limits=(run.get("limits") or {}).get("enforced"),
                    tests=tests_facts(run))


def tests_facts(run: dict[str, Any]) -> dict[str, Any] | None:
    """What a run's tests came to: the counts and, when they were held to main's, the comparison."""
    tests = run.get("tests")
    if not isinstance(tests, dict) or (not tests.get("source") and not tests.get("comparison")):
        return None
    return {k: tests[k] for k in ("source", "counts", "total", "problem", "flood", "comparison", "held_out", "own",
                                  "reset") if k in tests}


def for_refusal(code: str, message: str, subtask_id: int | None, claim_version: int | None, sha: str | None,
                target_branch: str, sub: Now | None, paths: list[str] | None = None,
                twin: dict[str, Any] | None = None) -> Verdict:
    """A push git refused (its rule's ``code``, ``mergebot.landing.checks``)."""
    kind = _PUSH_CODES.get(code, code if code in KINDS else "history_anomaly")
    return _verdict(kind, message, sub, subtask_id, claim_version, target_branch, sha=sha, paths=paths or [],
                    twin=twin)


_WITH_LOG = frozenset({"check_failed", "check_timeout", "disk_limit", "memory_limit", "flaky_then_failed",
                       "verifier_error", "pre_existing", "tests_weakened", "no_report", "acceptance_failed",
                       "report_flood"})


def _verdict(kind: str, message: str, sub: Now | None, subtask_id: int | None, claim_version: int | None,
             target_branch: str, **facts: Any) -> Verdict:
    k = KINDS[kind]
    sid = subtask_id if subtask_id is not None else "ID"
    nxt = k.next.format(sid=sid, target=target_branch)
    branch = None
    if subtask_id is not None and claim_version is not None and holds(sub, claim_version):
        branch = subtask_ref(subtask_id, claim_version)
    elif k.final and kind not in ("landed", "unknown_subtask", "not_owner", "stale_claim", "claim_superseded") \
            and sub is not None:
        nxt = (f"the claim no longer holds (subtask {sid} is {sub.status} at claim version {sub.claim_version}): "
               + ("claim other work, `mergebot claim`" if sub.status != "ready" else
                  "`mergebot start --repo REPO --dir DIR --carry` to claim it again with your commits"))
    return Verdict(kind=kind, message=message, final=k.final, next=nxt, branch=branch, subtask_id=subtask_id,
                   claim_version=claim_version, **facts)
