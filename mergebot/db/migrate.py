"""Versioned schema migrations, applied at start-up under an advisory lock.

Migrations are ``migrations/NNNN_name.sql``, applied in order, each in its own transaction together with
its row in ``schema_migrations``. Several processes starting at once serialize on one advisory lock, so each
migration runs exactly once. ``schema.sql`` is the declared current schema; a test proves that a database
built from the migrations equals one built from it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

import psycopg

MIGRATION_LOCK = 7243500  # arbitrary, constant: the advisory lock key for migrations
_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")


@dataclass(frozen=True)
class Migration:
    name: str  # NNNN_name.sql
    sql: str

    @property
    def version(self) -> int:
        """The number its name starts with (``_NAME``)."""
        return int(self.name[:4])


def list_migrations() -> list[Migration]:
    folder = resources.files("mergebot.db").joinpath("migrations")
    found = []
    for entry in folder.iterdir():
        if _NAME.match(entry.name):
            found.append(Migration(entry.name, entry.read_text("utf-8")))
    found.sort(key=lambda x: x.version)
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise RuntimeError(f"migrations must be numbered 1..n without gaps, found {versions}")
    return found


def declared_schema() -> str:
    return resources.files("mergebot.db").joinpath("schema.sql").read_text("utf-8")


def migrate(url: str) -> list[int]:
    """Apply every pending migration; return the versions applied by this call."""
    applied: list[int] = []
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK,))
        try:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                " version integer PRIMARY KEY, name text NOT NULL,"
                " applied_at timestamptz NOT NULL DEFAULT now())"
            )
            done = {r[0] for r in conn.execute("SELECT version FROM schema_migrations")}
            for m in list_migrations():
                if m.version in done:
                    continue
                with conn.transaction():
                    conn.execute(m.sql)
                    conn.execute(
                        "INSERT INTO schema_migrations (version, name) VALUES (%s, %s)", (m.version, m.name)
                    )
                applied.append(m.version)
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK,))
    return applied
