"""Conflicts the bot merges by union (issue 45), only in the files main says so of: the ones main's ``.gitattributes``
mark ``merge=union`` (``mergebot.git.attributes`` reads them from main's tree, never from the candidate's or the
base's: a candidate cannot mark its own conflicts away) and the ones the repository's ``--union`` globs name.
``mergebot.git.repo.merge_onto`` asks ``resolve`` which of a merge's conflicting files are merged so, and puts them
in the merged tree (``tree_with``); every other conflict stays one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pygit2

from mergebot.git import attributes
from mergebot.rules import touches

ATTRIBUTES_MAX = 100 << 20  # git ignores a larger .gitattributes
REGULAR = (pygit2.enums.FileMode.BLOB, pygit2.enums.FileMode.BLOB_EXECUTABLE)
Stages = dict[int, tuple[int, str]]  # a conflicting path's stages (1: base, 2: ours, 3: theirs): (mode, blob)


@dataclass(frozen=True)
class Union:
    """Which conflicting files the bot merges by union: the ones that the ``.gitattributes`` of ``trusted`` (main:
    its ref, or a commit of it) mark ``merge=union`` (``mergebot.git.attributes``), and the ones ``globs`` name
    (the repository's ``--union`` rule, matched as ``mergebot.rules.touches`` matches). Never the candidate's own
    ``.gitattributes``: main's are read only when a merge conflicts."""

    trusted: str
    globs: tuple[str, ...] = ()

    def marked(self, repo: pygit2.Repository, paths: Sequence[str]) -> set[str]:
        """The ones of ``paths`` this rule merges by union."""
        out = {p for p in paths if self.globs and touches([p], self.globs)}
        rest = [p for p in paths if p not in out]
        if not rest:
            return out
        try:
            tree = repo.revparse_single(self.trusted).peel(pygit2.Tree)
        except (KeyError, ValueError, pygit2.GitError):
            return out  # no main (yet): nothing it says
        texts: dict[str, str | None] = {}
        for path in rest:
            for folder in attributes.folders_of(path):
                if folder not in texts:
                    texts[folder] = _attributes_text(tree, f"{folder}/.gitattributes" if folder else ".gitattributes")
            files = [(f, t) for f in attributes.folders_of(path) if (t := texts[f]) is not None]
            if files and attributes.is_union(files, path):
                out.add(path)
        return out


def _attributes_text(tree: pygit2.Tree, path: str) -> str | None:
    """A ``.gitattributes`` file's text in ``tree``, or None (absent, a folder, a symbolic link: git follows none)."""
    try:
        obj = tree[path]
    except KeyError:
        return None
    if obj.filemode not in REGULAR:
        return None
    blob = obj.peel(pygit2.Blob)
    return None if blob.size > ATTRIBUTES_MAX else blob.data.decode("utf-8", "replace")


def stages_of(fields: Sequence[str]) -> dict[str, Stages]:
    """``git merge-tree -z``'s conflicted file info (``MODE OID STAGE<TAB>PATH`` records, up to an empty one), by
    path."""
    out: dict[str, Stages] = {}
    for record in fields:
        if not record:
            break
        info, _, path = record.partition("\t")
        mode, oid, stage = info.split()
        out.setdefault(path, {})[int(stage)] = (int(mode, 8), oid)
    return out


def resolve(repo: pygit2.Repository, stages: dict[str, Stages],
              union: Union | None) -> tuple[dict[str, tuple[int, str]], list[str]]:
    """The conflicting files ``union`` marks, each merged by union ((mode, blob) by path), and the paths that still
    conflict (when any does, the merge is a conflict and the first part means nothing)."""
    marked = union.marked(repo, sorted(stages)) if union is not None else set()
    blobs: dict[str, tuple[int, str]] = {}
    for path in sorted(marked):
        got = _union_file(repo, path, stages[path])
        if got is not None:
            blobs[path] = got
    return blobs, sorted(set(stages) - set(blobs))


def _union_file(repo: pygit2.Repository, path: str, stages: Stages) -> tuple[int, str] | None:
    """One conflicting file merged by union, as git's ``merge=union`` driver does (both sides' lines of each
    conflicting region, ours first): (mode, blob); None when it is no conflict of contents (one side deleted it,
    a side is not a regular file, a binary file)."""
    if 2 not in stages or 3 not in stages or any(mode not in REGULAR for mode, _ in stages.values()):
        return None

    def tree_of(stage: int) -> pygit2.Oid:
        index = pygit2.Index()
        if stage in stages:
            mode, blob = stages[stage]
            index.add(pygit2.IndexEntry(path, pygit2.Oid(hex=blob), pygit2.enums.FileMode(mode)))
        return index.write_tree(repo)

    index = repo.merge_trees(tree_of(1), tree_of(2), tree_of(3), favor=pygit2.enums.MergeFavor.UNION,
                             flags=pygit2.enums.MergeFlag(0))
    if index.conflicts is not None or path not in index:
        return None
    entry = index[path]
    return int(entry.mode), str(entry.id)


def tree_with(repo: pygit2.Repository, tree: pygit2.Oid, blobs: dict[str, tuple[int, str]]) -> pygit2.Oid:
    """``tree`` with each of ``blobs`` at its path (a merge's conflicting files, resolved)."""
    if not blobs:
        return tree
    index = pygit2.Index()
    index.read_tree(repo[tree].peel(pygit2.Tree))
    for path, (mode, blob) in blobs.items():
        index.add(pygit2.IndexEntry(path, pygit2.Oid(hex=blob), pygit2.enums.FileMode(mode)))
    return index.write_tree(repo)
