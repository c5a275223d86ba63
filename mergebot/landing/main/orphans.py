"""Accepted pushes no candidate accounts for: the post-receive step that never ran, caught up.

A push git took is accounted for by its post-receive step (a candidate, or a refusal on the record). When the
process serving it died between the two, the branch tip is there and nothing says so; the reconciler, the idle
queue and a landing about to fence its candidates all look for such tips here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from pathlib import Path

from mergebot import messages as say
from mergebot.db.database import Database
from mergebot.errors import ClaimSuperseded
from mergebot.git import changes
from mergebot.git import repo as git
from mergebot.messages.refs import parse_subtask_ref
from mergebot.models import Repo


def branch_tips(path: Path) -> list[tuple[str, str]]:
    """(ref, tip) of every subtask branch (all claim versions)."""
    repo = git.open_repo(path)
    return [(ref, str(repo.references[ref].target)) for ref in repo.references if parse_subtask_ref(ref)]



async def queue_orphans(db: Database, path: Path, repo: Repo, refs: Collection[str] | None = None) -> list[int]:
    """Account for every subtask branch tip at its subtask's current claim version that no candidate accounts for:
    an accepted push whose post-receive step never ran. The reconciler runs this, the queue every ``orphan sweep``
    while idle, and on the branches of candidates about to land (``refs``): a push served by a killed bot's git
    process can move its branch after the new process reconciled.

    While the subtask still waits for work (running or submitted) the push is queued as a candidate. If it has moved
    on (landed with an earlier push, released, cancelled), the push is refused on the record, once, as post-receive
    refuses a push whose claim changed after its pre-receive step: an accepted push never vanishes without one."""
    tips = [t for t in await asyncio.to_thread(branch_tips, path) if refs is None or t[0] in refs]
    parsed = [(ref, sha, p) for ref, sha in tips if (p := parse_subtask_ref(ref))]
    facts = await db.landing.owner_facts([p[0] for _, _, p in parsed]) if parsed else {}
    current = {(sid, version, sha): ref for ref, sha, (sid, version) in parsed
               if (row := facts.get(sid)) is not None and row.claim_version == version}
    out: list[int] = []
    for (sid, version, sha), refused in (await db.landing.unaccounted_tips(list(current))).items():
        row, ref = facts[sid], current[(sid, version, sha)]
        if row.status in ("running", "submitted") and row.owner_id is not None:
            try:
                cand = await db.landing.enqueue(repo=repo.name, subtask_id=sid, claim_version=version,
                                                owner_id=row.owner_id, sha=sha, ref=ref,
                                                superseded=say.newer_push(sha),
                                                patch_id=await asyncio.to_thread(changes.patch_id_on, path,
                                                                                 repo.target_ref, sha))
                out.append(cand.id)
            except ClaimSuperseded:
                continue
        elif not refused:
            await db.subtasks.log_event(actor_id=None, kind="push_refused", subtask_id=sid, claim_version=version,
                                        detail={"repo": repo.name, "ref": ref, "sha": sha, "code": "claim_superseded",
                                                "stage": "post-receive",
                                                "message": say.moved_on_before_queued(ref, sid, row.status, sha)})
    return out
