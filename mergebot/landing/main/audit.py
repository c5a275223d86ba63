"""The audit of main (issue 44): every move of main is explained by a landing statement, or it is a finding.

Each value main took since the repository's ``root_sha`` must have a landing statement (``attestations``, kind
``landing``; or one an intent kept for a landing no landed row took) that opens with a trusted key valid when it was
signed, names the commit, this repository, and as main before the value main took before it (the commit's first
parent, or further down when the landing fast-forwarded several commits, which it carries:
``attest.chain.carried_to``). A commit without one was put there around the bot: an admin's push into the bare
repository, a push to the forge's main. The reconciler runs the audit on every pass (``reconcile_repo``), so such
a move is a finding within one pass.

It stays cheap: the repository remembers the head the audit last walked to (``repos.audited_head``), and a pass
walks only the commits after it (one query for their statements). When that head is no longer on main's history
(main went back, or was rewritten) the walk goes to the root, and the move itself is named.

What is found stays on the repository (``repos.unattested``: shown on ``/healthz``, the queue page and
``/metrics``) until an admin resumes it; a repository whose rule is ``--on-unattested pause`` is paused with a
reason naming the commits. Each pass that finds new commits also records a finding (``unattested_main``).
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mergebot import messages as say
from mergebot.attest import chain, keys, notes
from mergebot.attest.envelope import Untrusted
from mergebot.git import repo as git
from mergebot.landing.context import Context
from mergebot.models import Repo

log = logging.getLogger(__name__)
MAX_WALK = 100_000  # commits one pass walks at most (a first audit of a long history, a rewritten main)
MAX_KEPT = 1000  # commits a finding names; its count stays whole


@dataclass
class Audit:
    head: str
    walked: int = 0
    unattested: list[tuple[str, str]] = field(default_factory=list)  # (commit, why), oldest first

    @property
    def commits(self) -> list[str]:
        return [sha for sha, _ in self.unattested]


def walk(path: Path, target_ref: str, stops: set[str]) -> tuple[str, list[tuple[str, str | None]], str | None]:
    """(main's head, its first-parent history head first with each commit's first parent, down to the first commit
    of ``stops`` (not included), the stop reached (None: the root, or ``MAX_WALK``)). Blocking."""
    repo = git.open_repo(path)
    head = git.head_of(repo, target_ref)
    assert head is not None
    history: list[tuple[str, str | None]] = []
    cur: str | None = head
    while cur is not None and len(history) < MAX_WALK:
        if cur in stops:
            return head, history, cur
        parents = getattr(repo[cur], "parent_ids", [])
        parent = str(parents[0]) if parents else None
        history.append((cur, parent))
        cur = parent
    return head, history, None


def trust_of(ctx: Context) -> keys.Trust | None:
    """The key folder's trust file (made with its key on first use); None when it cannot be read (the audit then
    checks each statement's subject and main-before only, and says so in the log)."""
    ctx.signer()
    try:
        return keys.read_trust(keys.trust_path(ctx.key_folder).read_text())
    except (OSError, ValueError, Untrusted) as e:
        log.warning("the audit of main checks statements without their signatures: the trust file is unreadable: %s",
                    e)
        return None


def before_of(sha: str, envelope: dict[str, Any] | None, trust: keys.Trust | None,
              repo: str) -> tuple[object, str | None]:
    """The main-before of ``sha``'s landing statement, or why it has none that holds (``(None, why)``)."""
    if envelope is None:
        return None, say.ATTEST_NO_STATEMENT
    if trust is not None:
        try:
            statement, _ = chain.landing_of(sha, notes.text([envelope]), trust, repo)
        except Untrusted as e:
            return None, e.message
    else:
        try:
            statement = json.loads(base64.b64decode(str(envelope.get("payload") or "")))
        except ValueError:
            return None, say.ATTEST_NO_STATEMENT
        if not isinstance(statement, dict):
            return None, say.ATTEST_NO_STATEMENT
    return ((statement.get("predicate") or {}).get("main") or {}).get("before"), None


def unexplained(history: list[tuple[str, str | None]], envelopes: dict[str, dict[str, Any]],
                trust: keys.Trust | None, repo: str, end: str | None) -> list[tuple[str, str]]:
    """The moves of main in ``history`` (head first, down to ``end``) that no landing statement explains, oldest
    first, each with why: every value main took needs its statement, whose main-before is the value before it (a
    landing that fast-forwarded several commits carries the ones between, ``chain.carried_to``)."""
    found: list[tuple[str, str]] = []
    i = 0
    while i < len(history):
        sha, parent = history[i]
        before, why = before_of(sha, envelopes.get(sha), trust, repo)
        if why is not None:
            found.append((sha, why))
            i += 1
            continue
        k = i + 1 if before == parent else chain.carried_to(history, i, before, end)
        if k is None:
            found.append((sha, say.attest_not_its_parent(before, parent)))
            k = i + 1
        i = k
    return found[::-1]


async def audit(ctx: Context, repo: Repo, path: Path) -> Audit:
    """One pass of the audit over ``repo``'s main (see the module): walk what came after the audited head, check
    each commit's statement, record what is found and pause the queue when the repository's rule says so."""
    repo = await ctx.db.repos.get_repo(repo.name)  # as it is now: a pass's record may be older than its reconcile
    start = repo.audited_head
    head, history, reached = await asyncio.to_thread(
        walk, path, repo.target_ref, {s for s in (start, repo.root_sha) if s})
    result = Audit(head, walked=len(history))
    if head == start:
        return result
    envelopes = await ctx.db.attest.landing_envelopes(repo.name, [sha for sha, _ in history]) if history else {}
    trust = trust_of(ctx) if history else None
    result.unattested += unexplained(history, envelopes, trust, repo.name, reached or (start or repo.root_sha))
    if start is not None and reached != start and head not in result.commits:  # the head audited before is not
        result.unattested.append((head, say.audit_went_back(start, head)))  # behind main's head any more
    unattested = None
    if result.unattested:
        before = dict(repo.unattested or {})
        known = list(before.get("commits") or [])
        new = [(sha, why) for sha, why in result.unattested if sha not in known]
        count = int(before.get("count") or len(known)) + len(new)
        commits = (known + [sha for sha, _ in new])[:MAX_KEPT]
        reasons = {**dict(before.get("why") or {}), **dict(new)}
        unattested = {"commits": commits, "count": count, "head": head,
                      "why": {sha: reasons[sha] for sha in commits if sha in reasons}}
        await ctx.db.landing.add_finding(repo=repo.name, kind="unattested_main", detail={
            "commits": [sha for sha, _ in result.unattested][:MAX_KEPT], "count": len(result.unattested),
            "why": {sha: why for sha, why in result.unattested[:MAX_KEPT]}, "head": head})
        log.warning("%s: %s", repo.name, say.unattested_summary(result.commits, len(result.unattested)))
    await ctx.db.repos.audited(repo=repo.name, head=head, unattested=unattested)
    if result.unattested and repo.on_unattested == "pause" and not repo.paused:
        await ctx.db.repos.set_paused(repo=repo.name, paused=True,
                                      reason=say.unattested_paused(result.commits, len(result.unattested)))
    return result
