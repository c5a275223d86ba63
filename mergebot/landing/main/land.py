"""Where main moves: merging a candidate in memory, fencing it, and landing it by compare-and-swap.

A ``target.Target`` hides where main lives (a hosted repository or a forge's); this module only asks it.

Landing, in order (``land``, ``land_batch``): fence every candidate (it must still be what its subtask waits on,
and its branch must still point at it), write the intent with the evidence (only while the candidates still hold
their fence, read again in the intent's transaction with their subtasks locked: ``begin_landing``; a lead's cancel
then waits, and is refused while a candidate is ``landing``), move main from the verified base to
exactly the commit the run passed on, then record the landing in one transaction
(``Settle.finish``, under the intent's row lock: ``db.landing.settling``).
Main moving under the landing rolls the intent back; a crash between any two steps leaves a pending intent that
the reconciler finishes or rolls back. A rejection sends the subtask back to its owner, then closes the candidate.

The approval gate (``gate``) stands between the fences and the intent, on every landing path (a window's unit, a
candidate judged alone): a candidate whose repository requires an approval for what it changes, and whose exact
commit no one has approved, does not land; it waits as ``awaiting_approval`` with its passing run on record
(``mergebot.rules.awaits_approval`` decides). Its caller sees a landing that did not happen, and re-plans whatever
was built on it. An approval puts it back in the queue (``mergebot.landing.main.approve``); passing again, it lands.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pygit2

from mergebot import messages as say
from mergebot.db.database import Database
from mergebot.db.landing import Unfenced
from mergebot.errors import ClaimSuperseded
from mergebot.git import changes
from mergebot.git import repo as git
from mergebot.git.union import Union
from mergebot.landing.context import Context, crash_point
from mergebot.landing.judge import verdicts
from mergebot.landing.judge.evidence import flaky_runs, verdict_json
from mergebot.landing.main import provenance
from mergebot.landing.main.orphans import queue_orphans
from mergebot.landing.target import Target
from mergebot.models import Candidate, Evidence, Handle, Intent, Landed, Member, Repo
from mergebot.models.judgement import Judged
from mergebot.rules import awaits_approval

log = logging.getLogger(__name__)


# -- fences, taking and merging ---------------------------------------------------------------------------------


async def fences(db: Database, cands: Sequence[Candidate]) -> dict[int, str | None]:
    """Why each candidate no longer holds its fence (None: its subtask still waits on exactly it), by id, in one
    query: the rule is the SQL function the statement that takes the next candidate applies (``candidate_unfenced``)."""
    return await db.landing.fences([c.id for c in cands])


async def fenced(db: Database, cand: Candidate) -> str | None:
    return (await fences(db, [cand]))[cand.id]


async def take(ctx: Context, repo: Repo, exclude: list[int] | None = None) -> Candidate | None:
    """The next candidate that still holds its fence; the ones that do not are superseded (cancelled, when their
    subtask was) by the same statement (``db.landing.next_candidate``)."""
    return await ctx.db.landing.next_candidate(repo.name, exclude, max_passes=ctx.max_passes)


def union_of(repo: Repo) -> Union:
    """The conflicts the bot merges by union in ``repo``'s merges (issue 45): in the files main's ``.gitattributes``
    mark ``merge=union`` (read from main's ref when a merge conflicts, whatever the base it merges onto) and the
    files its ``--union`` globs name. Every merge that decides whether a candidate applies takes it, so a probe and
    the landing agree."""
    return Union(repo.target_ref, tuple(repo.union_merge or ()))


async def merge_onto(db: Database, target: Target, cand: Candidate, base: str) -> git.Merge:
    """The candidate merged onto ``base`` in memory; with its subtask's acceptance tests written into the merge
    at their paths, over whatever the candidate has there (so the commit that is verified, and lands, has them).

    Under the repository's merge method ``squash`` that merge becomes one commit whose only parent is ``base``, with
    exactly the merge's tree: the commit that is verified, and lands, is that one (a bot's revert keeps its own
    message)."""
    sub = await db.subtasks.get_subtask(cand.subtask_id)
    squash = target.repo.merge_method == "squash"
    message = say.merge_message(cand.subtask_id, cand.claim_version, sub.title, cand.sha, cand.id)
    accept = await db.subtasks.acceptance(cand.subtask_id)
    paths = [p for p, _ in accept]

    def merged() -> git.Merge:
        bare = git.open_repo(target.path)
        merge = git.merge_onto(bare, base, cand.sha, message, union=union_of(target.repo))
        if accept and merge.kind in ("merge", "fast-forward"):
            merge = git.with_files(bare, base, merge, accept, say.with_acceptance(message, paths))
        if squash and merge.applies:
            if cand.reverts is not None:  # the bot's revert keeps its own words (what it reverts, and why)
                words = bare[cand.sha].peel(pygit2.Commit).message
            else:
                words = say.with_acceptance(say.squash_message(cand.subtask_id, cand.claim_version, sub.title,
                                                               sub.description, cand.sha, cand.id), paths)
            merge = git.squash(bare, base, merge, words)
        return merge

    merge = await asyncio.to_thread(merged)
    await db.landing.mark_merged(cand.id)  # a stage of its own (``candidate_stages``): the latest merge counts
    return merge


async def merge_with_paths(db: Database, target: Target, cand: Candidate,
                           base: str) -> tuple[git.Merge, frozenset[str]]:
    """The merge, and the paths the candidate changes on top of ``base`` (none for a conflict)."""
    merge = await merge_onto(db, target, cand, base)
    if not merge.applies or merge.tree is None:
        return merge, frozenset()
    tree = merge.tree
    paths = await asyncio.to_thread(lambda: changes.paths_since(git.open_repo(target.path), base, tree))
    return merge, frozenset(paths)


async def reject(db: Database, cand: Candidate, r: say.Rejection, *, base_sha: str | None,
                 verifier: dict[str, Any] | None = None) -> None:
    """Send the subtask back to its owner with the reason, then close the candidate as rejected.

    The subtask goes first: whoever sees the candidate rejected finds it running again (a crash in between
    leaves the candidate mid-flight; the reconciler requeues it and the fence drops it)."""
    reason = say.rejection(r)
    with contextlib.suppress(ClaimSuperseded):  # the subtask moved on (reclaimed, newer push): nothing to hand
        await db.subtasks.reject(handle=Handle(cand.subtask_id, cand.claim_version), reason=reason, sha=cand.sha)
    told = verdicts.told(r.kind, reason, await db.subtasks.get_subtask(cand.subtask_id), cand.subtask_id,
                         cand.claim_version, r.target_branch)  # the words its agent reads now, kept for the pages
    failing = list(r.run.failing_tests) if r.run is not None else []
    held = r.judgement.held_out if r.judgement is not None else None
    if r.kind == "held_out_failed" and held is not None:  # the held-out run's failing ids, and nothing else of it
        failing = list(held.failing)
    await db.landing.finish_candidate(cand.id, "rejected", reason, base_sha=base_sha, merged_sha=r.merged_sha,
                                      verifier=verifier, verdict=verdicts.recorded(
                                          r.kind, paths=list(r.paths[:100]), hunks=[dict(h) for h in r.hunks],
                                          failing_tests=failing, told=told,
                                          **({"in_flight": [dict(o) for o in r.in_flight]} if r.in_flight else {})))
    log.info("rejected candidate %s of subtask %s: %s%s", cand.id, cand.subtask_id, r.kind,
             f" in {', '.join(r.paths[:5])}" if r.paths else "",
             extra={"candidate": cand.id, "subtask": cand.subtask_id, "kind": r.kind})
    await db.subtasks.log_event(actor_id=None, kind="candidate_rejected", subtask_id=cand.subtask_id,
                                claim_version=cand.claim_version,
                                detail={"candidate": cand.id, "sha": cand.sha, "kind": r.kind,
                                        "paths": list(r.paths[:100]), "reason": reason[:2000]})


async def reject_unmergeable(db: Database, target: Target, repo: Repo, cand: Candidate, merge: git.Merge,
                             main: str) -> bool:
    """Reject a candidate whose merge onto main is a conflict or brings nothing; True if it was. A conflict names
    the other candidates in flight that change its conflicting files (``candidates_touching``): its agent waits for
    them before it redoes its work."""
    if merge.kind not in ("conflict", "up-to-date"):
        return False
    kind = "conflict" if merge.kind == "conflict" else "nothing_to_land"
    hunks: list[dict[str, object]] = []
    others: list[dict[str, Any]] = []
    if merge.kind == "conflict":
        with contextlib.suppress(pygit2.GitError, KeyError, ValueError):  # the paths are the verdict; hunks help
            hunks = await asyncio.to_thread(lambda: changes.conflict_hunks(git.open_repo(target.path), main, cand.sha,
                                                                       only=merge.conflicts))
        others = [say.in_flight_record(r) for r in await db.landing.touching(
            repo=repo.name, subtask_id=cand.subtask_id, paths=list(merge.conflicts))]
    await reject(db, cand, say.Rejection(kind, repo.target_branch, cand.sha, paths=tuple(merge.conflicts),
                                         hunks=tuple(hunks), in_flight=tuple(others)), base_sha=main)
    return True


# -- landing ----------------------------------------------------------------------------------------------------


async def land(ctx: Context, target: Target, cand: Candidate, main: str, merge: git.Merge, run: Judged,
               outcome: str, runs: dict[str, Any], policy: str = "serial") -> Landed | None:
    """Land one verified candidate; the landed row, or None when it did not land (superseded, main moved).
    ``policy``: how the queue got it here, for the landed record (``mergebot.landing.window.executor.policy``)."""
    assert merge.sha is not None and merge.tree is not None
    verdict = verdict_json(run, outcome, runs)
    why = await fenced(ctx.db, cand)  # a newer push during verification wins
    if why is None:
        _, why = await _moved(ctx, target, [cand])
    if why is not None:
        await ctx.db.landing.finish_candidate(cand.id, "superseded", why, base_sha=main, merged_sha=merge.sha,
                                              verifier=verdict)
        return None
    if await gate(ctx.db, target, [Slot(cand, main, merge)], verdict):
        return None
    evidence = Evidence(cand.subtask_id, cand.claim_version, cand.owner_id, cand.sha, merge.kind, verdict, outcome,
                        policy=policy, union_merged=tuple(merge.union))
    member = Member(cand.id, cand.subtask_id, cand.claim_version, cand.owner_id, cand.sha, main, merge.sha,
                    merge.tree, merge.kind, union_merged=tuple(merge.union))
    signed = await provenance.statements(ctx, target.repo, [member], moved_to=merge.sha, run=run, outcome=outcome,
                                         policy=policy)
    crash_point("before_intent")
    intent = await ctx.db.landing.begin_landing(cand=cand, target_ref=target.repo.target_ref, old_sha=main,
                                                new_sha=merge.sha, tree_sha=merge.tree, evidence=evidence,
                                                verdict=verdict, attestations=signed)
    if isinstance(intent, Unfenced):  # its claim changed since the fence above (a lead's cancel): no intent
        await ctx.db.landing.finish_candidate(cand.id, "superseded", intent.why[cand.id], base_sha=main,
                                              merged_sha=merge.sha, verifier=verdict)
        return None
    landed = await _move_and_record(ctx, target, intent, say.landing_reflog(cand.subtask_id, cand.claim_version,
                                                                            cand.id))
    if landed is not None:
        log.info("landed subtask %s at %s", cand.subtask_id, landed.merged_sha)
    return landed


@dataclass(frozen=True)
class Slot:
    """One candidate of a batch: merged onto ``base`` (main, or the slot ahead's merge)."""

    cand: Candidate
    base: str
    merge: git.Merge


async def land_batch(ctx: Context, target: Target, unit: Sequence[Slot], main: str, run: Judged,
                     policy: str) -> Landed | None:
    """Land several candidates verified together: one intent, one move of main to the last one's merge (the
    commit the run passed on), and one landed row per candidate naming its own merge commit on main's
    first-parent chain, the commit main moved to and the run that covered it. All of them or none: the verified
    commit carries every one of them."""
    cands = [s.cand for s in unit]
    moved, moved_why = await _moved(ctx, target, cands)
    fence_of = await fences(ctx.db, cands)
    if moved is not None:
        fence_of[moved.id] = fence_of[moved.id] or moved_why
    if await _withdrawn(ctx.db, unit, fence_of):
        return None
    verdict = verdict_json(run, "pass", {})
    waiting = await gate(ctx.db, target, unit, verdict)
    if waiting:  # all of them or none: the others go back to the queue, to land without the one that waits
        for slot in unit:
            if slot.cand.id not in waiting:
                await ctx.db.landing.finish_candidate(slot.cand.id, "queued", say.BATCH_WITHDRAWN)
        return None
    last = unit[-1]
    assert last.merge.sha is not None and last.merge.tree is not None
    members = tuple(Member(s.cand.id, s.cand.subtask_id, s.cand.claim_version, s.cand.owner_id, s.cand.sha, s.base,
                           s.merge.sha or "", s.merge.tree or "", s.merge.kind,
                           "flaky" if flaky_runs(s.cand) is not None else "", tuple(s.merge.union)) for s in unit)
    evidence = Evidence(last.cand.subtask_id, last.cand.claim_version, last.cand.owner_id, last.cand.sha,
                        last.merge.kind, verdict_json(run, "pass", {}), "pass", members, policy)
    signed = await provenance.statements(ctx, target.repo, members, moved_to=last.merge.sha, run=run, outcome="pass",
                                         policy=policy)
    crash_point("before_intent")
    intent = await ctx.db.landing.begin_landing(cand=last.cand, target_ref=target.repo.target_ref, old_sha=main,
                                                new_sha=last.merge.sha, tree_sha=last.merge.tree, evidence=evidence,
                                                verdict=verdict_json(run, "pass", {}), attestations=signed)
    if isinstance(intent, Unfenced):  # a claim changed since the fences above (a lead's cancel): no intent
        await _withdrawn(ctx.db, unit, intent.why)
        return None
    landed = await _move_and_record(ctx, target, intent, say.batch_reflog([c.subtask_id for c in cands]))
    if landed is not None:
        log.info("landed subtasks %s together at %s", [c.subtask_id for c in cands], last.merge.sha)
    return landed


async def _withdrawn(db: Database, unit: Sequence[Slot], why_of: Mapping[int, str | None]) -> bool:
    """When a candidate of ``unit`` no longer holds its fence (``why_of``, by id): the first such is superseded
    (cancelled, when its subtask was: ``candidate_finish``) with why, the others go back to the queue (all of them
    or none), and True."""
    for slot in unit:
        why = why_of.get(slot.cand.id)
        if why is not None:
            await db.landing.finish_candidate(slot.cand.id, "superseded", why)
            for other in unit:
                if other is not slot:
                    await db.landing.finish_candidate(other.cand.id, "queued", say.BATCH_WITHDRAWN)
            return True
    return False


async def gate(db: Database, target: Target, unit: Sequence[Slot], verdict: dict[str, Any]) -> set[int]:
    """The approval gate: the candidates of ``unit`` (passed, fenced, about to land) that must wait for an approval
    (``awaits_approval``), each put in ``awaiting_approval`` with its run and told whose approval it waits for; their
    ids (none: the unit lands). The paths a candidate changes are its merge's, against the base it was merged on."""
    require = target.repo.require_approval
    if require is None:
        return set()
    approvers = await db.landing.approvers([(s.cand.subtask_id, s.cand.sha) for s in unit])
    waiting: set[int] = set()
    for slot in unit:
        who = approvers.get((slot.cand.subtask_id, slot.cand.sha), [])
        paths: frozenset[str] = frozenset()
        if require and not who and slot.merge.tree is not None:  # globs: what it changes on top of its base
            paths = await asyncio.to_thread(_changed, target.path, slot.base, slot.merge.tree)
        if not awaits_approval(require, paths, who):
            continue
        waiting.add(slot.cand.id)
        await db.landing.finish_candidate(slot.cand.id, "awaiting_approval", say.awaiting_approval(slot.cand.id,
                                                                                                     require),
                                          base_sha=slot.base, merged_sha=slot.merge.sha, verifier=verdict,
                                          verdict=verdicts.recorded("awaiting_approval"))
        await db.subtasks.log_event(actor_id=None, kind="candidate_awaiting_approval", subtask_id=slot.cand.subtask_id,
                                    claim_version=slot.cand.claim_version,
                                    detail={"candidate": slot.cand.id, "sha": slot.cand.sha, "rule": require})
        log.info("candidate %s of subtask %s passed and waits for an approval", slot.cand.id, slot.cand.subtask_id,
                 extra={"candidate": slot.cand.id, "subtask": slot.cand.subtask_id, "kind": "awaiting_approval"})
    return waiting


def _changed(path: Path, base: str, tree: str) -> frozenset[str]:
    return frozenset(changes.paths_since(git.open_repo(path), base, tree))


async def _moved(ctx: Context, target: Target, cands: Sequence[Candidate]) -> tuple[Candidate | None, str | None]:
    """The first candidate whose branch no longer points at its commit, and why; (None, None) if none.

    A push whose post-receive step never reached a bot (its git process finished after the bot was killed, and
    after the new one reconciled) moves the branch with no candidate. The idle sweep would queue it, but only
    after this older candidate had landed and the subtask had moved on, losing the push. Found here, the sweep
    queues it now (superseding this candidate, as an announced newer push would)."""
    moved = await target.moved_branches(cands)
    if not moved:
        return None, None
    await queue_orphans(ctx.db, target.path, target.repo, refs={c.ref for c, _ in moved})
    cand, tip = moved[0]
    return cand, say.unannounced_push(cand.subtask_id, tip, cand.ref)


async def _move_and_record(ctx: Context, target: Target, intent: Intent, why: str) -> Landed | None:
    """Move main from the intent's old commit to its new one, then record the landing; None if main moved under
    it (the intent is rolled back) or no subtask could take the landing (recorded as a finding)."""
    crash_point("after_intent")
    async with ctx.db.landing.settling(intent) as settle:  # the intent's row locked across the compare-and-swap
        if settle is None:  # this process lost its lock mid-landing: the leader that took over settled it
            log.warning("the landing of %s was settled by the leader that took over", intent.new_sha)
            return None
        if not await target.move(intent.old_sha, intent.new_sha, why):
            await settle.roll_back(say.on_branch(say.MOVED_DURING_LANDING, target.repo.target_branch))
            log.info("main moved during the landing of %s: its intent is rolled back", intent.new_sha)
            return None
        crash_point("after_cas")
        try:
            landed, released = await settle.finish()
        except ClaimSuperseded as e:  # fenced at every step before: the subtask changed under a moving main
            await settle.abandon(e.message)
            return None
    if released:
        log.info("released %s", released)
    provenance.publish_soon(ctx, target)
    if landed.kind == "revert" and landed.reverts is not None:  # what was built on the reverted change waits for it
        culprit = await ctx.db.landing.get_landed(landed.reverts)
        held = await ctx.db.reverts.hold_dependents(culprit.subtask_id, bot_id=await ctx.db.agents.bot_id(),
                                                    reason=say.dependency_reverted(culprit.subtask_id))
        if held:
            log.info("subtasks %s wait for subtask %s to land again", held, culprit.subtask_id)
    crash_point("after_commit")
    return landed

