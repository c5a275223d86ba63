"""What whoever writes a task tree is told when its file is wrong (``mergebot create --file``, the API's tree
upload): which node, which field, and what it must be. ``where`` is the node's place in the file
(``subtasks[2].children[0]``).

Part of ``mergebot.messages``: its rules hold here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

TREE_NOT_A_LIST = "a task tree is a list of subtasks"


def tree_not_parsed(filename: str, error: object) -> str:
    return f"{filename}: not valid YAML/JSON: {error}"


def _must(where: str, what: str) -> str:
    """What a node's place in the file (or one of its fields: ``where.field``) must be."""
    return f"{where} must be {what}"


def node_not_object(where: str) -> str:
    return _must(where, "an object")


def node_unknown_key(where: str, key: object, keys: Iterable[str]) -> str:
    return f"{where}: unknown key {str(key)!r}; a subtask takes {', '.join(keys)}"


def node_needs_text(where: str, field: str) -> str:
    """``field`` is ``key`` or ``title``."""
    return _must(f"{where}.{field}", "a non-empty string")


def node_bad_depends_on(where: str) -> str:
    return _must(f"{where}.depends_on", "a list of keys or ids")


def node_bad_paths(where: str, most: int) -> str:
    return _must(f"{where}.paths", f"a list of at most {most} paths or globs in the repository (relative, like "
                 "src/calc/*.py)")


def node_needs_integer(where: str, field: str) -> str:
    """``field`` is ``priority`` or ``max_attempts``."""
    return _must(f"{where}.{field}", "an integer")


def node_bad_children(where: str) -> str:
    return _must(f"{where}.children", "a list")


def key_twice(key: str) -> str:
    return f"key {key!r} appears twice"


def unknown_key_ref(key: str, ref: str) -> str:
    return f"subtask {key!r} refers to unknown key {ref!r}"


def dependency_cycle(cycle: Iterable[str]) -> str:
    return "dependency cycle: " + " -> ".join(cycle)


# -- a subtask made, or moved by a lead (``mergebot.db.subtasks``) -------------------------------------------------


def idempotency_key_reused(key: str, subtask_id: int) -> str:
    return f"idempotency key {key!r} was used for subtask {subtask_id} with a different title, parent or group"


def unknown_dependencies(missing: Sequence[int]) -> str:
    return f"depends_on names subtasks that do not exist: {list(missing)}"


def cannot_wait_for_children(subtask_id: int, key: str, status: str) -> str:
    return (f"subtask {subtask_id} ({key!r}) is {status}; it cannot wait for new children that have not landed. "
            "Give them another parent.")


def footprint_too_large(subtask_id: int, n: int, most: int) -> str:
    return f"a footprint holds at most {most} paths; subtask {subtask_id} has {n}"


def cannot_cancel(subtask_id: int, status: str) -> str:
    return f"subtask {subtask_id} is {status} and cannot be cancelled"


def nothing_to_retry(subtask_id: int, status: str) -> str:
    return f"subtask {subtask_id} is {status}, not failed; nothing to retry"


# -- a tree file that cannot be read (``mergebot.tree``) --------------------------------------------------------------


def tree_unreadable(path: str, why: object, folder_exists: bool) -> str:
    hint = "" if folder_exists else " (its folder does not exist either)"
    return f"cannot read the task tree {path}: {why}{hint}"


def tree_not_a_list(keys: Sequence[str]) -> str:
    """A file that is neither a list of subtasks nor a mapping with ``subtasks:``; ``keys``: the mapping's, if any."""
    if not keys:
        return TREE_NOT_A_LIST + " (or a mapping with a `subtasks:` list)"
    return (f"{TREE_NOT_A_LIST}, or a mapping with a `subtasks:` list; this file has {', '.join(keys)}"
            + (": did you mean `subtasks:`?" if "tasks" in keys or len(keys) == 1 else ""))


NODE_ACCEPT_VIA_API = ("accept (acceptance tests) is read from a tree file by `mergebot create --file`; through the "
                       "API, attach them to each subtask made: PUT /api/v1/subtasks/ID/acceptance")


def being_landed(subtask_id: int, candidate_id: int) -> str:
    """A lead's cancel refused while a candidate of the subtask is being landed (its intent written, main about to
    move: a matter of milliseconds, or of the reconciler after a crash)."""
    return (f"subtask {subtask_id} cannot be cancelled right now: its candidate {candidate_id} is being landed (main "
            f"moves to it in a moment). Wait for the verdict (`mergebot wait {subtask_id}`): if it landed, revert its "
            f"commit on main with a new subtask; if it did not, cancel subtask {subtask_id} then.")
