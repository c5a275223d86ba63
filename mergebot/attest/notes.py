"""The text of a landed commit's git note under ``refs/notes/mergebot``: one JSON document holding the commit's
signed statements (its landing statement, its test result, and any re-verification since)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

REF = "refs/notes/mergebot"
FORMAT = 1


def text(envelopes: Sequence[dict[str, Any]]) -> str:
    return json.dumps({"mergebot": FORMAT, "statements": list(envelopes)}, sort_keys=True, indent=1) + "\n"


def envelopes(note: str | None) -> list[Any]:
    """The envelopes of a note's text (none for no note, or a note that is no Mergebot document)."""
    if not note:
        return []
    try:
        data = json.loads(note)
    except ValueError:
        return []
    got = data.get("statements") if isinstance(data, dict) else None
    return list(got) if isinstance(got, list) else []
