"""What a change changes, read from git's objects: the paths between two trees, a candidate's own paths and size
from where it forked off main, its patch id, a file's text at a commit, the largest file a push adds, what a tree
holds at a path, and the conflicting regions of a merge (``conflict_hunks``: the merge is made in memory only).

Read only: nothing here writes an object or moves a ref (``mergebot.git.repo`` does).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Callable, Sequence

import pygit2
from pygit2.enums import DeltaStatus


def changed_paths(repo: pygit2.Repository, old_tree: str | None, new_tree: str) -> list[str]:
    new = repo[new_tree].peel(pygit2.Tree)
    diff = repo[old_tree].peel(pygit2.Tree).diff_to_tree(new) if old_tree else new.diff_to_tree(swap=True)
    return _delta_paths(diff)


def tree_changes(repo: pygit2.Repository, old: str, new: str) -> list[tuple[str, str]]:
    """(path, ``added`` / ``modified`` / ``deleted``) for every file that differs between two commits' trees (a
    rename is a deletion and an addition; a type change, a modification)."""
    diff = repo[old].peel(pygit2.Commit).tree.diff_to_tree(repo[new].peel(pygit2.Commit).tree)
    out: dict[str, str] = {}
    for d in diff.deltas:
        if d.status == DeltaStatus.ADDED:
            out[d.new_file.path] = "added"
        elif d.status == DeltaStatus.DELETED:
            out[d.old_file.path] = "deleted"
        elif d.status == DeltaStatus.RENAMED:
            out[d.old_file.path], out[d.new_file.path] = "deleted", "added"
        else:
            out[d.new_file.path] = "modified"
    return sorted(out.items())


def _delta_paths(diff: pygit2.Diff) -> list[str]:
    paths = set()
    for d in diff.deltas:
        paths.add(d.new_file.path)
        if d.status in (DeltaStatus.RENAMED, DeltaStatus.DELETED):
            paths.add(d.old_file.path)
    return sorted(paths)


def patch_id(repo: pygit2.Repository, main: str, candidate: str) -> str | None:
    """The candidate's change as one id: the patch id of its diff from where it forked off ``main`` (libgit2's, as
    ``git patch-id --stable``: the same change, committed anywhere, has the same id). libgit2 hashes only a binary
    file's header, so the new contents of binary files are mixed in (two different images are two changes).
    None when it changes nothing."""
    fork = repo.merge_base(pygit2.Oid(hex=main), pygit2.Oid(hex=candidate))
    new = repo[candidate].peel(pygit2.Commit).tree
    diff = repo[fork].peel(pygit2.Commit).tree.diff_to_tree(new) if fork else new.diff_to_tree(swap=True)
    if not len(diff):
        return None
    text = str(diff.patchid)
    binary = sorted(f"{p.delta.new_file.path}:{p.delta.new_file.id}" for p in diff
                    if p is not None and p.delta.is_binary)
    if not binary:
        return text
    return hashlib.sha256("\n".join([text, *binary]).encode()).hexdigest()


def patch_id_on(path: str | os.PathLike[str], target_ref: str, candidate: str) -> str | None:
    """``patch_id`` of a pushed commit against the target branch of the bare repository at ``path``; None when it
    changes nothing or cannot be read (no target branch yet, an unknown commit)."""
    try:
        repo = pygit2.Repository(str(path))
        main = repo.references[target_ref].peel(pygit2.Commit).id
        return patch_id(repo, str(main), candidate)
    except (pygit2.GitError, KeyError, ValueError):
        return None


def text_at(repo: pygit2.Repository, commit: str, path: str, limit: int = 2 << 20) -> str | None:
    """A file's text at a commit (UTF-8, replacing what does not decode); None when it is not a file there, or is
    over ``limit`` bytes."""
    try:
        obj = repo[commit].peel(pygit2.Commit).tree[path]
    except KeyError:
        return None
    if obj.type_str != "blob":
        return None
    blob = repo[obj.id].peel(pygit2.Blob)
    return None if blob.size > limit else blob.data.decode("utf-8", "replace")


def own_paths(repo: pygit2.Repository, main: str, candidate: str) -> list[str]:
    """What a candidate changes on its own: from where it forked off ``main`` to its commit."""
    fork = repo.merge_base(pygit2.Oid(hex=main), pygit2.Oid(hex=candidate))
    tree = str(repo[candidate].peel(pygit2.Commit).tree_id)
    return changed_paths(repo, str(repo[fork].peel(pygit2.Commit).tree_id) if fork else None, tree)


def own_change(repo: pygit2.Repository, main: str, candidate: str) -> tuple[list[str], int]:
    """``own_paths``, and the lines the change adds and removes there (its size, for the failure estimate)."""
    fork = repo.merge_base(pygit2.Oid(hex=main), pygit2.Oid(hex=candidate))
    new = repo[candidate].peel(pygit2.Commit).tree
    diff = repo[fork].peel(pygit2.Commit).tree.diff_to_tree(new) if fork else new.diff_to_tree(swap=True)
    stats = diff.stats
    return _delta_paths(diff), stats.insertions + stats.deletions


def commit_paths(repo: pygit2.Repository, old: str, new: str) -> list[str]:
    """The paths that differ between two commits' trees (what main changed between two of its heads)."""
    return changed_paths(repo, str(repo[old].peel(pygit2.Commit).tree_id), str(repo[new].peel(pygit2.Commit).tree_id))


def paths_since(repo: pygit2.Repository, base: str, new_tree: str) -> list[str]:
    """What a tree changes relative to commit ``base`` (a merge's own change on top of its first parent)."""
    return changed_paths(repo, str(repo[base].peel(pygit2.Commit).tree_id), new_tree)


def largest_blob(repo: pygit2.Repository, commits: list[pygit2.Commit]) -> tuple[str, int]:
    """The biggest file a set of commits adds or changes: (path, size)."""
    best = ("", 0)
    for c in commits:
        parent_tree = repo[c.parent_ids[0]].peel(pygit2.Commit).tree if c.parent_ids else None
        diff = parent_tree.diff_to_tree(c.tree) if parent_tree is not None else c.tree.diff_to_tree(swap=True)
        for d in diff.deltas:
            if d.status == DeltaStatus.DELETED or d.new_file.mode == pygit2.enums.FileMode.COMMIT:
                continue
            size = d.new_file.size or repo[d.new_file.id].peel(pygit2.Blob).size
            if size > best[1]:
                best = (d.new_file.path, size)
    return best


def has_path(tree: pygit2.Tree, path: str) -> bool:
    """Whether ``tree`` has anything at ``path``."""
    try:
        tree[path]
    except KeyError:
        return False
    return True


def is_file(tree: pygit2.Tree, path: str) -> bool:
    """Whether ``tree`` has a file (not a folder) at ``path``."""
    try:
        return tree[path].type_str == "blob"
    except KeyError:
        return False


def folder_holds(tree: pygit2.Tree, folder: str, wanted: Callable[[str], bool]) -> bool:
    """Whether ``folder`` of ``tree`` (the root for "") directly holds an entry whose name is ``wanted``."""
    try:
        entries = tree[folder] if folder else tree
    except KeyError:
        return False
    return entries.type_str == "tree" and any(wanted(str(e.name)) for e in entries.peel(pygit2.Tree))


def conflict_hunks(repo: pygit2.Repository, base: str, candidate: str, *, max_files: int = 10, max_hunks: int = 3,
                   max_lines: int = 30, only: Sequence[str] | None = None) -> list[dict[str, object]]:
    """The conflicting regions of a merge, as an agent needs them to resolve it: per path (at most ``max_files``),
    the first ``max_hunks`` regions between git's conflict markers, each cut at ``max_lines`` lines, and the line
    of the merged file each starts at (``lines``: where a forge annotates it). A path that conflicts as a whole
    (deleted on one side, binary) has no hunks, only its path. ``only``: the paths that count (a merge's
    ``conflicts``: not the files it merged by union)."""
    index = repo.merge_commits(base, candidate)
    out: list[dict[str, object]] = []
    keep = None if only is None else set(only)
    conflicts = [c for c in index.conflicts or []
                 if keep is None or next(e.path for e in c if e is not None) in keep]
    for ancestor, ours, theirs in conflicts[:max_files]:
        path = next(e.path for e in (ours, theirs, ancestor) if e is not None)
        hunks: list[tuple[int, str]] = []
        if ours is not None and theirs is not None:
            with contextlib.suppress(pygit2.GitError, UnicodeDecodeError, ValueError):
                text = repo.merge_file_from_index(ancestor, ours, theirs).contents
                hunks = _marked_regions(text, max_hunks, max_lines)
        out.append({"path": path, "hunks": [h for _, h in hunks], "lines": [n for n, _ in hunks],
                    "deleted": "ours" if ours is None else "theirs" if theirs is None else None})
    return out


def _marked_regions(text: str, most: int, max_lines: int) -> list[tuple[int, str]]:
    regions: list[tuple[int, str]] = []
    current: list[str] | None = None
    start = 0
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("<<<<<<<"):
            current, start = [line], number
        elif current is not None:
            current.append(line)
            if line.startswith(">>>>>>>"):
                if len(current) > max_lines:
                    current = [*current[:max_lines - 1], f"... ({len(current) - max_lines + 1} more lines)", line]
                regions.append((start, "\n".join(current)))
                current = None
                if len(regions) >= most:
                    break
    return regions
