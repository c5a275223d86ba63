"""The one invariant check that the drill tests and ``mergebot drill`` share: pure given a ``Snapshot``.

A snapshot holds main's history read with pygit2, the landed rows, the subtasks, the candidates of the subtasks that
matter, the tips of the subtask branches, and the ``push_refused`` events of the subtasks a drill pushed to; ``check``
also takes the pushes a drill made and what git answered. It returns a list of ``Violation``; an empty list means:

  * every commit on main's first-parent chain after the repository's root is explained by exactly one landed
    row (the segment from the row's ``merged_sha`` down to its ``base_sha``), and the chain reaches the root;
  * every landed row's merged commit is on that chain, carries the tree the verifier passed on, contains the
    candidate, and its verifier result is a pass (``pass`` or ``flaky``);
  * every subtask is in a legal state: owner iff running or submitted, lease iff running, landed iff a landed
    row says so (at its claim version), at most one landed candidate per (subtask, claim version);
  * no accepted push was lost: every push git reported accepted has a candidate, and once the queue is settled
    that candidate ended landed, or refused (rejected, superseded, cancelled, parked) with a recorded reason;
    every subtask branch at its subtask's current claim version has a candidate for its tip.

The rules that need an idle queue (no stuck submitted subtask, no orphan push, no lost or unsettled push) are
checked only with ``settled``. Nothing here touches the network or runs a process: ``gather`` builds the snapshot.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pygit2

from mergebot import messages as say
from mergebot.messages.refs import parse_subtask_ref

Row = Mapping[str, Any]

SUBTASK_STATUSES = frozenset({"blocked", "ready", "running", "submitted", "landed", "failed", "cancelled"})
CANDIDATE_FINAL = frozenset({"landed", "rejected", "superseded", "cancelled", "parked"})
CANDIDATE_LIVE = frozenset({"queued", "verifying", "landing", "parked"})
PASSING = frozenset({"pass", "flaky"})


@dataclass(frozen=True)
class Violation:
    kind: str
    subject: str
    message: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}"


@dataclass
class Push:
    """One ``git push`` a drill made, and what git answered."""

    agent: str
    subtask_id: int
    claim_version: int
    sha: str
    outcome: str  # "accepted", "refused" (a hook or git said no) or "failed" (no answer: transport)
    message: str = ""

    @property
    def accepted(self) -> bool:
        return self.outcome == "accepted"


@dataclass
class Snapshot:
    repo: dict[str, Any]
    git_dir: Path
    head: str | None
    tips: dict[str, str]  # refs/heads/subtasks/<id>/v<version> -> sha
    landed: list[dict[str, Any]]  # every repository's rows (subtask checks need them all)
    subtasks: list[dict[str, Any]]
    candidates: dict[int, list[dict[str, Any]]]  # subtask id -> its candidates (for the subtasks that matter)
    refusals: dict[int, list[dict[str, Any]]] = field(default_factory=dict)  # subtask id -> its push_refused events


def _carries(repo: pygit2.Repository, merged: str, cand: str) -> bool:
    """Whether landed commit ``merged`` contains candidate ``cand``: as an ancestor (a merge, a fast-forward), or,
    squashed (one parent, main's), as the branch tip its message names (``Mergebot-Branch-Tip``)."""
    if cand in repo and (cand == merged or repo.descendant_of(merged, cand)):
        return True
    commit = repo[merged].peel(pygit2.Commit)
    return len(commit.parent_ids) == 1 and f"\n{say.BRANCH_TIP_TRAILER}: {cand}\n" in commit.message


def check_history(repo: pygit2.Repository, head: str | None, root_sha: str, landed: Sequence[Row],
                  limit: int = 1_000_000) -> list[Violation]:
    """main's first-parent chain against the repository's landed rows (``landed``: this repository's only)."""
    out: list[Violation] = []
    if head is None:
        return [Violation("no_main", "main", "the target branch does not exist")]
    chain: list[str] = []
    index: dict[str, int] = {}
    cur = head
    reached_root = False
    while len(chain) < limit:
        if cur not in repo:
            out.append(Violation("missing_commit", cur, f"commit {cur} on main's chain is missing"))
            break
        commit = repo[cur].peel(pygit2.Commit)
        index[cur] = len(chain)
        chain.append(cur)
        if cur == root_sha:
            reached_root = True
            break
        if not commit.parent_ids:
            out.append(Violation("root_not_reached", cur, f"main's first-parent chain ends at {cur[:12]}, not at "
                                 f"the repository's root {root_sha[:12]}: its history was rewritten"))
            break
        cur = str(commit.parent_ids[0])
    explained: dict[str, list[int]] = {}
    by_merged: dict[str, list[int]] = {}
    for row in landed:
        by_merged.setdefault(row["merged_sha"], []).append(row["id"])
    for sha, ids in by_merged.items():
        if len(ids) > 1:
            out.append(Violation("landed_twice", sha, f"{len(ids)} landed rows ({ids}) name merged commit {sha[:12]}"))
    for row in landed:
        merged, base = row["merged_sha"], row["base_sha"]
        who = f"landed row {row['id']} (subtask {row['subtask_id']} v{row['claim_version']})"
        if merged not in index:
            out.append(Violation("landed_not_on_main", merged, f"{who}: merged commit {merged[:12]} is not on "
                                 "main's first-parent chain"))
            continue
        if base not in index or index[base] <= index[merged]:
            out.append(Violation("landed_base_not_below", merged, f"{who}: base {base[:12]} is not below "
                                 f"{merged[:12]} on main's first-parent chain"))
            continue
        for i in range(index[merged], index[base]):
            explained.setdefault(chain[i], []).append(row["id"])
        tree = str(repo[merged].peel(pygit2.Commit).tree_id)
        if row["tree_sha"] != tree:
            out.append(Violation("tree_mismatch", merged, f"{who}: main has tree {tree[:12]} at {merged[:12]}, the "
                                 f"verifier passed tree {str(row['tree_sha'])[:12]}"))
        if row["verifier_result"] not in PASSING:
            out.append(Violation("unverified_landing", merged, f"{who}: verifier result is "
                                 f"{row['verifier_result']!r}, not a pass"))
        cand = row["candidate_sha"]
        if not _carries(repo, merged, cand):
            out.append(Violation("candidate_not_landed", merged, f"{who}: candidate {cand[:12]} is not in "
                                 f"{merged[:12]}"))
    for sha in chain[:-1] if reached_root else chain:
        ids = explained.get(sha, [])
        if not ids:
            out.append(Violation("unexplained_commit", sha, f"commit {sha[:12]} on main is explained by no landed "
                                 "row"))
        elif len(ids) > 1:
            out.append(Violation("explained_twice", sha, f"commit {sha[:12]} on main is explained by landed rows "
                                 f"{ids}"))
    return out


def check_subtasks(subtasks: Sequence[Row], landed: Sequence[Row], candidates: Mapping[int, Sequence[Row]],
                   tips: Mapping[str, str], *, settled: bool) -> list[Violation]:
    """Every subtask in a legal state; at most one landing per claim version; no subtask branch forgotten. A
    landing the bot reverted (a row of kind ``revert`` names it) no longer counts: its subtask went back to its
    owner and may land again at a later claim version."""
    out: list[Violation] = []
    reverted = {row["reverts"] for row in landed if row.get("reverts") is not None}
    rows_of: dict[int, list[Row]] = {}
    for row in landed:
        if row["id"] not in reverted:
            rows_of.setdefault(row["subtask_id"], []).append(row)
    by_id = {s["id"]: s for s in subtasks}
    for sid, rows in rows_of.items():
        if len(rows) > 1:
            out.append(Violation("landed_twice", f"subtask {sid}", f"subtask {sid} has {len(rows)} landed rows "
                                 "that stand"))
        if sid in by_id and by_id[sid]["status"] != "landed":
            out.append(Violation("landed_row_without_landing", f"subtask {sid}", f"subtask {sid} has a landed row "
                                 f"but is {by_id[sid]['status']}"))
    for s in subtasks:
        sid, status = s["id"], s["status"]
        subject = f"subtask {sid}"
        if status not in SUBTASK_STATUSES:
            out.append(Violation("illegal_status", subject, f"subtask {sid} has status {status!r}"))
        owned = s.get("owner") is not None or s.get("owner_id") is not None
        if owned != (status in ("running", "submitted")):
            out.append(Violation("illegal_owner", subject, f"subtask {sid} is {status} and "
                                 f"{'has' if owned else 'has no'} owner"))
        if (s.get("lease_expires_at") is not None) != (status == "running"):
            out.append(Violation("illegal_lease", subject, f"subtask {sid} is {status} and "
                                 f"{'has' if s.get('lease_expires_at') else 'has no'} lease"))
        if status in ("running", "submitted", "landed") and s["claim_version"] < 1:
            out.append(Violation("illegal_claim", subject, f"subtask {sid} is {status} at claim version "
                                 f"{s['claim_version']}"))
        if status == "landed":
            rows = rows_of.get(sid, [])
            if not rows:
                out.append(Violation("landed_without_row", subject, f"subtask {sid} is landed but no landed row "
                                     "says where"))
            elif rows[0]["claim_version"] != s["claim_version"]:
                out.append(Violation("landed_wrong_claim", subject, f"subtask {sid} landed at claim version "
                                     f"{rows[0]['claim_version']} but is at {s['claim_version']}"))
        cands = candidates.get(sid, [])
        per_version: dict[int, int] = {}
        for c in cands:
            if c["status"] == "landed":
                per_version[c["claim_version"]] = per_version.get(c["claim_version"], 0) + 1
        for version, n in per_version.items():
            if n > 1:
                out.append(Violation("landed_twice", subject, f"subtask {sid} has {n} landed candidates at claim "
                                     f"version {version}"))
        if settled and status == "submitted":
            current = [c for c in cands if c["claim_version"] == s["claim_version"]]
            if current and not any(c["status"] in CANDIDATE_LIVE for c in current):
                out.append(Violation("stuck_submitted", subject, f"subtask {sid} is submitted at claim version "
                                     f"{s['claim_version']} but none of its candidates is still in the queue"))
    if settled:
        for ref, sha in tips.items():
            parsed = parse_subtask_ref(ref)
            if parsed is None:
                continue
            sid, version = parsed
            sub = by_id.get(sid)
            if sub is None or sub["claim_version"] != version or sub["status"] not in ("running", "submitted"):
                continue
            if not any(c["claim_version"] == version and c["sha"] == sha for c in candidates.get(sid, [])):
                out.append(Violation("orphan_push", ref, f"{ref} is at {sha[:12]}, a push at the current claim "
                                     "version that never became a candidate"))
    return out


def check_pushes(pushes: Iterable[Push], candidates: Mapping[int, Sequence[Row]], *, settled: bool,
                 refusals: Mapping[int, Sequence[Row]] | None = None) -> list[Violation]:
    """No accepted push lost: each has a candidate, or a recorded refusal (the claim changed between git's
    pre-receive and post-receive steps: ``push_refused`` at stage post-receive); once settled, its candidate ended
    landed or refused with a reason."""
    out: list[Violation] = []
    refused = {(sid, e.get("claim_version"), (e.get("detail") or {}).get("sha"))
               for sid, events in (refusals or {}).items() for e in events
               if e.get("kind") == "push_refused" and (e.get("detail") or {}).get("message")}
    seen: set[tuple[int, int, str]] = set()
    for p in pushes:
        key = (p.subtask_id, p.claim_version, p.sha)
        if not p.accepted or key in seen:
            continue
        seen.add(key)
        subject = f"push {p.sha[:12]} (subtask {p.subtask_id} v{p.claim_version} by {p.agent})"
        mine = [c for c in candidates.get(p.subtask_id, []) if c["claim_version"] == p.claim_version
                and c["sha"] == p.sha]
        if not mine:
            if settled and key not in refused:
                out.append(Violation("lost_push", subject, f"{subject}: git reported it accepted, but it never "
                                     "became a candidate"))
            continue
        last = max(mine, key=lambda c: c["id"])
        if not settled:
            continue
        if last["status"] not in CANDIDATE_FINAL:
            out.append(Violation("push_not_settled", subject, f"{subject}: candidate {last['id']} is still "
                                 f"{last['status']}"))
        elif last["status"] != "landed" and not (last.get("reason") or "").strip():
            out.append(Violation("silent_refusal", subject, f"{subject}: candidate {last['id']} ended "
                                 f"{last['status']} without a recorded reason"))
    return out


def check(snap: Snapshot, pushes: Iterable[Push] = (), *, settled: bool = True) -> list[Violation]:
    """Every invariant at once, on one snapshot."""
    name = snap.repo["name"]
    mine = [r for r in snap.landed if r["repo"] == name]
    git_repo = pygit2.Repository(str(snap.git_dir))
    return (check_history(git_repo, snap.head, snap.repo["root_sha"], mine)
            + check_subtasks(snap.subtasks, snap.landed, snap.candidates, snap.tips, settled=settled)
            + check_pushes(pushes, snap.candidates, settled=settled, refusals=snap.refusals))
