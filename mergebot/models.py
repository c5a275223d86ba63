"""Plain records the stores return and the landing path hands them. No behaviour beyond building themselves
from a row (``FromRow``) or from the JSON they are stored as.

Every table the stores read has its record here, so that ``mergebot.db`` and the layers above it share one
vocabulary without importing each other: agents, subtasks and their handles, repositories, candidates, landing
intents and their evidence, landed rows, verify jobs, the forge's deliveries and status outbox.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, fields, is_dataclass
from datetime import datetime
from typing import Any, Self


@functools.cache
def _names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls))


@functools.cache
def _name_set(cls: type) -> frozenset[str]:
    return frozenset(_names(cls))


class FromRow:
    """A record built from a query's row: the row's columns that are fields of the record, the rest ignored."""

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Self:
        names = _name_set(cls)  # type: ignore[arg-type]
        return cls(**{k: v for k, v in row.items() if k in names})


def record(obj: Any) -> dict[str, Any]:
    """A record as a dict for a JSON answer: ``dataclasses.asdict`` without its deep copy of every value (about
    6% of the server's CPU in the seeds' replay; the answer is serialized at once and never changed). A field
    that is a dataclass becomes a dict too; lists and dicts are passed as they are (a dataclass inside one is
    left to the JSON encoder, which encodes dataclasses itself)."""
    cls: type = type(obj)
    out = {}
    for name in _names(cls):
        value = getattr(obj, name)
        out[name] = record(value) if is_dataclass(value) and not isinstance(value, type) else value
    return out


@dataclass
class Agent(FromRow):
    id: int
    name: str
    role: str
    created_at: datetime | None = None
    revoked_at: datetime | None = None


@dataclass
class Subtask(FromRow):
    id: int
    title: str
    status: str
    priority: int
    claim_version: int
    attempts: int
    max_attempts: int
    parent_id: int | None = None
    group_name: str | None = None
    description: str = ""
    owner_id: int | None = None
    owner: str | None = None
    previous_owner_id: int | None = None
    previous_owner: str | None = None
    claimed_at: datetime | None = None
    heartbeat_at: datetime | None = None
    lease_expires_at: datetime | None = None
    candidate_sha: str | None = None
    status_reason: str | None = None
    idempotency_key: str | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    finished_at: datetime | None = None
    depends_on: list[int] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)  # its footprint: the paths (globs) it is expected to touch
    allow_test_removal: bool = False  # a lead allowed it to delete tests (never its owner)
    allow_check_changes: bool = False  # a lead allowed it to change what configures the check
    acceptance_probe: int | None = None  # the run of its acceptance tests on main when they were attached
    allow_behaviour_change: bool = False  # a lead marked it as changing behaviour (edits of tests are expected)


@dataclass
class Handle:
    """What an agent holds after a claim: every later write names both numbers."""

    id: int
    claim_version: int


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

    @property
    def main_check(self) -> str:
        """The command that judges main after a landing: the post-land command, or the candidates' check."""
        return self.post_land_command or self.verifier_command

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
    status: str  # queued, verifying, landing, parked, landed, rejected, superseded, cancelled
    reason: str | None = None
    base_sha: str | None = None
    merged_sha: str | None = None
    verifier: dict[str, Any] | None = None
    verdict: dict[str, Any] | None = None  # the verdict's kind and facts, as recorded (``Verdict`` adds the rest)
    paths: list[str] | None = None  # the paths it changes (at most 1,000), for the forecast
    outside_footprint: list[str] | None = None  # paths it changes outside its subtask's footprint (a warning)
    patch_id: str | None = None  # its change as one id (``git.patch_id``): the same change elsewhere is a duplicate
    reverts: int | None = None  # the bot's revert of this landed row's change (a red main mending itself)
    failure_risk: float | None = None  # its estimated probability of failing its check (``landing.risk``)
    risk_facts: dict[str, Any] | None = None  # what that estimate rests on, term by term
    passed_over: int = 0  # how often a safer candidate went before it (a risk-aware queue)
    queued_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None


VERDICT_LINE = "Mergebot-Verdict: "  # a refused push's verdict, one JSON record per line of git's answer


@dataclass
class Verdict:
    """What became of a push, and what to do next: the record every door shows (API, ``mergebot submit --json``,
    the MCP tools, the pages, a forge's commit status), with ``message`` its sentence.

    ``kind`` is one of ``mergebot.landing.verdicts.KINDS``. ``final``: nothing more happens by itself (a parked
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
    twin: dict[str, Any] | None = None  # a duplicate's other subtask: subtask_id, owner, status, sha, landed_sha
    sandbox: str | None = None  # the deciding run's sandbox (bwrap, or none: it ran with the whole machine in view)
    limits: str | None = None  # how its limits were enforced ("cpu=cgroup memory=cgroup disk=tmpfs pids=cgroup")
    tests: dict[str, Any] | None = None  # its tests' counts and their comparison with main's (weakened, removed)


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

    def to_json(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in ("subtask_id", "claim_version", "owner_id", "candidate_sha",
                                             "merge_kind", "verifier", "outcome", "policy")}
        if self.batch:
            out["batch"] = [record(m) for m in self.batch]
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Evidence:
        """Also reads what intents written before ``outcome`` was a field hold (the verdict was the run's)."""
        batch = tuple(Member(**{k: v for k, v in m.items() if k in _name_set(Member)}) for m in data.get("batch", ()))
        return cls(subtask_id=data["subtask_id"], claim_version=data["claim_version"], owner_id=data["owner_id"],
                   candidate_sha=data["candidate_sha"], merge_kind=data.get("merge_kind", "merge"),
                   verifier=data["verifier"], outcome=data.get("outcome") or data["verifier"]["outcome"],
                   batch=batch, policy=data.get("policy"))


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

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Intent:
        return cls(id=row["id"], candidate_id=row["candidate_id"], repo=row["repo"], target_ref=row["target_ref"],
                   old_sha=row["old_sha"], new_sha=row["new_sha"], tree_sha=row["tree_sha"],
                   evidence=Evidence.from_json(row["evidence"]), status=row["status"])

    def members(self) -> tuple[Member, ...]:
        """Every candidate this landing records, in landing order (one, or a batch's)."""
        e = self.evidence
        return e.batch or (Member(self.candidate_id, e.subtask_id, e.claim_version, e.owner_id, e.candidate_sha,
                                  self.old_sha, self.new_sha, self.tree_sha, e.merge_kind),)


@dataclass
class Job(FromRow):
    """A verify job: the queue's request for the repository's check on one exact commit."""

    id: int
    repo: str
    commit_sha: str
    command: str
    timeout_s: int
    purpose: str  # candidate, retry, base or post_land
    status: str  # queued, running, done or cancelled
    claim_version: int
    attempts: int
    candidate_id: int | None = None
    landed_id: int | None = None
    worker_id: int | None = None
    worker_name: str | None = None
    lease_expires_at: datetime | None = None
    outcome: str | None = None
    result: dict[str, Any] | None = None
    created_at: datetime | None = None
    finished_at: datetime | None = None
    cache: dict[str, Any] | None = None  # the run's cache request: paths, key_files, write (verifier.cache)
    sandbox: dict[str, Any] | None = None  # the run's sandbox: paths (read-only in its view), disk_limit_mb
    tree_sha: str | None = None  # the tree the run was proven to be (set when it finishes)


@dataclass
class StatusRow(FromRow):
    """A commit status waiting in the forge outbox (or sent, or given up)."""

    id: int
    repo: str
    sha: str
    state: str
    description: str
    candidate_id: int | None = None
    attempts: int = 0
    sent_at: datetime | None = None
    given_up_at: datetime | None = None
    last_error: str | None = None


@dataclass
class CheckRunRow(FromRow):
    """A check run in the forge outbox (a candidate's, or main's new commit's): GitHub's id once created, and how
    far it was sent."""

    id: int
    kind: str  # "candidate": a pull request's head commit; "main": main's new commit after a landing
    candidate_id: int | None
    repo: str
    head_sha: str
    check_run_id: int | None = None
    version: int = 1
    sent_version: int = 0
    attempts: int = 0
    last_error: str | None = None
    given_up_at: datetime | None = None


@dataclass
class PullRow(FromRow):
    """A pull request the bot heard of, with its one living comment once posted, and how far it was sent."""

    repo: str
    number: int
    head_ref: str
    comment_id: int | None = None
    version: int = 1
    sent_version: int = 0
    sent_digest: str | None = None
    answer: str | None = None  # to the last command given on the pull request
    full_verdict: bool = False  # "@mergebot why" was asked: the comment shows the whole verdict
    attempts: int = 0
    last_error: str | None = None
    given_up_at: datetime | None = None


@dataclass
class DeliveryRow(FromRow):
    """A forge webhook delivery, by its id."""

    forge: str
    delivery_id: str
    event: str
    body_sha256: str
    status: str
    http_status: int | None = None
    outcome: str | None = None
    repo: str | None = None
    attempts: int = 1
