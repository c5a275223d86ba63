"""The reconciler: make git's main and the database agree again after a crash, and say what does not add up.

"Subtask done", "merged to main" and "verified on main" drift apart unless reconciled. For each repository:
  0. for a forge repository, the mirror's main is first set to the forge's (the forge is the truth);
  1. every pending landing intent is finished (main reached its commit: write the landed row from the evidence
     stored in the intent) or rolled back (main never moved: the candidate goes back to the queue);
  2. candidates caught mid-verification go back to the queue;
  3. an accepted push whose post-receive step never ran (a subtask branch at the current claim version with no
     candidate for its tip) is queued, so no accepted push is lost;
  4. main's history is walked from its head back to the repository's root through the landed rows
     (merged sha -> base sha); commits that no landed row explains, and landed rows whose commit is not on
     main, are recorded as findings;
  5. the audit of main (``audit``): every commit since the head audited last must have a landing statement whose
     main-before is its first parent; one without is a finding (``unattested_main``), on the repository until an
     admin resumes it, and pauses its queue when its rule says ``--on-unattested pause``.
It runs at start-up, before the queue, and on demand (``mergebot reconcile``).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from mergebot import messages as say
from mergebot.errors import ClaimSuperseded
from mergebot.git import repo as git
from mergebot.landing.context import Context
from mergebot.landing.main import audit, provenance
from mergebot.landing.main.orphans import queue_orphans
from mergebot.landing.target import target_for
from mergebot.models import Repo

log = logging.getLogger(__name__)


@dataclass
class Report:
    repo: str
    finished: list[int] = field(default_factory=list)
    rolled_back: list[int] = field(default_factory=list)
    requeued: list[int] = field(default_factory=list)
    enqueued: list[int] = field(default_factory=list)
    unexplained: list[str] = field(default_factory=list)
    landed_not_on_main: list[str] = field(default_factory=list)
    unattested: list[str] = field(default_factory=list)  # commits of main no landing statement explains
    stale_lock: bool = False  # a killed process's lock on the target ref, removed

    @property
    def clean(self) -> bool:
        return not (self.unexplained or self.landed_not_on_main or self.unattested)


def _history(path: Path, target_ref: str, root: str, chain: dict[str, dict[str, Any]]) -> tuple[list[str], list[str]]:
    """(commits on main no landed row explains, landed merged shas not on main). Blocking."""
    repo = git.open_repo(path)
    head = git.head_of(repo, target_ref)
    assert head is not None
    unexplained: list[str] = []
    cur: str | None = head
    seen: set[str] = set()
    while cur is not None and cur != root and cur not in seen:
        seen.add(cur)
        if cur in chain:
            cur = chain[cur]["base_sha"]
            continue
        stray = git.first_parents(repo, cur, set(chain) | {root})
        unexplained += stray
        commit = repo[stray[-1]] if stray else None
        parents = getattr(commit, "parent_ids", []) if commit is not None else []
        cur = str(parents[0]) if parents else None
    missing = [sha for sha in chain if sha not in repo or not git.is_ancestor(repo, sha, head)]
    return unexplained, missing


def settle(reached: bool) -> Literal["finish", "roll_back"]:
    """The reconciler's choice for a pending intent: finish it when main reached its commit (the landed rows are
    written from the evidence it holds), else roll it back (main never moved: its candidates go back to the queue).
    Pure, so the protocol's model (``mergebot.protocol``) calls it."""
    return "finish" if reached else "roll_back"


async def reconcile_repo(ctx: Context, repo: Repo) -> Report:
    db, report = ctx.db, Report(repo.name)
    target = target_for(ctx, repo)
    path = target.path
    report.stale_lock = await asyncio.to_thread(git.clear_stale_lock, path, repo.target_ref)
    await target.head()  # a forge's branch is the truth: an intent is finished only if the forge moved

    def on_main(sha: str) -> bool:
        bare = git.open_repo(path)
        head = git.head_of(bare, repo.target_ref)
        return head is not None and sha in bare and git.is_ancestor(bare, sha, head)

    for intent in await db.landing.pending_intents(repo.name):
        # the intent's row locked while main is looked at: a leader that lost its lock mid-landing may be moving
        # main for it right now, under the same lock; it is settled once that one is done, or by this look
        async with db.landing.settling(intent) as held:
            if held is None:
                continue
            await target.head()  # main as it is now, under the lock (a forge's: fetched again)
            if settle(await asyncio.to_thread(on_main, intent.new_sha)) == "finish":
                try:
                    await held.finish()
                    report.finished.append(intent.candidate_id)
                except ClaimSuperseded as e:
                    await held.abandon(e.message)
            else:
                await held.roll_back(say.STOPPED_BEFORE_MAIN_MOVED)
                report.rolled_back.append(intent.candidate_id)

    await provenance.publish_notes(ctx, target)  # statements a crash kept from the notes
    report.requeued = await db.landing.requeue_stuck(repo.name)

    report.enqueued = await queue_orphans(db, path, repo)

    chain = await db.landing.landed_chain(repo.name)
    report.unexplained, report.landed_not_on_main = await asyncio.to_thread(
        _history, path, repo.target_ref, repo.root_sha, chain)
    if report.unexplained:
        await db.landing.add_finding(repo=repo.name, kind="unexplained_commits",
                                     detail={"commits": report.unexplained[:1000], "count": len(report.unexplained)})
    if report.landed_not_on_main:
        await db.landing.add_finding(repo=repo.name, kind="landed_not_on_main",
                                     detail={"commits": report.landed_not_on_main[:1000]})
    report.unattested = (await audit.audit(ctx, repo, path)).commits
    if not report.clean or report.finished or report.rolled_back or report.enqueued or report.stale_lock:
        log.warning("reconcile %s: %s", repo.name, report)
    return report
