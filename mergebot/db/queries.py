"""Named queries, loaded once from ``queries.sql`` (the write path and the API), ``views.sql`` (the CLI's and
the JSON API's read views), ``pages.sql`` (the web pages' read model) and ``metrics.sql`` (what ``/metrics``
reads at scrape time).

Each file holds its queries under a ``-- name: NAME`` header (procrastinate's layout). Python code asks for
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


QUERY_FILES = ("queries.sql", "views.sql", "pages.sql", "metrics.sql")


def load_queries() -> dict[str, LiteralString]:
    """Every named query of every file; a name defined in two files is refused like one defined twice."""
    queries: dict[str, LiteralString] = {}
    for file in QUERY_FILES:
        for name, sql in parse_queries(resources.files("mergebot.db").joinpath(file).read_text("utf-8")).items():
            if name in queries:
                raise ValueError(f"query {name!r} is defined twice ({file})")
            queries[name] = sql
    return queries


QUERIES = load_queries()
