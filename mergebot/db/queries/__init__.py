"""Named queries, loaded once from the ``.sql`` files of this folder: one per store of ``mergebot.db``, named after
the module that runs its queries (``subtasks.sql`` for ``subtasks.py``, ``repos.sql`` for ``repos.py``, ...), and
the read models: ``views.sql`` (the CLI's and the JSON API's read views), ``pages.sql`` (the web pages) and
``metrics.sql`` (what ``/metrics`` reads at scrape time). A query two stores run lives with the store whose rows it
is about (``subtask_get`` in ``subtasks.sql``).

Each file holds its queries under a ``-- name: NAME`` header (procrastinate's layout). Python code asks for
``QUERIES["subtask_claim"]`` and never assembles SQL; a misspelt name fails at import time in tests, not in
production, because ``load_queries`` refuses duplicates and empty bodies. Names are global: one defined in two files
is refused like one defined twice in one. ``QUERY_FILES`` lists the files, and a ``.sql`` file here that it does not
list is refused too, so a new store's file cannot be left out of the load (nor a listed one out of the wheel).
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


QUERY_FILES = ("base.sql", "database.sql", "agents.sql", "subtasks.sql", "repos.sql", "landing.sql", "reverts.sql",
               "jobs.sql", "forge.sql", "waiter.sql", "locks.sql", "views.sql", "pages.sql", "metrics.sql",
               "attest.sql", "admission.sql", "settle.sql", "trace.sql")


def load_queries(files: tuple[str, ...] = QUERY_FILES) -> dict[str, LiteralString]:
    """Every named query of every file; a name defined in two files is refused like one defined twice, and so is a
    ``.sql`` file of this folder that ``files`` does not name."""
    folder = resources.files(__name__)
    unlisted = sorted({f.name for f in folder.iterdir() if f.name.endswith(".sql")} - set(files))
    if unlisted:
        raise ValueError(f"query files not in QUERY_FILES: {', '.join(unlisted)}")
    queries: dict[str, LiteralString] = {}
    for file in files:
        for name, sql in parse_queries(folder.joinpath(file).read_text("utf-8")).items():
            if name in queries:
                raise ValueError(f"query {name!r} is defined twice ({file})")
            queries[name] = sql
    return queries


QUERIES = load_queries()
