"""What the bot knows of a push before it is verified: its change (patch id, paths, size) and its failure estimate.

The post-receive step asks here once per accepted push, before the candidate is queued. The patch id finds the
same change elsewhere (duplicates), the paths feed the forecast and the lanes, the tamper signal
(``mergebot.landing.intake.tamper``) names the lines of its non-test code that reach into the test machinery, and the
estimate (``mergebot.landing.intake.risk``) is recorded on the candidate, orders the queue and shapes its batches. An
estimate that cannot be made (the commit is not readable, the database is slow) is never a reason to refuse a push: the
candidate is queued without one, and the queue treats it as the repository's prior.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import psycopg
import pygit2

from mergebot.db.database import Database
from mergebot.errors import MergebotError
from mergebot.git import changes
from mergebot.git import repo as git
from mergebot.landing.intake import risk, tamper
from mergebot.landing.judge import reset

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Change:
    patch_id: str | None = None  # ``git.patch_id`` against the target branch
    paths: tuple[str, ...] = ()  # what it changes from where it forked off the target branch
    lines: int | None = None  # lines it adds and removes there; None when unknown
    suspicious: tuple[tamper.Finding, ...] = ()  # what its non-test code adds that reaches into the test machinery


def change_of(path: Path, target_ref: str, sha: str, tests: Sequence[str] = ()) -> Change:
    """The pushed change as the target branch sees it; empty when it cannot be read. ``tests``: the repository's
    test paths (the tamper signal reads only the other files)."""
    try:
        bare = git.open_repo(path)
        main = git.head_of(bare, target_ref)
        if main is None:
            return Change()
        paths, lines = changes.own_change(bare, main, sha)
        return Change(changes.patch_id(bare, main, sha), tuple(paths), lines,
                      tuple(suspicious_lines(bare, main, sha, paths, tests)))
    except (pygit2.GitError, KeyError, ValueError):
        return Change()


def suspicious_lines(bare: pygit2.Repository, main: str, sha: str, paths: Sequence[str],
                     tests: Sequence[str]) -> list[tamper.Finding]:
    """The tamper signal on a change (``mergebot.landing.intake.tamper``): its non-test Python files on main and
    pushed."""
    read = [(p, changes.text_at(bare, main, p), changes.text_at(bare, sha, p)) for p in paths if p.endswith(".py")
            and not reset.matches(p, tests or reset.DEFAULT_GLOBS)]
    return tamper.scan(read, is_test=lambda p: False)


def findings_json(found: Sequence[tamper.Finding]) -> list[dict[str, Any]]:
    """Findings as a candidate records them (and every door shows them)."""
    return [{"path": f.path, "line": f.line, "rule": f.rule, "text": f.text} for f in found]


async def estimate(db: Database, *, repo: str, owner_id: int, subtask_id: int,
                   change: Change) -> tuple[float, dict[str, Any]] | None:
    """The push's failure probability and what it rests on, for ``LandingStore.enqueue``; None when unknown."""
    try:
        row = await db.landing.risk_facts(repo=repo, owner_id=owner_id, subtask_id=subtask_id,
                                          paths=list(change.paths), own=risk.OWN_FAILURES)
    except (psycopg.Error, MergebotError) as e:
        log.warning("no failure estimate for a push of subtask %s: %s", subtask_id, e)
        return None
    facts = replace(risk.Facts(**row), lines=change.lines, files=len(change.paths))
    got = risk.estimate(facts)
    return got.p, {**got.as_json(), "facts": {k: v for k, v in vars(facts).items() if v is not None}}
