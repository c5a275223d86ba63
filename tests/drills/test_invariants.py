"""The invariant check itself (``mergebot.drill``), on hand-made histories and rows: each rule fires on the
situation it names and stays quiet on a correct one, so a drill that reports no violation has checked something."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pygit2

from mergebot.drill.invariants import Push, check_history, check_pushes, check_subtasks


def history(tmp: Path) -> tuple[pygit2.Repository, list[str]]:
    """root <- m1 (merge of c1) <- m2 (merge of c2), plus a stray commit s on top of m2."""
    repo = pygit2.init_repository(str(tmp / "r.git"), bare=True)
    sig = pygit2.Signature("t", "t@example.com")

    def tree(text: str) -> pygit2.Oid:
        b = repo.TreeBuilder()
        b.insert("f.txt", repo.create_blob(text.encode()), pygit2.GIT_FILEMODE_BLOB)
        return b.write()

    root = repo.create_commit(None, sig, sig, "root", tree("0"), [])
    c1 = repo.create_commit(None, sig, sig, "c1", tree("1"), [root])
    m1 = repo.create_commit(None, sig, sig, "m1", tree("1"), [root, c1])
    c2 = repo.create_commit(None, sig, sig, "c2", tree("2"), [m1])
    m2 = repo.create_commit(None, sig, sig, "m2", tree("2"), [m1, c2])
    s = repo.create_commit(None, sig, sig, "stray", tree("3"), [m2])
    return repo, [str(x) for x in (root, c1, m1, c2, m2, s)]


def row(repo: pygit2.Repository, rid: int, sid: int, cand: str, base: str, merged: str, **kw: Any) -> dict[str, Any]:
    return {"id": rid, "subtask_id": sid, "claim_version": 1, "repo": "demo", "candidate_sha": cand, "base_sha": base,
            "merged_sha": merged, "tree_sha": str(repo[merged].peel(pygit2.Commit).tree_id),
            "verifier_result": "pass", **kw}


def kinds(violations: list[Any]) -> list[str]:
    return sorted(v.kind for v in violations)


def test_history_rules(tmp_path: Path) -> None:
    repo, (root, c1, m1, c2, m2, s) = history(tmp_path)
    good = [row(repo, 1, 1, c1, root, m1), row(repo, 2, 2, c2, m1, m2)]
    assert check_history(repo, m2, root, good) == []
    assert kinds(check_history(repo, s, root, good)) == ["unexplained_commit"]
    assert kinds(check_history(repo, m2, root, good[:1])) == ["unexplained_commit"]
    assert kinds(check_history(repo, m1, root, good)) == ["landed_not_on_main"]
    twice = [*good, row(repo, 3, 3, c2, root, m2)]
    assert "landed_twice" in kinds(check_history(repo, m2, root, twice))
    assert "explained_twice" in kinds(check_history(repo, m2, root, twice))
    bad = [good[0], {**good[1], "tree_sha": good[0]["tree_sha"], "verifier_result": "fail"}]
    assert kinds(check_history(repo, m2, root, bad)) == ["tree_mismatch", "unverified_landing"]
    assert kinds(check_history(repo, m2, root, [good[0], {**good[1], "candidate_sha": s}])) == ["candidate_not_landed"]
    assert "root_not_reached" in kinds(check_history(repo, m2, c1, good))


def test_subtask_and_push_rules() -> None:
    landed = [{"id": 1, "subtask_id": 1, "claim_version": 2, "repo": "demo"}]
    subs = [{"id": 1, "status": "landed", "claim_version": 2, "owner": None, "lease_expires_at": None},
            {"id": 2, "status": "running", "claim_version": 1, "owner": "ann", "lease_expires_at": "t"}]
    cands = {1: [{"id": 9, "claim_version": 2, "sha": "a" * 40, "status": "landed", "reason": None}]}
    assert check_subtasks(subs, landed, cands, {}, settled=True) == []
    broken = [{**subs[0], "status": "submitted"}, {**subs[1], "owner": None, "lease_expires_at": None}]
    assert kinds(check_subtasks(broken, landed, cands, {}, settled=True)) == [
        "illegal_lease", "illegal_owner", "illegal_owner", "landed_row_without_landing", "stuck_submitted"]
    assert kinds(check_subtasks(subs, [], cands, {}, settled=True)) == ["landed_without_row"]
    tips = {"refs/heads/subtasks/2/v1": "b" * 40}
    assert kinds(check_subtasks(subs, landed, cands, tips, settled=True)) == ["orphan_push"]
    assert check_subtasks(subs, landed, cands, tips, settled=False) == []

    ok = Push("ann", 1, 2, "a" * 40, "accepted")
    lost = Push("ann", 2, 1, "c" * 40, "accepted")
    assert check_pushes([ok, Push("bob", 2, 1, "d" * 40, "refused")], cands, settled=True) == []
    assert kinds(check_pushes([lost], cands, settled=True)) == ["lost_push"]
    on_record = {2: [{"kind": "push_refused", "claim_version": 1, "detail": {"sha": "c" * 40, "message": "why"}}]}
    assert check_pushes([lost], cands, settled=True, refusals=on_record) == []
    silent = {1: [{**cands[1][0], "status": "superseded", "reason": ""}]}
    assert kinds(check_pushes([ok], silent, settled=True)) == ["silent_refusal"]
    waiting = {1: [{**cands[1][0], "status": "verifying"}]}
    assert kinds(check_pushes([ok], waiting, settled=True)) == ["push_not_settled"]
    assert check_pushes([ok], waiting, settled=False) == []
