"""The words every sentence shares: short commit ids, counted nouns, lists cut to length.

Part of ``mergebot.messages``: its rules hold here.
"""

from __future__ import annotations

from collections.abc import Sequence


def _short(sha: str | None) -> str:
    return (sha or "")[:12]


def _counted(n: int, noun: str) -> str:
    """``n`` and the noun, plural unless ``n`` is 1: "1 test", "3 tests"."""
    return f"{n} {noun}{'s' if n != 1 else ''}"


def _shown(items: Sequence[str], most: int) -> str:
    return ", ".join(items[:most]) + (" ..." if len(items) > most else "")
