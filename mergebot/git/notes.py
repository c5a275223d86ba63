"""Git notes under ``refs/notes/mergebot`` in a bare repository: each landed commit's signed statements, for anyone
with a clone (``git fetch origin refs/notes/mergebot:refs/notes/mergebot``, then ``git notes --ref mergebot show``)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pygit2

from mergebot.attest.notes import REF

BOT = pygit2.Signature("mergebot", "mergebot@localhost")


def write(path: Path, texts: Mapping[str, str]) -> None:
    """Write (or replace) the note of each commit of ``texts``."""
    repo = pygit2.Repository(str(path))
    for sha, text in texts.items():
        repo.create_note(text, BOT, BOT, sha, REF, True)


def read(path: Path, sha: str) -> str | None:
    repo = pygit2.Repository(str(path))
    try:
        return str(repo.lookup_note(sha, REF).message)
    except KeyError:
        return None


def all_notes(path: Path) -> dict[str, str]:
    """Every note of the ref, by the commit it annotates."""
    repo = pygit2.Repository(str(path))
    try:
        repo.references[REF]
    except KeyError:
        return {}
    out: dict[str, str] = {}
    for note in repo.notes(REF):  # type: ignore[call-arg]  # pygit2's stub lacks the ref argument
        out[str(note.annotated_id)] = str(note.message)
    return out
