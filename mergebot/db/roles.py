"""The role request handling runs as: it may read and write rows as ``grants.sql`` lists, and nothing else.

The schema's owner (the URL's user) applies the migrations; the API, the merge queue, the in-process verifier
workers and the recovery loop then connect as ``database_app_role``, a login role that owns nothing: it cannot
change the schema, drop or disable a trigger, truncate a table, rewrite the audit log or a landed row, or read
another database's tables. ``app_connection`` creates the role when the owner may (the embedded server's
superuser may), grants it the listed rights under the migration lock, and says how the pool will connect:

* ``login``: as the role itself (the embedded server, or any server whose authentication lets it in);
* ``set role``: as the owner, with ``role`` set for the session (a server that asks the role for a password
  the bot does not have). This keeps our own queries inside the grants, but a session could ``SET ROLE`` back;
* ``owner``: the role could not be created or granted (an owner without CREATEROLE, or the setting is empty).
  Everything works, with the owner's rights; start-up logs a warning.

Through a transaction pooler (``pooled_url``), the pool logs in as the role through the pooler (PgBouncer needs
the role in its ``auth_file``) and its statement timeout is the role's own setting in this database
(``pool_settings``: PgBouncer 1.18 takes no ``options``); ``set role`` cannot pass the pooler, so a role that
cannot log in through it leaves the pool running as the owner, with a warning. LISTEN and the queue's leadership
still connect to the server itself (``direct``).
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from importlib import resources
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from mergebot.db.migrate import MIGRATION_LOCK

log = logging.getLogger("mergebot.db")


@dataclass(frozen=True)
class AppConnection:
    url: str  # what the pool connects with
    how: str  # "login", "set role" or "owner"
    role: str | None  # the role the pool's sessions run as (None: the owner)
    options: str = ""  # extra server options for the pool's connections ("-c role=..." for "set role")
    direct: str = ""  # the server itself, for LISTEN and the queue's leadership (empty: ``url``)

    @property
    def direct_url(self) -> str:
        return self.direct or self.url


def grants_sql() -> str:
    return resources.files("mergebot.db").joinpath("grants.sql").read_text("utf-8")


def _may_create_roles(conn: psycopg.Connection) -> bool:
    row = conn.execute("SELECT rolsuper OR rolcreaterole FROM pg_roles WHERE rolname = current_user").fetchone()
    return bool(row and row[0])


def _role_exists(conn: psycopg.Connection, role: str) -> bool:
    return conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone() is not None


def ensure_role(owner_url: str, role: str) -> bool:
    """Create ``role`` if needed and grant it exactly ``grants.sql``. False when the owner cannot."""
    with psycopg.connect(owner_url, autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK,))  # concurrent GRANTs on one table clash
        try:
            if not _role_exists(conn, role):
                if not _may_create_roles(conn):
                    return False
                # another database on this server may create it at the same moment
                with contextlib.suppress(psycopg.errors.DuplicateObject, psycopg.errors.UniqueViolation):
                    conn.execute(sql.SQL(
                        "CREATE ROLE {} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS"
                    ).format(sql.Identifier(role)))
            with conn.transaction():
                conn.execute(sql.SQL(grants_sql()).format(role=sql.Identifier(role)))
            return True
        except psycopg.errors.InsufficientPrivilege as e:
            log.warning("could not grant %s its rights (%s)", role, e)
            return False
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK,))


def _as_role(owner_url: str, role: str) -> str:
    params: dict[str, Any] = dict(conninfo_to_dict(owner_url))
    params["user"] = role
    params.pop("password", None)
    return make_conninfo("", **params)


def _connects(url: str, options: str = "") -> bool:
    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=10, options=options or None) as conn:
            conn.execute("SELECT 1")
        return True
    except psycopg.OperationalError:
        return False


def app_connection(owner_url: str, role: str, pooled_url: str | None = None, *,
                   statement_timeout_ms: int = 5000) -> AppConnection:
    """How request handling connects: as ``role`` when it can, else as the owner (see the module's note).
    ``owner_url`` is the server itself; ``pooled_url``, the owner's way in through a transaction pooler, whose
    sessions get ``statement_timeout_ms`` from the role (set before the pooler opens any server connection for
    it: a server connection keeps the settings it logged in with)."""
    direct = _app_connection(owner_url, role)
    if pooled_url is None or pooled_url == owner_url:
        return direct
    if direct.how == "login":
        pool_settings(owner_url, role, statement_timeout_ms=statement_timeout_ms)
        login = _as_role(pooled_url, role)
        if _connects(login):
            return AppConnection(login, "login", role, direct=direct.url)
        log.warning("the pool runs as the database owner through the pooler: it did not let %s log in (add the "
                    "role to PgBouncer's auth_file)", role)
    elif direct.how == "set role":
        log.warning("the pool runs as the database owner through the pooler: %s logs in only by SET ROLE, which "
                    "cannot pass a transaction pooler", role)
    return AppConnection(pooled_url, "owner", None, direct=direct.url)  # "set role" and "owner" both use owner_url


def pool_settings(owner_url: str, role: str, *, statement_timeout_ms: int) -> None:
    """What a pooled session cannot be told at login, set on ``role`` in this database: its statement timeout."""
    with psycopg.connect(owner_url, autocommit=True) as conn:
        dbname = conn.info.dbname
        conn.execute(sql.SQL("ALTER ROLE {} IN DATABASE {} SET statement_timeout = {}").format(
            sql.Identifier(role), sql.Identifier(dbname), sql.Literal(f"{int(statement_timeout_ms)}ms")))


def _app_connection(owner_url: str, role: str) -> AppConnection:
    if not role:
        return AppConnection(owner_url, "owner", None)
    if not ensure_role(owner_url, role):
        log.warning("request handling runs as the database owner: it could not create or grant the role %s "
                    "(give the owner CREATEROLE, or create the role and rerun)", role)
        return AppConnection(owner_url, "owner", None)
    login = _as_role(owner_url, role)
    if _connects(login):
        return AppConnection(login, "login", role)
    options = f"-c role={role}"
    if _connects(owner_url, options):
        log.warning("request handling runs as %s by SET ROLE: the server did not let %s log in without a "
                    "password", role, role)
        return AppConnection(owner_url, "set role", role, options)
    log.warning("request handling runs as the database owner: neither logging in as %s nor SET ROLE worked", role)
    return AppConnection(owner_url, "owner", None)
