"""Request handling runs as a database role with only the rights ``mergebot/db/grants.sql`` lists.

The app's pool (API, queue, in-process workers, recovery) connects as ``mergebot_app``. These tests use that
very pool and try what a bug or an injected statement in request handling might: rewrite the audit log or a
landed row, delete or truncate, change the schema, switch to the owner. Each must be refused by PostgreSQL.
"""

from __future__ import annotations

import re
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient

from mergebot.api import create_app
from mergebot.db.roles import app_connection, grants_sql
from mergebot.settings import Settings


async def _denied(pool: Any, statement: str) -> str:
    async with pool.connection() as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege) as e:
            await conn.execute(statement)
    return str(e.value)


async def _one(pool: Any, statement: str) -> Any:
    async with pool.connection() as conn:
        row = await (await conn.execute(statement)).fetchone()
    return row[0] if row else None


REFUSED = [
    "UPDATE events SET kind = 'forged'",
    "DELETE FROM events",
    "TRUNCATE subtasks CASCADE",
    "DELETE FROM subtasks",
    "DELETE FROM landed",
    "UPDATE landed SET merged_sha = repeat('0', 40)",
    "UPDATE landed SET verifier_result = 'pass'",
    "INSERT INTO subtask_transitions (from_status, to_status) VALUES ('failed', 'landed')",
    "ALTER TABLE subtasks DISABLE TRIGGER ALL",
    "DROP TRIGGER events_append_only ON events",
    "CREATE TABLE smuggled (x int)",
    "DELETE FROM agents",
    "UPDATE schema_migrations SET name = 'x'",
    "SET ROLE postgres",
]


async def test_request_handling_runs_with_only_its_grants(settings: Settings) -> None:
    with TestClient(create_app(settings, run_recovery=False, run_queue=False)) as client:
        app = client.app
        state = app.state  # type: ignore[attr-defined]
        pool = state.services.db.pool
        app_db = state.services.app_db
        assert app_db.how == "login" and app_db.role == "mergebot_app"
        assert await _one(pool, "SELECT current_user") == "mergebot_app"
        assert await _one(pool, "SELECT session_user") == "mergebot_app"  # logged in as it: no way back
        assert await _one(pool, "SHOW statement_timeout") == "5s"
        assert await _one(pool, "SELECT rolsuper OR rolcreaterole OR rolcreatedb OR rolbypassrls FROM pg_roles "
                                "WHERE rolname = current_user") is False
        assert await _one(pool, "SELECT count(*) FROM pg_class WHERE relowner = "
                                "(SELECT oid FROM pg_roles WHERE rolname = current_user)") == 0
        for statement in REFUSED:
            await _denied(pool, statement)
        # what it needs still works: the post-land status, and appending to the audit log
        await _one(pool, "UPDATE landed SET main_status = main_status WHERE false RETURNING 1")
        async with pool.connection() as conn:
            await conn.execute("INSERT INTO events (kind) VALUES ('probe')")
            n = await (await conn.execute("SELECT count(*) FROM events WHERE kind = 'probe'")).fetchone()
        assert n is not None and n[0] == 1


def _granted_tables() -> set[str]:
    text = re.sub(r"--[^\n]*", "", grants_sql())
    names: set[str] = set()
    for m in re.finditer(r"\bON\s+(?!ALL\b|SCHEMA\b)(.+?)\s+(?:TO|FROM)\b", text, re.S | re.I):
        names.update(n.strip() for n in m.group(1).split(","))
    return names


def test_every_table_is_listed_in_the_grants(db_url: str) -> None:
    """A new table (or view) gets no access by accident: it must be listed in grants.sql (and this test says which)."""
    with psycopg.connect(db_url) as conn:
        tables = {r[0] for r in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' "
            "UNION SELECT viewname FROM pg_views WHERE schemaname = 'public'")}
    assert tables, "no tables found"
    assert tables - _granted_tables() == set(), "tables missing from mergebot/db/grants.sql"
    assert _granted_tables() - tables == set(), "grants.sql names tables that do not exist"


def test_the_role_is_optional(db_url: str) -> None:
    """With no role configured the pool runs as the URL's user, and says so."""
    conn = app_connection(db_url, "")
    assert (conn.how, conn.role, conn.url) == ("owner", None, db_url)
    conn = app_connection(db_url, "mergebot_app")
    assert conn.how == "login" and conn.role == "mergebot_app"
    with psycopg.connect(conn.url) as c:
        row = c.execute("SELECT current_user, has_table_privilege('landed', 'DELETE'), "
                        "has_table_privilege('landed', 'INSERT'), "
                        "has_column_privilege('landed', 'main_status', 'UPDATE'), "
                        "has_column_privilege('landed', 'merged_sha', 'UPDATE')").fetchone()
    assert row == ("mergebot_app", False, True, True, False)
