"""A landing's signed statements: made from its facts before main moves (``statements``), kept with the landed rows
when the landing is recorded, and copied to the bare repository's ``refs/notes/mergebot`` (``publish``).

Signing comes before the compare-and-swap, so the statements are part of the intent: a crash after main moved
leaves them there for the reconciler, which records them with the landing as the landing step would have. The
key is the data directory's (``mergebot.attest.keys``), loaded once per process (``Context.signer``).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from mergebot.attest import statement as st
from mergebot.attest.envelope import IN_TOTO, canonical, seal
from mergebot.attest.keys import now
from mergebot.attest.notes import REF as NOTES_REF
from mergebot.attest.notes import text as note_text
from mergebot.errors import MergebotError
from mergebot.git import notes as git_notes
from mergebot.landing.context import Context
from mergebot.landing.judge.runs import check_spec
from mergebot.landing.target import Target
from mergebot.models import Member, Repo
from mergebot.models.judgement import Judged
from verifier.outcomes import unpack

log = logging.getLogger(__name__)


def config_digest(repo: Repo) -> str:
    """The digest of the check configuration a run of ``repo`` takes: each check's command, timeout, setup, caches,
    sandbox paths, limits and report, as the worker is given them (``judge.runs.check_spec``)."""
    specs = [check_spec(repo, "candidate", named=c).as_json() for c in repo.checks] or \
        [check_spec(repo, "candidate").as_json()]
    return hashlib.sha256(canonical({"checks": specs, "check_config": list(repo.check_config or [])})).hexdigest()


def _checks(repo: Repo, run: Judged) -> tuple[st.Check, ...]:
    r = run.run
    if r.checks:
        commands = {c["name"]: c["command"] for c in repo.checks}
        return tuple(st.Check(str(c["name"]), commands.get(str(c["name"]), ""), bool(c["required"]),
                              str(c["outcome"]), int(c.get("duration_ms") or 0), "") for c in r.checks)
    return (st.Check("check", r.command, True, r.outcome, r.duration_ms, r.log_digest),)


def _time(value: object) -> str | None:
    return value.isoformat() if isinstance(value, datetime) else None


async def statements(ctx: Context, repo: Repo, members: Sequence[Member], *, moved_to: str, run: Judged,
                     outcome: str, policy: str | None) -> list[dict[str, Any]]:
    """The signed statements of a landing of ``members`` (one, or a batch's in landing order) moving main to
    ``moved_to``: for each member's merge commit a landing statement and a test result, each ``{kind, sha, sequence,
    keyid, envelope}``, as ``begin_landing`` keeps them."""
    signer = ctx.signer()
    judgement = run.judgement
    held = judgement.held_out
    facts, first, held_digest = await ctx.db.attest.facts(repo.name, [m.candidate_id for m in members],
                                                          held=held is not None)
    outcomes = unpack(run.run.tests)
    digest = config_digest(repo)
    checks = _checks(repo, run)
    out: list[dict[str, Any]] = []
    for i, m in enumerate(members):
        row = facts.get(m.candidate_id, {})
        acceptance = judgement.acceptance
        f = st.Facts(
            repo=repo.name, target_ref=repo.target_ref, since=repo.root_sha, sequence=first + i,
            before=m.base_sha, after=m.merged_sha, tree=m.tree_sha, moved_to=moved_to, verified=moved_to,
            candidate_id=m.candidate_id, candidate_sha=m.candidate_sha, branch=str(row.get("ref") or ""),
            subtask_id=m.subtask_id, claim_version=m.claim_version, owner=str(row.get("owner") or m.owner_id),
            pushed_by=str(row.get("owner") or m.owner_id), outcome=m.outcome or outcome, checks=checks,
            config_digest=digest, sandbox=run.run.sandbox, limits=str((run.run.limits or {}).get("enforced") or ""),
            tests=outcomes.tests, tests_source=str((run.run.tests or {}).get("source") or ""),
            log_digest=run.run.log_digest, reasons=outcomes.reasons,
            acceptance={"result": "fail" if acceptance.failed else "pass", "files": len(acceptance.files),
                        "digest": row.get("acceptance_digest")} if acceptance is not None and acceptance.files
            else None,
            held_out={"result": held.outcome, "digest": held_digest} if held is not None else None,
            allowed={"testRemoval": bool(row.get("allow_test_removal")),
                     "checkChanges": bool(row.get("allow_check_changes")),
                     "behaviourChange": bool(row.get("allow_behaviour_change"))},
            approved_by=tuple(row.get("approved_by") or ()), policy=policy or "", batch_size=len(members),
            batch_position=i + 1, merge_kind=m.merge_kind,
            timings={"pushedAt": _time(row.get("pushed_at")), "queuedAt": _time(row.get("queued_at")),
                     "mergedAt": _time(row.get("merged_at")), "verifiedMs": run.run.duration_ms, "signedAt": now()})
        for kind, made in (("landing", st.landing(f)), ("test_result", st.test_result(f))):
            out.append({"kind": kind, "sha": m.merged_sha, "sequence": f.sequence if kind == "landing" else None,
                        "keyid": signer.public_key.keyid, "envelope": seal(made, IN_TOTO, signer)})
    return out


async def publish(ctx: Context, target: Target) -> int:
    """Copy the repository's statements not yet in its git notes to ``refs/notes/mergebot`` (each commit's note
    holds all of its statements), and share the notes where clones find them (a forge's repository: pushed to the
    forge); how many commits' notes were written. The landing step calls it after each landing and the reconciler
    on every pass, so a crash between the two is caught up."""
    repo = target.repo
    async with ctx.notes_locks.setdefault(repo.name, asyncio.Lock()):  # one writer of the notes ref at a time
        pending = await ctx.db.attest.unnoted(repo.name)
        if not pending:
            return 0
        shas = sorted({r["subject_sha"] for r in pending})
        rows = await ctx.db.attest.of_commits(repo.name, shas)
        texts = {sha: note_text([r["envelope"] for r in rows if r["subject_sha"] == sha]) for sha in shas}
        await asyncio.to_thread(git_notes.write, target.path, texts)
        await target.share_notes(NOTES_REF)
        await ctx.db.attest.noted([r["id"] for r in pending])
        return len(texts)


def publish_soon(ctx: Context, target: Target) -> None:
    """``publish_notes`` beside the queue (held in ``ctx.post_land`` until it ends): the landing waits for its
    statements' signing and storing, never for the git notes, which follow within moments (and the reconciler's
    next pass writes what a crash kept from them)."""
    task = asyncio.create_task(publish_notes(ctx, target))
    ctx.post_land.add(task)
    task.add_done_callback(ctx.post_land.discard)


async def publish_notes(ctx: Context, target: Target) -> None:
    """``publish``, where a failure is only logged: the statements are safe in the database, and the reconciler's
    next pass writes them."""
    try:
        await publish(ctx, target)
    except (MergebotError, OSError, ValueError, RuntimeError) as e:  # pygit2's errors are these
        log.warning("the statements of %s wait for the next reconcile to reach its git notes: %s",
                    target.repo.name, e)
