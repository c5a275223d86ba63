"""The words every sentence shares: short commit ids, lists cut to length.

Part of ``mergebot.messages``: its rules hold here.
"""

from __future__ import annotations

from collections.abc import Sequence


def _short(sha: str | None) -> str:
    return (sha or "")[:12]


def _shown(items: Sequence[str], most: int) -> str:
    return ", ".join(items[:most]) + (" ..." if len(items) > most else "")
