"""Re-verifying a landed record (issue 44, ``mergebot reverify LANDED``): its check run again, compared test by
test with what the record says, and the answer signed as a statement of its own.

Rules:
  * Who: a lead, a reviewer or an admin (``auth`` ``reverify``); an agent is refused and nothing starts.
  * The run: the repository's check exactly as a landing's run starts it (``judge.runs.start_check``: its command,
    or its named checks as a group; their configuration, sandbox paths and limits), on the commit the landed run
    ran on (the judged commit: the merged one with main's tests, the candidate's own tests run apart on the merged
    one, as ``judge.step`` starts it), with the plugins and own tests it was started with; where that run or its
    commit is gone, on the commit main moved to (``postland.head_of``), all tests at once.
    Its purpose is ``reverify``: it never writes a cache generation (``runs.WRITES_CACHE``), is never main's
    baseline (``job_baseline``) and is no post-land check. Where the repository has held-out checks they run too,
    beside it (purpose ``held_out``, naming the landed row), and only their outcome is compared and signed, never
    their tests' names (agents read git notes). One re-verification of a landed row runs at a time: asking again
    while one runs answers with that one.
  * The record it is compared with: the landed run's per-test outcomes (``landed.run_id``'s result, its own tests'
    run with them: ``tests_of``); without them, the landing statement's (its tests that did not pass by name
    and outcome, the passed ones by count).
  * The comparison (``compare``, pure): ``reproduced`` when every test has the same outcome and the check the same
    overall result; ``flaky_only`` when the tests that differ are all known to flake; ``diverged`` otherwise (and
    when only the overall result differs, or the held-out checks' does). A run that could not vouch for anything
    (``error``: its workers lost it, it was cancelled, the sandbox failed) is signed as ``error``, and is no
    finding: ask again.
  * Known to flake: the project keeps no per-test flaky list, but the queue retries a failed check once on the same
    commit (a candidate's ``retry``; main's post-land check is confirmed by a ``bisect`` run of the same commit),
    and a pass there is a flaky run: a test is known to flake when it did not pass in a run of the repository that
    a later run of the same commit passed (``db.jobs.known_flaky``, the newest 200 such runs).
  * The statement: in-toto Statement v1 (``PREDICATE``) whose subject is the landed commit and tree, with the landed
    id, the landing statement's digest, the new run's counts, the tests that differ and the outcome; sealed with
    the data directory's key, kept in ``attestations`` (kind ``reverify``, once per job) and copied into the
    commit's git note. ``diverged`` is a reconcile finding (``reverify_diverged``).
  * A run whose statement a restart kept from being made is finished by the next ask about any landed row
    (``finish_pending``): the statement is made once, by whichever finisher comes first.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from mergebot import auth
from mergebot import messages as say
from mergebot.attest import statement as st
from mergebot.attest.envelope import IN_TOTO, seal
from mergebot.attest.keys import now
from mergebot.errors import Conflict, Forbidden, Unavailable
from mergebot.git import repo as git
from mergebot.landing.context import Context
from mergebot.landing.judge import heldout, runs
from mergebot.landing.main import postland, provenance
from mergebot.landing.target import target_for
from mergebot.models import Agent, Job, Landed, Repo
from verifier.outcomes import unpack
from verifier.result import Result

log = logging.getLogger(__name__)

PREDICATE = "https://mergebot.dev/attestation/reverify/v1"
PURPOSE = "reverify"
OUTCOMES = ("reproduced", "flaky_only", "diverged", "error")  # error: the run could not vouch (``runs.unfinished``)
ABSENT = "absent"  # a test one side reported and the other did not
PASSED = "passed"
RUNNING = frozenset({"queued", "running"})
FLAKY_RUNS = 200  # the repository's runs whose retry passed that the flaky memory reads
SHOWN = 50  # differing tests a person is told by name (the statement names up to ``st.MAX_NAMED``)
_finishing: set[int] = set()  # the runs this process's own tasks finish (``finish_pending`` leaves them to those)


# -- the comparison (pure) -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Comparison:
    outcome: str  # reproduced, flaky_only or diverged
    differing: tuple[tuple[str, str, str], ...]  # (test, its outcome in the record, its outcome now), by test
    flaky: frozenset[str]  # the differing tests known to flake
    overall_same: bool

    def as_json(self) -> list[dict[str, Any]]:
        return [{"id": t, "was": was, "now": now_, "knownFlaky": t in self.flaky}
                for t, was, now_ in self.differing[:st.MAX_NAMED]]


def compare(was: Mapping[str, str], was_passed: bool, now: Mapping[str, str], now_passed: bool,
            known_flaky: Collection[str] = ()) -> Comparison:
    """The record's per-test outcomes ``was`` (and whether its check passed) against a new run's ``now``: every test
    either side reported whose outcome differs (``ABSENT`` where one side has none), and the verdict:
    ``reproduced`` (none differs and the overall result is the same), ``flaky_only`` (some differ, every one of them
    is in ``known_flaky``) or ``diverged`` (a test not known to flake differs, or only the overall result does)."""
    differing = tuple((t, was.get(t, ABSENT), now.get(t, ABSENT)) for t in sorted(set(was) | set(now))
                      if was.get(t, ABSENT) != now.get(t, ABSENT))
    flaky = frozenset(t for t, _, _ in differing if t in known_flaky)
    same = was_passed == now_passed
    if not differing:
        outcome = "reproduced" if same else "diverged"
    else:
        outcome = "flaky_only" if len(flaky) == len(differing) else "diverged"
    return Comparison(outcome, differing, flaky, same)


def record_from_statement(tests: Mapping[str, Any], now: Mapping[str, str]) -> dict[str, str]:
    """A landing statement's tests (``statement.tests_summary``: the not-passed by name, the passed by count) as
    per-test outcomes, for a record whose run is gone: the named ones as named; the new run's passing tests the
    statement does not name are taken as passed then, as many as it counts (the rest stand as ``ABSENT``), and
    any passed tests it counts beyond those are one unnamed entry, so a lost test still differs."""
    out = {str(n.get("id")): str(n.get("outcome")) for n in tests.get("notPassed") or [] if isinstance(n, dict)}
    passed = int(tests.get("passed") or 0)
    for t in sorted(t for t, o in now.items() if o in st.PASSING and t not in out):
        if passed <= 0:
            break
        out[t], passed = now[t], passed - 1
    if passed > 0:
        out[f"({passed} other passed test(s) the statement does not name)"] = PASSED
    return out


def flaky_tests(records: Collection[dict[str, Any] | None]) -> set[str]:
    """The tests that did not pass in the given runs' tests records (``db.jobs.known_flaky``'s)."""
    return {t for r in records for t, o in unpack(r).tests.items() if o not in st.PASSING}


# -- starting a run ----------------------------------------------------------------------------------------------


def _track(ctx: Context, work: Any) -> None:
    task = asyncio.create_task(work)
    ctx.post_land.add(task)
    task.add_done_callback(ctx.post_land.discard)


async def start(ctx: Context, landed_id: int, by: Agent) -> Job:
    """A re-verification of landed row ``landed_id`` asked by ``by``: its run (the one already running, if any),
    finished in the background (``finish``)."""
    if not auth.allowed(auth.Role(by.role), "reverify"):
        raise Forbidden(say.may_not_reverify(by.name, str(by.role)))
    db = ctx.db
    landed = await db.landing.get_landed(landed_id)  # NotFound
    await finish_pending(ctx)
    current = await db.jobs.reverify_latest(landed.id)
    if current is not None and current.status in RUNNING:
        return current
    repo = await db.repos.get_repo(landed.repo)
    original = await _run_of(ctx, landed)
    if original is None and not await _landing_statement(ctx, landed):
        raise Conflict(say.reverify_no_record(landed.id))
    box = {k: v for k, v in ((original.sandbox if original else None) or {}).items() if k in ("plugins", "own")}
    sha = postland.head_of(landed)
    if original is not None and original.commit_sha != sha and await _has(ctx, repo, original.commit_sha):
        sha = original.commit_sha  # the judged commit: the merged one with main's tests, its own tests run apart
    else:
        box.pop("own", None)
    job_id = await runs.start_check(ctx, repo, sha, PURPOSE, landed_id=landed.id, sandbox=box or None)
    if await db.repos.held_out_count(repo.name):
        await runs.start_check(ctx, repo, sha, "held_out", landed_id=landed.id, command=repo.held_out_command,
                               sandbox={"plugins": box["plugins"]} if "plugins" in box else None)
    await db.subtasks.log_event(actor_id=by.id, kind="reverify_requested",
                                detail={"landed_id": landed.id, "job_id": job_id, "repo": repo.name, "sha": sha})
    _finishing.add(job_id)
    _track(ctx, _finish_when_done(ctx, repo, job_id, by.name))
    return await db.jobs.get_job(job_id)


async def _has(ctx: Context, repo: Repo, sha: str) -> bool:
    def look() -> bool:
        try:
            return sha in git.open_repo(target_for(ctx, repo).path)
        except (OSError, ValueError, KeyError):
            return False

    return await asyncio.to_thread(look)


def tests_of(result: Result) -> dict[str, str]:
    """A run's per-test outcomes, its own tests' run (``Result.own``) with them: a test both ran is named twice, the
    own run's marked."""
    out = dict(unpack(result.tests).tests)
    own = (result.own or {}).get("tests") if isinstance(result.own, dict) else None
    for t, o in unpack(own).tests.items():
        out[t if t not in out else f"{t} (own tests' run)"] = o
    return out


async def _run_of(ctx: Context, landed: Landed) -> Job | None:
    if landed.run_id is None:
        return None
    job = (await ctx.db.jobs.get_jobs([landed.run_id])).get(landed.run_id)
    return job if job is not None and job.result else None


async def _landing_statement(ctx: Context, landed: Landed) -> tuple[dict[str, Any], str] | None:
    """The landing statement of the landed commit (its payload) and the payload's sha256."""
    for row in await ctx.db.attest.of_landed(landed.id, landed.repo, landed.merged_sha):
        if row["kind"] == "landing" and row["subject_sha"] == landed.merged_sha:
            raw = base64.b64decode(row["envelope"]["payload"])
            return json.loads(raw), hashlib.sha256(raw).hexdigest()
    return None


async def _finish_when_done(ctx: Context, repo: Repo, job_id: int, by: str | None) -> None:
    try:
        while True:
            try:
                job = await ctx.db.jobs.wait_job(job_id, timeout=runs.run_limit(ctx, repo))
                if job.status in RUNNING:
                    return  # lost: ``finish_pending`` finishes it when it ends
                await finish(ctx, job, by, wait=True)
                return
            except Unavailable as e:
                log.warning("re-verification job %s interrupted, will retry: %s", job_id, e.message)
                await asyncio.sleep(ctx.poll)
    finally:
        _finishing.discard(job_id)


async def finish_pending(ctx: Context) -> None:
    """Make the statements of re-verification runs over whose finishing a restart cut short."""
    for job in await ctx.db.jobs.reverify_unsigned():
        if job.id not in _finishing:
            await finish(ctx, job, None, wait=False)


# -- finishing: compare, sign, keep, publish ------------------------------------------------------------------------


async def finish(ctx: Context, job: Job, by: str | None, *, wait: bool) -> bool:
    """The statement of re-verification run ``job`` (over), made once: whether this call made it. Its held-out run
    is waited for (``wait``), or the statement waits for a later call while that runs."""
    db = ctx.db
    assert job.landed_id is not None
    landed = await db.landing.get_landed(job.landed_id)
    repo = await db.repos.get_repo(landed.repo)
    held_job = await db.jobs.reverify_held_out(landed.id, job.id)
    if held_job is not None and held_job.status in RUNNING and wait:
        held_job = await db.jobs.wait_job(held_job.id, timeout=runs.run_limit(ctx, repo))
    if held_job is not None and held_job.status in RUNNING:
        return False
    result = runs.result_of(repo, job.commit_sha, job)
    now_tests = tests_of(result)
    original = await _run_of(ctx, landed)
    landing = await _landing_statement(ctx, landed)
    if original is not None and original.result:
        was_run = Result.from_json(original.result)
        was, was_passed, source = tests_of(was_run), was_run.overall == "pass", "run"
    elif landing is not None:
        tests = (landing[0].get("predicate") or {}).get("tests") or {}
        was, was_passed, source = record_from_statement(tests, now_tests), True, "statement"
    else:
        was, was_passed, source = {}, landed.verifier_result in ("pass", "flaky"), "none"
    flaky = flaky_tests(await db.jobs.known_flaky(repo.name, FLAKY_RUNS))
    cmp = compare(was, was_passed, now_tests, result.overall == "pass", flaky)
    held = await _held_out(ctx, repo, landing, held_job)
    if held is not None and held["was"] is not None and held["was"] != held["now"] and cmp.outcome != "diverged":
        cmp = Comparison("diverged", cmp.differing, cmp.flaky, cmp.overall_same)
    if result.outcome == "error" or (held is not None and held["now"] == "error"):
        cmp = Comparison("error", cmp.differing, cmp.flaky, cmp.overall_same)  # no answer either way: no finding
    statement = _statement(repo, landed, job, result, cmp, was, source, landing, held, by)
    signer = ctx.signer()
    envelope = seal(statement, IN_TOTO, signer)
    made = await db.attest.add_reverify(repo=repo.name, landed_id=landed.id, subject_sha=landed.merged_sha,
                                        keyid=signer.public_key.keyid, job_id=job.id, envelope=envelope)
    if not made:
        return False
    if cmp.outcome == "diverged":
        await db.landing.add_finding(repo=repo.name, kind="reverify_diverged", detail={
            "landed_id": landed.id, "job_id": job.id, "sha": landed.merged_sha, "differing": len(cmp.differing),
            "tests": [t for t, _, _ in cmp.differing[:SHOWN]], "overall_same": cmp.overall_same})
    await provenance.publish_notes(ctx, target_for(ctx, repo))
    return True


async def _held_out(ctx: Context, repo: Repo, landing: tuple[dict[str, Any], str] | None,
                    held_job: Job | None) -> dict[str, Any] | None:
    """The held-out checks' outcome in the landing statement and now (never their tests' names)."""
    if held_job is None:
        return None
    run = runs.result_of(repo, held_job.commit_sha, held_job)
    now_ = heldout.outcome_of(run, heldout.known_tests(await ctx.db.repos.held_out(repo.name)))
    was = ((landing[0].get("predicate") or {}).get("heldOut") or {}).get("result") if landing else None
    return {"was": was, "now": now_, "job": held_job.id}


def _statement(repo: Repo, landed: Landed, job: Job, result: Result, cmp: Comparison, was: Mapping[str, str],
               source: str, landing: tuple[dict[str, Any], str] | None, held: dict[str, Any] | None,
               by: str | None) -> dict[str, Any]:
    tests = unpack(result.tests)
    now_tests = tests_of(result)
    checks = [{"name": str(c.get("name")), "required": bool(c.get("required")), "outcome": str(c.get("outcome"))}
              for c in result.checks or [] if isinstance(c, dict)]
    predicate = {
        "landed": landed.id, "repository": repo.name, "targetRef": landed.target_ref,
        "landingStatement": {"digest": {"sha256": landing[1]},
                             "sequence": (landing[0].get("predicate") or {}).get("sequence")} if landing else None,
        "commit": job.commit_sha, "tree": result.tree_sha or job.tree_sha,
        "command": job.command, "checks": checks, "checkConfigDigest": provenance.config_digest(repo),
        "sandbox": {"kind": result.sandbox, "limits": str((result.limits or {}).get("enforced") or "")},
        "run": {"job": job.id, "outcome": result.overall, "durationMs": result.duration_ms,
                "logDigest": result.log_digest, "tests": {"source": tests.source, **st.tests_summary(now_tests)}},
        "record": {"job": landed.run_id, "source": source, "verdict": landed.verifier_result,
                   "tests": st.tests_summary(was)["counts"]},
        "heldOut": held,
        "differing": cmp.as_json(), "differingCount": len(cmp.differing), "overallSame": cmp.overall_same,
        "outcome": cmp.outcome, "requestedBy": by,
        "timings": {"finishedAt": job.finished_at.isoformat() if job.finished_at else None, "signedAt": now()},
    }
    return {"_type": st.STATEMENT, "subject": [{"name": f"{repo.name}:{landed.target_ref}",
                                                 "digest": {"gitCommit": landed.merged_sha,
                                                            "gitTree": landed.tree_sha}}],
            "predicateType": PREDICATE, "predicate": predicate}


# -- what is shown --------------------------------------------------------------------------------------------


async def latest(ctx: Context, landed_id: int) -> dict[str, Any]:
    """A landed row's re-verification as the API and the page show it: its newest run (``job``: id, status,
    outcome), and the newest signed result (``result``: the statement's predicate, its key and envelope), or
    None for each."""
    db = ctx.db
    landed = await db.landing.get_landed(landed_id)  # NotFound
    await finish_pending(ctx)
    job = await db.jobs.reverify_latest(landed.id)
    rows = await db.attest.reverifies(landed.id, limit=1)
    result = None
    if rows:
        row = rows[0]
        predicate = json.loads(base64.b64decode(row["envelope"]["payload"])).get("predicate") or {}
        result = {"id": row["id"], "job_id": row["job_id"], "keyid": row["keyid"], "created_at": row["created_at"],
                  "noted": row["noted_at"] is not None, "outcome": predicate.get("outcome"), "predicate": predicate,
                  "envelope": row["envelope"]}
    return {"landed_id": landed.id,
            "job": {"id": job.id, "status": job.status, "outcome": job.outcome, "commit_sha": job.commit_sha,
                    "created_at": job.created_at, "finished_at": job.finished_at} if job else None,
            "result": result}
