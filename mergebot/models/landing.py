"""The landing path's records: repositories, candidates, verdicts, landing intents with their evidence, landed
rows, and who holds a subtask now.

Part of ``mergebot.models``: plain records, no behaviour beyond building themselves.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from mergebot.models.base import FromRow, _name_set, record


@dataclass(kw_only=True)
class Landing:
    """The evidence the landing path hands to ``db.landing.land``: what landed, on what, checked how."""

    subtask_id: int
    claim_version: int
    owner_id: int
    repo: str
    target_ref: str
    candidate_sha: str
    base_sha: str
    merged_sha: str
    tree_sha: str
    verifier_command: str
    verifier_result: str  # pass, or flaky (failed once, passed on a retry of the same commit)
    duration_ms: int
    log_digest: str
    main_sha: str | None = None  # a batch: the commit main moved to (its last member's merge); None = merged_sha
    batch_size: int = 1
    verifier_cache: dict[str, Any] | None = None  # the cache generation the deciding run read (verifier.cache)
    verifier_sandbox: str | None = None  # the deciding run's sandbox: bwrap or none
    verifier_limits: str | None = None  # how its limits were enforced: "cpu=cgroup memory=cgroup disk=tmpfs ..."
    tests_changed: list[str] | None = None  # the existing test functions its change edits
    policy: str | None = None  # how the queue landed it: serial, speculative, batched, risk-aware, left-out
    union_merged: list[str] | None = None  # the files whose conflicts its merge resolved by union (issue 45)


@dataclass(kw_only=True)
class Landed(Landing, FromRow):
    """A ``landed`` row: the landing as recorded, with its id, when, who, and main's status after it."""

    id: int
    main_status: str  # pending until the post-land check; then its outcome, or superseded
    landed_at: datetime
    owner: str | None = None
    run_id: int | None = None  # the verifier run that passed on main_sha (None: landed without the queue)
    acceptance: list[str] | None = None  # the acceptance tests it carried (paths)
    batch_id: int | None = None  # the landing it was part of, shared by a batch's members (its intent's id)
    kind: str = "land"  # or "revert": the bot's revert of the landing ``reverts``, which broke main
    reverts: int | None = None
    approved_by: list[str] | None = None  # who approved its commit, where the repository required it (names)


@dataclass(frozen=True)
class Owner:
    """Who holds a subtask now, as the database has it: what the push rules judge a push against."""

    subtask_id: int
    status: str
    owner_id: int | None
    claim_version: int
    landing: bool = False  # a candidate of this subtask is being landed right now
    paths: list[str] = field(default_factory=list)  # its footprint
    allow_check_changes: bool = False  # a lead allowed it to change what configures the check


@dataclass
class Repo(FromRow):
    name: str
    target_branch: str
    verifier_command: str
    verifier_timeout_s: int
    protected_paths: list[str]
    max_push_bytes: int
    max_file_bytes: int
    root_sha: str
    paused: bool = False
    paused_reason: str | None = None
    red_since: str | None = None  # main's head when its check failed; None while main is green
    mend_given_up: str | None = None  # main's head when mending it gave up: not tried again until main moves
    created_at: datetime | None = None
    forge: str | None = None  # "github", "gitea" or "forgejo" for a forge repository; None when hosted here
    forge_repo: str | None = None  # "owner/name" on the forge
    forge_api_url: str | None = None
    forge_git_url: str | None = None
    webhook_secret_env: str | None = None  # names of environment variables, never the secrets themselves
    forge_token_env: str | None = None
    github_app_id: int | None = None  # a GitHub App's id, when the repository authenticates as its installation
    github_app_key_env: str | None = None  # the variable holding the App's private key (never the key)
    github_installation_id: int | None = None  # None: found from the repository
    footprint_refuse: bool = False  # a push outside its subtask's footprint is refused (else a warning)
    cache_paths: list[str] = field(default_factory=list)  # the check's caches inside the checkout
    cache_key: list[str] = field(default_factory=list)  # files whose content keys the caches (lockfiles)
    setup_command: str | None = None  # run before the check in the same checkout
    setup_network: bool = False  # the setup may use the network, on commits already on main only
    post_land_command: str | None = None  # the check on main after a landing (and its bisection); None: verifier's
    sandbox_paths: list[str] = field(default_factory=list)  # more read-only paths in the check's view
    disk_limit_mb: int = 2048  # what one run may write in all (its overlay, /tmp and /dev/shm)
    memory_limit_mb: int = 4096  # the memory one run may use (resident in all; address space per process)
    report: str = "pytest"  # where its tests' outcomes come from: our pytest plugin, or "junit:PATH"
    check_config: list[str] = field(default_factory=lambda: ["conftest.py", "pytest.ini", "tox.ini", "noxfile.py"])
    held_out_command: str = 'python -m pytest -q -p no:cacheprovider "$VERIFIER_HELD_OUT"'  # runs the held-out checks
    old_tests: str = "flag"  # a candidate that edits existing tests: flagged, or refused (tests_changed)
    risk_aware: bool = True  # the queue orders and batches by each candidate's failure estimate
    test_paths: list[str] = field(default_factory=lambda: ["test_*.py", "*_test.py", "tests/", "test/",
                                                             "conftest.py"])  # taken from main by a judging run
    suspicious: str = "flag"  # what the tamper signal on a candidate's diff does: flag (name it) or refuse
    # queue rules (``mergebot.rules.queue_rules``); None: the server's MERGEBOT_* default
    speculation_window: int | None = None  # runs in flight at most (0: as wide as the verifier slots)
    batch_size: int | None = None  # candidates one run may cover
    retry_failed_checks: bool | None = None  # a failed check runs once more on the same commit
    merge_method: str = "merge"  # how a landing reaches main: a merge commit, or "squash": one single-parent commit
    # approvals (``mergebot.rules.awaits_approval``): None, none; [], every change; else the globs of the paths
    require_approval: list[str] | None = None
    checks: list[dict[str, Any]] = field(default_factory=list)  # named checks ({name, command, required, timeout_s})
    # the audit of main (issue 44): a commit of main without a landing statement is a finding ("flag") or pauses the
    # queue too ("pause"); the head the audit last walked to; the commits it found that no admin has seen yet
    on_unattested: str = "flag"
    audited_head: str | None = None
    unattested: dict[str, Any] | None = None
    # conflicts the bot merges by union (issue 45): the files these globs name, besides main's .gitattributes' own
    union_merge: list[str] = field(default_factory=list)

    @property
    def main_check(self) -> str:
        """The command that judges main after a landing: the post-land command, or the candidates' check."""
        return self.post_land_command or self.check_command

    @property
    def check_command(self) -> str:
        """What names the candidates' check in jobs (a baseline, a pass on main are found by it): the verifier
        command, or for named checks their names and a digest of all of them (``checks lint, unit #1a2b3c4d5e6f``:
        changed checks never reuse the old ones' runs). Given to ``runs.start_check`` it means "the repository's
        check" (a group job of the named checks)."""
        if not self.checks:
            return self.verifier_command
        digest = hashlib.sha256(json.dumps(self.checks, sort_keys=True).encode()).hexdigest()[:12]
        return f"checks {', '.join(str(c['name']) for c in self.checks)} #{digest}"

    @property
    def target_ref(self) -> str:
        return f"refs/heads/{self.target_branch}"


@dataclass
class Candidate(FromRow):
    """A push in the merge queue. ``verifier`` is the verdict's evidence: the deciding run's record with
    ``outcome`` the verdict (pass, flaky, fail, timeout or error) and, when it took more than one, ``runs``."""

    id: int
    repo: str
    subtask_id: int
    claim_version: int
    owner_id: int
    sha: str
    ref: str
    priority: int
    status: str  # queued, verifying, landing, parked, awaiting_approval, landed, rejected, superseded, cancelled
    reason: str | None = None
    base_sha: str | None = None
    merged_sha: str | None = None
    verifier: dict[str, Any] | None = None
    verdict: dict[str, Any] | None = None  # the verdict's kind and facts, as recorded (``Verdict`` adds the rest)
    paths: list[str] | None = None  # the paths it changes (at most 1,000), for the forecast
    outside_footprint: list[str] | None = None  # paths it changes outside its subtask's footprint (a warning)
    suspicious: list[dict[str, Any]] | None = None  # the tamper signal's findings: path, line, rule, text
    patch_id: str | None = None  # its change as one id (``git.patch_id``): the same change elsewhere is a duplicate
    reverts: int | None = None  # the bot's revert of this landed row's change (a red main mending itself)
    failure_risk: float | None = None  # its estimated probability of failing its check (``landing.intake.risk``)
    risk_facts: dict[str, Any] | None = None  # what that estimate rests on, term by term
    passed_over: int = 0  # how often a safer candidate went before it (a risk-aware queue)
    queued_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None


VERDICT_LINE = "Mergebot-Verdict: "  # a refused push's verdict, one JSON record per line of git's answer
# The request header by which a pusher (``mergebot submit``) asks for those lines; a person's ``git push`` does not
# send it, and reads the sentences and the next step instead of the JSON.
VERDICT_HEADER = "X-Mergebot-Verdicts"


@dataclass
class Verdict:
    """What became of a push, and what to do next: the record every door shows (API, ``mergebot submit --json``,
    the MCP tools, the pages, a forge's commit status), with ``message`` its sentence.

    ``kind`` is one of ``mergebot.landing.judge.verdicts.KINDS``. ``final``: nothing more happens by itself (a parked
    candidate is not final: it lands once main is green again). ``next``: the command to run. ``branch``: the exact
    ref to push to next while the claim holds (``refs/heads/subtasks/<id>/v<version>``), else None. ``hunks``: a
    conflict's regions per path; ``failing_tests``: a failed check's tests (from its JUnit report, or pytest's log).
    ``sandbox`` and ``limits``: how the deciding run was confined, when a run decided it.
    """

    kind: str
    message: str
    final: bool
    next: str
    branch: str | None = None
    subtask_id: int | None = None
    claim_version: int | None = None
    candidate_id: int | None = None
    sha: str | None = None
    base_sha: str | None = None
    merged_sha: str | None = None
    paths: list[str] = field(default_factory=list)
    hunks: list[dict[str, Any]] = field(default_factory=list)
    failing_tests: list[str] = field(default_factory=list)
    log_tail: str = ""
    outside_footprint: list[str] = field(default_factory=list)  # changed paths outside the subtask's footprint
    suspicious: list[dict[str, Any]] = field(default_factory=list)  # lines that reach into the test machinery
    twin: dict[str, Any] | None = None  # a duplicate's other subtask: subtask_id, owner, status, sha, landed_sha
    sandbox: str | None = None  # the deciding run's sandbox (bwrap, or none: it ran with the whole machine in view)
    limits: str | None = None  # how its limits were enforced ("cpu=cgroup memory=cgroup disk=tmpfs pids=cgroup")
    tests: dict[str, Any] | None = None  # its tests' counts and their comparison with main's (weakened, removed)
    told: dict[str, Any] | None = None  # what its agent was told when it was rejected (message, next, branch), as
    # recorded then; None for a verdict not recorded so (not a rejection, or a rejection from before it was)
    union_merged: list[str] = field(default_factory=list)  # landed: the files its merge resolved by union
    in_flight: list[dict[str, Any]] = field(default_factory=list)  # a conflict: the other candidates in flight that
    # change its conflicting files (candidate_id, subtask_id, owner, status, paths), to wait for before redoing it


@dataclass(frozen=True)
class Member:
    """One candidate of a landing: its own merge commit on main's first-parent chain, from ``base_sha``."""

    candidate_id: int
    subtask_id: int
    claim_version: int
    owner_id: int
    candidate_sha: str
    base_sha: str
    merged_sha: str
    tree_sha: str
    merge_kind: str = "merge"
    outcome: str = ""  # its own verdict when it differs from the landing's: "flaky" (it failed once and passed a
    # retry before main moved on); "" is the landing's
    union_merged: tuple[str, ...] = ()  # the files whose conflicts its merge resolved by union (issue 45)


@dataclass(frozen=True)
class Evidence:
    """What a landing intent carries, so that the landing can be recorded from it alone after a crash.

    ``verifier`` is the verdict's evidence as the candidate shows it: the passing run's record
    (``verifier.runner.Result.as_json()``) with the verdict as its ``outcome`` and, when the verdict took more than
    one run, the runs under ``runs``; ``outcome`` is that verdict, the one the landed rows record: ``pass``, or
    ``flaky`` (failed once, passed on a retry of the same commit). Both say it, so a replica of an older version
    finishing this intent after a restart records the same. ``batch`` lists every member of a landing
    verified together by one run, in landing order (the last is the intent's candidate); empty for one.
    """

    subtask_id: int
    claim_version: int
    owner_id: int
    candidate_sha: str
    merge_kind: str
    verifier: dict[str, Any]
    outcome: str
    batch: tuple[Member, ...] = ()
    policy: str | None = None  # how the queue landed it (``Landing.policy``)
    union_merged: tuple[str, ...] = ()  # one candidate's files its merge resolved by union (a batch: its members')

    def to_json(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in ("subtask_id", "claim_version", "owner_id", "candidate_sha",
                                             "merge_kind", "verifier", "outcome", "policy")}
        if self.batch:
            out["batch"] = [record(m) for m in self.batch]
        if self.union_merged:
            out["union_merged"] = list(self.union_merged)
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Evidence:
        """Also reads what intents written before ``outcome`` was a field hold (the verdict was the run's)."""
        batch = tuple(Member(**_member_fields(m)) for m in data.get("batch", ()))
        return cls(subtask_id=data["subtask_id"], claim_version=data["claim_version"], owner_id=data["owner_id"],
                   candidate_sha=data["candidate_sha"], merge_kind=data.get("merge_kind", "merge"),
                   verifier=data["verifier"], outcome=data.get("outcome") or data["verifier"]["outcome"],
                   batch=batch, policy=data.get("policy"), union_merged=tuple(data.get("union_merged") or ()))


def _member_fields(m: dict[str, Any]) -> dict[str, Any]:
    """A batch member's fields as an intent's evidence holds them (a list in JSON is the member's tuple)."""
    return {k: tuple(v) if k == "union_merged" else v for k, v in m.items() if k in _name_set(Member)}


@dataclass
class Intent:
    """A landing written down before main moves (``landing_intents``): finished or rolled back, never lost."""

    id: int
    candidate_id: int
    repo: str
    target_ref: str
    old_sha: str
    new_sha: str
    tree_sha: str
    evidence: Evidence
    status: str
    # The signed statements made before main moved (``mergebot.attest``): each {kind, sha, sequence, keyid,
    # envelope}, kept with the landed rows when the landing is recorded.
    attestations: tuple[dict[str, Any], ...] = ()

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Intent:
        return cls(id=row["id"], candidate_id=row["candidate_id"], repo=row["repo"], target_ref=row["target_ref"],
                   old_sha=row["old_sha"], new_sha=row["new_sha"], tree_sha=row["tree_sha"],
                   evidence=Evidence.from_json(row["evidence"]), status=row["status"],
                   attestations=tuple(row.get("attestations") or ()))

    def members(self) -> tuple[Member, ...]:
        """Every candidate this landing records, in landing order (one, or a batch's)."""
        e = self.evidence
        return e.batch or (Member(self.candidate_id, e.subtask_id, e.claim_version, e.owner_id, e.candidate_sha,
                                  self.old_sha, self.new_sha, self.tree_sha, e.merge_kind,
                                  union_merged=e.union_merged),)
