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
     main, are recorded as findings.
It runs at start-up, before the queue, and on demand (``mergebot reconcile``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mergebot.errors import ClaimSuperseded
from mergebot.git import mirror
from mergebot.git import repo as git
from mergebot.landing.checks import parse_subtask_ref
from mergebot.landing.store import LandingStore, Repo

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

    @property
    def clean(self) -> bool:
        return not (self.unexplained or self.landed_not_on_main)


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


def _subtask_tips(path: Path) -> list[tuple[str, str]]:
    repo = git.open_repo(path)
    return [(ref, str(repo.references[ref].target)) for ref in repo.references if parse_subtask_ref(ref)]


async def reconcile_repo(store: LandingStore, root: Path, repo: Repo) -> Report:
    report = Report(repo.name)
    path = git.bare_path(root, repo.name)
    if repo.forge:  # the forge's branch is the truth: an intent is finished only if the forge moved
        await asyncio.to_thread(mirror.sync_target, path, mirror.remote_for(repo.forge_git_url or "",
                                                                             repo.forge_token_env),
                                repo.target_branch)

    def on_main(sha: str) -> bool:
        bare = git.open_repo(path)
        head = git.head_of(bare, repo.target_ref)
        return head is not None and sha in bare and git.is_ancestor(bare, sha, head)

    for intent in await store.pending_intents(repo.name):
        if await asyncio.to_thread(on_main, intent.new_sha):
            try:
                await store.finish_landing(intent)
                report.finished.append(intent.candidate_id)
            except ClaimSuperseded as e:
                await store.abandon_intent(intent, e.message)
                await store.add_finding(repo=repo.name, kind="landed_without_claim",
                                        detail={"sha": intent.new_sha, "why": e.message})
        else:
            await store.roll_back(intent, "the bot stopped before main moved; verifying again")
            report.rolled_back.append(intent.candidate_id)

    report.requeued = await store.requeue_stuck(repo.name)

    report.enqueued = await enqueue_orphans(store, path, repo)

    chain = await store.landed_chain(repo.name)
    report.unexplained, report.landed_not_on_main = await asyncio.to_thread(
        _history, path, repo.target_ref, repo.root_sha, chain)
    if report.unexplained:
        await store.add_finding(repo=repo.name, kind="unexplained_commits",
                                detail={"commits": report.unexplained[:1000], "count": len(report.unexplained)})
    if report.landed_not_on_main:
        await store.add_finding(repo=repo.name, kind="landed_not_on_main",
                                detail={"commits": report.landed_not_on_main[:1000]})
    if not report.clean or report.finished or report.rolled_back or report.enqueued:
        log.warning("reconcile %s: %s", repo.name, report)
    return report


async def enqueue_orphans(store: LandingStore, path: Path, repo: Repo,
                          refs: Collection[str] | None = None) -> list[int]:
    """Step 3: queue every subtask branch tip at its subtask's current claim version that is no candidate yet (an
    accepted push whose post-receive step never ran). The queue also runs this every ``orphan sweep`` while idle,
    and on the branches of candidates about to land (``refs``): a push served by a killed bot's git process can
    move its branch after the new process reconciled."""
    out: list[int] = []
    tips = [t for t in await asyncio.to_thread(_subtask_tips, path) if refs is None or t[0] in refs]
    parsed = [(ref, sha, p) for ref, sha in tips if (p := parse_subtask_ref(ref))]
    facts = await store.owner_facts([p[0] for _, _, p in parsed]) if parsed else {}
    for ref, sha, (sid, version) in parsed:
        row = facts.get(sid)
        if row is None or row.owner_id is None or row.claim_version != version:
            continue
        if row.status not in ("running", "submitted"):
            continue
        if await store.candidate_exists(subtask_id=sid, claim_version=version, sha=sha):
            continue
        try:
            cand = await store.enqueue(repo=repo.name, subtask_id=sid, claim_version=version, owner_id=row.owner_id,
                                       sha=sha, ref=ref)
            out.append(cand.id)
        except ClaimSuperseded:
            continue
    return out
