"""Judging a push: pure decisions from facts; the sentences are ``mergebot.landing.messages``'.

The pre-receive path (``mergebot.landing.prereceive``) gathers facts — the pushed ref updates, the subtask
rows they name, the commits and paths they bring — and asks the functions here. Nothing here does I/O, so
every rule is tested on its own.

Rules, in the order they are checked:
  1. Only ``refs/heads/subtasks/<id>/v<claim_version>`` may be pushed. The target branch, any other branch,
     tags and every other ref are protected: only Mergebot moves main.
  2. A deletion is allowed only of a subtask ref the pusher owns (at any of its versions).
  3. The pusher must own the subtask (owner taken from the authenticated token), at the current claim
     version, while it is running or submitted. An older version is "stale"; a newer one does not exist yet; a
     subtask nobody holds (landed, ready, failed, cancelled) is "not running", one another agent holds is "not
     yours".
  4. The pushed history must be made for this subtask: it may not touch protected paths, exceed the size
     limits, bring an unrelated root, or include other subtasks' commits that have not landed.
  5. With a footprint (the paths its subtask expects to touch) and a repository that refuses changes outside
     it, every changed path must be in the footprint (otherwise that is only a warning on the verdict).
  6. It may not be a change another subtask already made: the same patch id as another subtask's landed or
     live candidate is a duplicate (a re-push of one's own change is not).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence
from dataclasses import dataclass

from mergebot.landing import messages as say
from mergebot.models import Owner

SUBTASK_REF = re.compile(r"^refs/heads/subtasks/([1-9][0-9]{0,17})/v([1-9][0-9]{0,17})$")


@dataclass(frozen=True)
class RefUpdate:
    old: str
    new: str
    ref: str

    @property
    def deletion(self) -> bool:
        return set(self.new) == {"0"}


@dataclass(frozen=True)
class Refusal:
    ref: str
    code: str
    message: str
    paths: tuple[str, ...] = ()  # the paths the rule is about (protected ones touched, an oversized file)
    twin: Twin | None = None  # for a duplicate: the other subtask's change


@dataclass(frozen=True)
class Twin:
    """Another subtask's candidate with the same change: landed (``landed_sha``), or live."""

    candidate_id: int
    subtask_id: int
    owner: str
    status: str
    sha: str
    landed_sha: str | None = None


def parse_subtask_ref(ref: str) -> tuple[int, int] | None:
    m = SUBTASK_REF.fullmatch(ref)  # not match: "$" also matches before a trailing newline
    return (int(m.group(1)), int(m.group(2))) if m else None


def judge_ref(update: RefUpdate, pusher_id: int, target_branch: str, row: Owner | None) -> Refusal | None:
    """Rules 1 to 3 for one ref update. None means the ref may proceed to the content checks."""
    ref = update.ref
    parsed = parse_subtask_ref(ref)
    if ref == f"refs/heads/{target_branch}":
        return Refusal(ref, "protected_ref", say.pushed_to_target(ref, target_branch))
    if parsed is None:
        return Refusal(ref, "protected_ref", say.protected_ref(ref))
    subtask_id, version = parsed
    if row is None:
        return Refusal(ref, "unknown_subtask", say.unknown_subtask(ref, subtask_id))
    if update.deletion:
        if row.owner_id != pusher_id:
            return Refusal(ref, "not_owner", say.delete_not_yours(ref, subtask_id))
        return None
    if version < row.claim_version:
        return Refusal(ref, "stale_claim", say.stale_version(ref, version, subtask_id, row.claim_version))
    if version > row.claim_version:
        return Refusal(ref, "stale_claim", say.future_version(ref, version, subtask_id, row.claim_version))
    if row.owner_id is None and row.status not in ("running", "submitted"):  # nobody's: landed, ready, failed...
        return Refusal(ref, "not_running", say.not_running(ref, subtask_id, row.status))
    if row.owner_id != pusher_id:
        return Refusal(ref, "not_owner", say.not_yours(ref, subtask_id, row.status, row.owner_id is not None))
    if row.landing:
        return Refusal(ref, "landing", say.landing_now(ref, subtask_id))
    if row.status not in ("running", "submitted"):
        return Refusal(ref, "not_running", say.not_running(ref, subtask_id, row.status))
    return None


@dataclass(frozen=True)
class Content:
    """What a pushed tip brings relative to the target branch."""

    changed_paths: Sequence[str]
    commit_count: int
    roots: Sequence[str]  # commits with no parents among the new ones: unrelated history
    foreign: Sequence[tuple[str, int]]  # (commit, subtask id) for other subtasks' unlanded commits
    largest_file: tuple[str, int]
    push_bytes: int
    already_on_target: bool
    patch_id: str | None = None  # the change as one id (``git.patch_id``)


@dataclass(frozen=True)
class Limits:
    protected_paths: Sequence[str]
    max_file_bytes: int
    max_push_bytes: int
    max_commits: int = 1000
    footprint_refuse: bool = False  # a change outside its subtask's footprint is refused, not only flagged


def is_protected(path: str, patterns: Sequence[str]) -> bool:
    """A pattern protects the path it names and everything under it (``ci/`` and ``ci`` alike), and every file
    it matches as an ``fnmatch`` pattern (``*.lock``). A name is taken literally too: ``[x].cfg`` protects the
    file of that name, not only ``x.cfg``."""
    for p in patterns:
        folder = p if p.endswith("/") else p + "/"
        if (path + "/").startswith(folder):
            return True
        if fnmatch.fnmatchcase(path, p):
            return True
    return False


def outside_footprint(paths: Sequence[str], footprint: Sequence[str]) -> list[str]:
    """The changed paths the footprint does not cover (a footprint entry covers what a protected-path pattern
    would); none when there is no footprint."""
    return [p for p in paths if not is_protected(p, footprint)] if footprint else []


def judge_content(update: RefUpdate, target_branch: str, content: Content, limits: Limits,
                  footprint: Sequence[str] = ()) -> Refusal | None:
    """Rules 4 and 5 for one ref update whose ref passed ``judge_ref``."""
    ref = update.ref
    if content.push_bytes > limits.max_push_bytes:
        return Refusal(ref, "too_large", say.push_too_large(ref, content.push_bytes, limits.max_push_bytes))
    path, size = content.largest_file
    if size > limits.max_file_bytes:
        return Refusal(ref, "too_large", say.file_too_large(ref, path, size, limits.max_file_bytes), (path,))
    if content.commit_count > limits.max_commits:
        return Refusal(ref, "history_anomaly", say.too_many_commits(ref, limits.max_commits, target_branch))
    if content.already_on_target:
        return Refusal(ref, "nothing_to_land", say.already_on_target(ref, target_branch))
    if content.roots:
        return Refusal(ref, "history_anomaly", say.unrelated_history(ref, content.roots[0], target_branch))
    if content.foreign:
        sha, other = content.foreign[0]
        return Refusal(ref, "history_anomaly", say.foreign_commit(ref, sha, other, target_branch))
    touched = [p for p in content.changed_paths if is_protected(p, limits.protected_paths)]
    if touched:
        return Refusal(ref, "protected_path", say.protected_paths(ref, touched), tuple(touched[:100]))
    outside = outside_footprint(content.changed_paths, footprint) if limits.footprint_refuse else []
    if outside:
        return Refusal(ref, "outside_footprint", say.outside_footprint(ref, outside, footprint), tuple(outside[:100]))
    return None


def judge_twin(update: RefUpdate, subtask_id: int, twin: Twin | None) -> Refusal | None:
    """Rule 6: the same change as another subtask's (found by the change's patch id)."""
    if twin is None or twin.subtask_id == subtask_id:
        return None
    return Refusal(update.ref, "duplicate", say.duplicate_change(update.ref, twin.subtask_id, twin.owner, twin.status,
                                                                  twin.sha, twin.landed_sha, subtask_id), twin=twin)


def summary(refusals: Sequence[Refusal]) -> str:
    """The text git prints to the pusher (each line prefixed with 'remote:' by git)."""
    return say.refused_push([r.message for r in refusals])
