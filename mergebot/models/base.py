"""How a record builds itself from a row (``FromRow``) and turns into a JSON answer (``record``).

Part of ``mergebot.models``: plain records, no behaviour beyond building themselves.
"""

from __future__ import annotations

import functools
from dataclasses import fields, is_dataclass
from typing import Any, Self


@functools.cache
def _names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls))


@functools.cache
def _name_set(cls: type) -> frozenset[str]:
    return frozenset(_names(cls))


class FromRow:
    """A record built from a query's row: the row's columns that are fields of the record, the rest ignored."""

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Self:
        names = _name_set(cls)  # type: ignore[arg-type]
        return cls(**{k: v for k, v in row.items() if k in names})


def record(obj: Any) -> dict[str, Any]:
    """A record as a dict for a JSON answer: ``dataclasses.asdict`` without its deep copy of every value (about
    6% of the server's CPU in the seeds' replay; the answer is serialized at once and never changed). A field
    that is a dataclass becomes a dict too; lists and dicts are passed as they are (a dataclass inside one is
    left to the JSON encoder, which encodes dataclasses itself)."""
    cls: type = type(obj)
    out = {}
    for name in _names(cls):
        value = getattr(obj, name)
        out[name] = record(value) if is_dataclass(value) and not isinstance(value, type) else value
    return out
