"""Named queries, loaded once from ``queries.sql``.

The file holds every query under a ``-- name: NAME`` header (procrastinate's layout). Python code asks for
``QUERIES["subtask_claim"]`` and never assembles SQL; a misspelt name fails at import time in tests, not in
production, because ``load_queries`` refuses duplicates and empty bodies.
"""

from __future__ import annotations

import re
from importlib import resources
from typing import LiteralString, cast

_HEADER = re.compile(r"^-- name: ([a-z0-9_]+)\s*$", re.MULTILINE)


def parse_queries(text: str) -> dict[str, LiteralString]:
    """Split a queries file into {name: sql}. Pure; raises ValueError on duplicates or empty bodies."""
    parts = _HEADER.split(text)
    queries: dict[str, LiteralString] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        sql = body.strip()
        if name in queries:
            raise ValueError(f"query {name!r} is defined twice")
        if not sql:
            raise ValueError(f"query {name!r} has no body")
        queries[name] = cast(LiteralString, sql)
    return queries


def load_queries() -> dict[str, LiteralString]:
    return parse_queries(resources.files("mergebot.db").joinpath("queries.sql").read_text("utf-8"))


QUERIES = load_queries()
