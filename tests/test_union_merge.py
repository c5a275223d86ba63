"""Conflicts the bot resolves itself, only as main says (issue 45): a file that main's ``.gitattributes`` mark
``merge=union``, or that the repository's ``--union`` globs name, is merged by union in the bot's in-memory merge;
a candidate's own ``.gitattributes`` (at the top, in a folder, or main's edited in the same push) gain it nothing;
the verdict, the candidate page and the landed record name every file merged so; and a conflict names the other
candidates in flight that change its files.

The git layer on its own first (a bare repository, no server), then one fleet with real pushes: the changelog
case, the neighbouring tricks, the in-flight names, and ``repo set --union``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pygit2
import pytest

from mergebot import agent
from mergebot.auth import Role
from mergebot.cli.parser import build_parser
from mergebot.db.database import Database
from mergebot.errors import Invalid
from mergebot.git import changes
from mergebot.git import repo as git
from mergebot.git.union import Union
from mergebot.rules import Rules, RulesChange
from tests.support.bot import (
    Fleet,
    check_command,
    commit,
    make_project,
    newest_candidate,
    start_fleet,
    stop_keepers,
)
from tests.support.bot import git as run

ATTRS = "CHANGELOG.md merge=union\n"
LOG = "# Changelog\n"
NEWS = "# News\n"
NOTES = "# Notes\nfirst\nsecond\nthird\n"

# -- the git layer ----------------------------------------------------------------------------------------------


def _put(repo: pygit2.Repository, parent: str | None, files: dict[str, bytes | None], ref: str | None = None) -> str:
    index = pygit2.Index()
    if parent:
        index.read_tree(repo[parent].peel(pygit2.Commit).tree)
    for path, data in files.items():
        if data is None:
            index.remove(path)
        else:
            index.add(pygit2.IndexEntry(path, repo.create_blob(data), pygit2.enums.FileMode.BLOB))
    sig = pygit2.Signature("t", "t@example.com", 1_700_000_000, 0)
    return str(repo.create_commit(ref, sig, sig, "c", index.write_tree(repo), [pygit2.Oid(hex=parent)] if parent
                                  else []))


def _text(repo: pygit2.Repository, tree: str | None, path: str) -> str:
    assert tree is not None
    return repo[repo[tree].peel(pygit2.Tree)[path].id].data.decode()


def test_merge_onto_merges_by_union_only_what_main_says(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = pygit2.init_repository(str(tmp_path / "r.git"), bare=True)
    binary = b"\0\1\2 logo\n"
    base = _put(repo, None, {".gitattributes": ATTRS.encode(), "CHANGELOG.md": LOG.encode(), "NEWS.md": NEWS.encode(),
                             "logo.bin": binary})
    main = _put(repo, base, {"CHANGELOG.md": (LOG + "- main\n").encode(), "NEWS.md": (NEWS + "main\n").encode(),
                             "logo.bin": binary + b"main\0"}, ref="refs/heads/main")
    rule = Union("refs/heads/main")

    # the changelog: both sides' lines, main's first; the merge names the file
    cand = _put(repo, base, {"CHANGELOG.md": (LOG + "- cand\n").encode()})
    merged = git.merge_onto(repo, main, cand, "land", union=rule)
    assert (merged.kind, merged.union, merged.conflicts) == ("merge", ["CHANGELOG.md"], [])
    assert _text(repo, merged.tree, "CHANGELOG.md") == LOG + "- main\n- cand\n"
    assert git.merge_onto(repo, main, cand, "", commit=False, union=rule).tree == merged.tree  # a probe agrees
    assert git.merge_onto(repo, main, cand, "land").conflicts == ["CHANGELOG.md"]  # no rule: a conflict as ever

    # a candidate marking its own conflict union, at the top or in its folder, gains nothing; main's still counts
    tricks = _put(repo, base, {".gitattributes": (ATTRS + "NEWS.md merge=union\n").encode(),
                               "CHANGELOG.md": (LOG + "- trick\n").encode(), "NEWS.md": (NEWS + "trick\n").encode()})
    got = git.merge_onto(repo, main, tricks, "land", union=rule)
    assert (got.kind, got.conflicts, got.union) == ("conflict", ["NEWS.md"], [])
    # the repository's glob does what the candidate could not
    got = git.merge_onto(repo, main, tricks, "land", union=Union("refs/heads/main", ("NEWS.md",)))
    assert (got.kind, got.union) == ("merge", ["CHANGELOG.md", "NEWS.md"])
    assert _text(repo, got.tree, "NEWS.md") == NEWS + "main\ntrick\n"

    # what union cannot merge stays a conflict: a binary file, a file one side deleted
    rest = _put(repo, base, {"logo.bin": binary + b"cand\0", "CHANGELOG.md": None})
    got = git.merge_onto(repo, main, rest, "land", union=Union("refs/heads/main", ("*",)))
    assert (got.kind, got.conflicts) == ("conflict", ["CHANGELOG.md", "logo.bin"])
    hunks = changes.conflict_hunks(repo, main, tricks, only=["NEWS.md"])
    assert [h["path"] for h in hunks] == ["NEWS.md"]  # the conflict's hunks leave out what union merged

    # pygit2's in-memory merge (git older than 2.38) resolves the same files the same way
    monkeypatch.setattr(git, "NO_ATTRIBUTES", "not-a-setting")  # git refuses it: the fallback runs
    again = git.merge_onto(repo, main, cand, "land", union=rule)
    assert (again.kind, again.union, again.tree) == ("merge", ["CHANGELOG.md"], merged.tree)
    assert git.merge_onto(repo, main, tricks, "land", union=rule).conflicts == ["NEWS.md"]


def test_repo_add_and_set_take_union_globs() -> None:
    from mergebot.cli.repos import rules_given

    parser = build_parser()
    add = parser.parse_args(["repo", "add", "demo", "--verifier", "true", "--union", "CHANGELOG.md",
                             "--union", "docs/*.md"])
    assert Rules.of(**rules_given(add)).union_merge == ["CHANGELOG.md", "docs/*.md"]
    assert Rules.of(verifier_command="true").union_merge == []
    change = RulesChange.of(**rules_given(parser.parse_args(["repo", "set", "demo", "--union", "NEWS.md"])))
    assert change.given() == ["union_merge"] and change.params()["union_merge"] == ["NEWS.md"]
    assert parser.parse_args(["repo", "set", "demo", "--no-union"]).no_union
    with pytest.raises(Invalid) as e:
        RulesChange.of(union_merge=["../outside"])
    assert e.value.detail["field"] == "union_merge" and "--union" in e.value.message


# -- through real pushes ----------------------------------------------------------------------------------------


@pytest.fixture
async def union_fleet(e2e_db: Database, e2e_db_url: str, tmp_path: Path) -> AsyncIterator[Fleet]:
    """The test project with a changelog that main's .gitattributes mark merge=union, news and notes they do not;
    agents root, ann, bob and cy."""
    src = make_project(tmp_path / "src")
    for path, text in ((".gitattributes", ATTRS), ("CHANGELOG.md", LOG), ("NEWS.md", NEWS), ("docs/NOTES.md", NOTES)):
        (src / path).parent.mkdir(parents=True, exist_ok=True)
        (src / path).write_text(text)
    run(["add", "-A"], src)
    run(["commit", "-q", "-m", "a changelog merged by union"], src)
    fleet = await start_fleet(e2e_db, e2e_db_url, src, tmp_path,
                              Rules.of(verifier_command=check_command(), verifier_timeout_s=60))
    _, fleet.tokens["cy"] = await e2e_db.agents.add_agent(name="cy", role=Role.AGENT)
    try:
        yield fleet
    finally:
        stop_keepers(tmp_path / "work")
        fleet.bot.stop()


def _page(fleet: Fleet, path: str) -> str:
    with httpx.Client(base_url=fleet.bot.url, timeout=30) as web:
        r = web.post("/login", data={"token": fleet.tokens["root"], "next": path}, headers={"Origin": fleet.bot.url})
        assert r.status_code == 303, r.text
        return web.get(path).text


def _on_main(fleet: Fleet, path: str) -> str:
    bare = fleet.bare()
    return _text(bare, str(bare[fleet.main()].peel(pygit2.Commit).tree_id), path)


async def test_union_merges_only_as_main_says_and_a_conflict_names_who_else_is_in_flight(
        union_fleet: Fleet) -> None:
    fleet = union_fleet
    for title in ("ann's entry", "cy's entry", "bob's entry"):
        await fleet.db.subtasks.create_subtask(actor_id=None, title=title)
    _, ann_wt = fleet.start("ann")
    cy, cy_wt = fleet.start("cy")
    bob, bob_wt = fleet.start("bob")  # all three from the same main

    commit(ann_wt, {"CHANGELOG.md": LOG + "- ann\n", "NEWS.md": NEWS + "ann\n", "docs/NOTES.md": NOTES + "ann\n"})
    assert agent.push(fleet.client("ann"), ann_wt, wait=60, progress=False)["status"] == "landed"
    # cy appends to the changelog too, and retitles the notes (far from ann's line: no conflict there)
    commit(cy_wt, {"CHANGELOG.md": LOG + "- cy\n", "docs/NOTES.md": NOTES.replace("# Notes", "# Notes, by cy")})
    # bob appends to all three, and marks news and notes union himself: in main's .gitattributes in the same
    # push, and in a .gitattributes of the notes' folder
    commit(bob_wt, {"CHANGELOG.md": LOG + "- bob\n", "NEWS.md": NEWS + "bob\n", "docs/NOTES.md": NOTES + "bob\n",
                    ".gitattributes": ATTRS + "NEWS.md merge=union\n", "docs/.gitattributes": "NOTES.md merge=union\n"})
    await fleet.db.repos.set_paused(repo="demo", paused=True, reason="both queued before either is judged")
    for claim, wt in ((cy, cy_wt), (bob, bob_wt)):
        run(["push", "-q", "origin", f"HEAD:refs/heads/{claim.branch}"], wt)
    await fleet.db.repos.set_paused(repo="demo", paused=False, reason=None)

    # the changelog case: cy's lands, both lines kept, and its landed record and verdict name the file
    landed = await newest_candidate(fleet, cy.subtask_id, "landed")
    assert _on_main(fleet, "CHANGELOG.md") == LOG + "- ann\n- cy\n"
    assert _on_main(fleet, "docs/NOTES.md") == NOTES.replace("# Notes", "# Notes, by cy") + "ann\n"
    [row] = await fleet.db.landing.landed(repo="demo", subtask_id=cy.subtask_id)
    assert row.union_merged == ["CHANGELOG.md"]
    verdict = fleet.client("cy").get(f"/api/v1/candidates/{landed['id']}")["verdict"]
    assert (verdict["kind"], verdict["union_merged"]) == ("landed", ["CHANGELOG.md"])
    assert 'id="union-merged"><code>CHANGELOG.md</code>' in _page(fleet, f"/ui/candidates/{landed['id']}")
    assert 'id="union-merged"><code>CHANGELOG.md</code>' in _page(fleet, f"/ui/landed/{row.id}")

    # bob's own marks gain him nothing: news and notes conflict (the changelog, main's union, does not), and he is
    # told that cy's candidate, in flight when his conflict was found, changes the notes too
    rejected = await newest_candidate(fleet, bob.subtask_id, "rejected")
    assert rejected["verdict"]["kind"] == "conflict" and rejected["verdict"]["paths"] == ["NEWS.md", "docs/NOTES.md"]
    [other] = rejected["verdict"]["in_flight"]
    assert (other["candidate_id"], other["subtask_id"], other["owner"], other["paths"]) == (
        landed["id"], cy.subtask_id, "cy", ["docs/NOTES.md"])
    told = fleet.client("bob").get(f"/api/v1/candidates/{rejected['id']}")["verdict"]
    assert told["in_flight"] == [other]
    assert f"Other candidates in flight change the same files: candidate {landed['id']} of subtask " \
           f"{cy.subtask_id} by cy" in told["message"]
    page = _page(fleet, f"/ui/candidates/{rejected['id']}")
    assert f'id="in-flight"><a href="/ui/candidates/{landed["id"]}">' in page

    # `repo set --union NEWS.md`: bob drops his notes change and pushes again; news and changelog merge by union
    env = {**os.environ, "MERGEBOT_DATABASE_URL": fleet.bot.db_url, "MERGEBOT_DATA_DIR": str(fleet.bot.data_dir)}
    out = subprocess.run([sys.executable, "-m", "mergebot", "repo", "set", "demo", "--union", "NEWS.md"], env=env,
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0 and "NEWS.md" in out.stdout, out.stderr[-2000:]
    (bob_wt / "docs" / ".gitattributes").unlink()
    commit(bob_wt, {"docs/NOTES.md": NOTES}, "leave the notes alone")
    assert agent.push(fleet.client("bob"), bob_wt, wait=60, progress=False)["status"] == "landed"
    [row] = await fleet.db.landing.landed(repo="demo", subtask_id=bob.subtask_id)
    assert row.union_merged == ["CHANGELOG.md", "NEWS.md"]
    assert _on_main(fleet, "CHANGELOG.md") == LOG + "- ann\n- cy\n- bob\n"
    assert _on_main(fleet, "NEWS.md") == NEWS + "ann\nbob\n"
