"""The plumbing every store shares: named queries on one pool, and the one place database errors are translated.

Rules:
  * A store never builds SQL: it names a query of ``mergebot/db/queries/`` (``QUERIES``) and passes keyword
    parameters. ``Sql.all`` / ``Sql.one`` run one statement on a pooled connection (autocommit); ``Sql.tx``
    gives a ``Tx`` whose statements share one transaction, and ``Tx.savepoint`` undoes only part of it.
  * Every psycopg error leaving a store goes through ``translate``: our triggers' SQLSTATEs, constraint
    violations, timeouts and a lost server become Mergebot errors a caller can act on (and the API answers with
    the right status). Nothing else in the package catches ``psycopg.Error`` to explain it.
  * Stores are composed on one ``Sql`` (``mergebot.db.database.Database``), never derived from each other.
  * What a run produced (a check's result, and every text in it) is made storable before it reaches PostgreSQL,
    which refuses a NUL character in text and JSON and a lone surrogate anywhere: ``verifier.result.storable`` turns
    each into U+FFFD, and it is the one function that does (the runner applies it to what it returns, and
    ``db.jobs`` again to what any worker reports). Text that people typed is not changed behind their back: a NUL
    there is refused (``translate``).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import psycopg
from psycopg import errors as pgerr
from psycopg import pq
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from mergebot.db.queries import QUERIES
from mergebot.errors import Conflict, Invalid, InvalidTransition, MergebotError, Unavailable
from verifier.result import storable as storable  # what a run produced, made storable: the one place

Row = dict[str, Any]

# Our triggers raise with their own SQLSTATEs (see the migrations).
_OUR_CODES: dict[str, tuple[type[MergebotError], dict[str, Any]]] = {
    "MB001": (InvalidTransition, {}),  # subtasks_on_update: a transition the table does not allow
    "MB002": (Conflict, {}),  # events is append-only
    "MB003": (Invalid, {"field": "depends_on"}),  # subtask_deps_acyclic: a dependency cycle
}


def translate(e: psycopg.Error) -> MergebotError:
    """The Mergebot error for a database error. The one place that explains them."""
    if e.sqlstate in _OUR_CODES:
        cls, extra = _OUR_CODES[e.sqlstate]
        return cls(e.diag.message_primary or str(e), **extra)
    constraint = e.diag.constraint_name
    if isinstance(e, pgerr.UniqueViolation):
        return Conflict(f"already exists: {e.diag.message_detail or constraint}", field=_field_of(constraint))
    if isinstance(e, pgerr.ForeignKeyViolation):
        return Invalid(f"refers to something that does not exist: {e.diag.message_detail}",
                       field=_field_of(constraint))
    if isinstance(e, pgerr.CheckViolation):
        return Invalid(f"value not allowed ({constraint})", field=_field_of(constraint))
    if isinstance(e, pgerr.QueryCanceled):
        return Unavailable("the database took too long; nothing was changed, try again")
    if isinstance(e, psycopg.DataError):  # SQLSTATE 22 (and a NUL in text): the caller's value, not ours
        return Invalid(f"a value cannot be stored: {(str(e).splitlines() or [''])[0]}", field="body")
    if isinstance(e, psycopg.OperationalError | psycopg.InterfaceError):
        return Unavailable("the database is unreachable; nothing was changed, try again")
    return MergebotError(f"database error {e.sqlstate}: {str(e).splitlines()[0] if str(e) else ''}")


@contextlib.contextmanager
def translated() -> Iterator[None]:
    """Raise database errors as ``translate`` explains them."""
    try:
        yield
    except psycopg.Error as e:
        raise translate(e) from e


def _field_of(constraint: str | None) -> str:
    # Constraint names follow PostgreSQL's default "<table>_<column>_check/fkey" pattern.
    if not constraint:
        return "body"
    for table in ("subtasks_", "agents_", "groups_", "notes_", "announcements_", "assignments_"):
        if constraint.startswith(table):
            constraint = constraint[len(table):]
            break
    for suffix in ("_check", "_fkey", "_key"):
        if constraint.endswith(suffix):
            return constraint[: -len(suffix)]
    return constraint


def _returns_rows(cur: psycopg.AsyncCursor[Any]) -> bool:
    """``cur.description`` without building its columns: whether the statement returned a result set."""
    res = cur.pgresult
    return res is not None and (res.nfields > 0 or res.status == pq.ExecStatus.TUPLES_OK)


class Tx:
    """The statements of one transaction (``Sql.tx``)."""

    def __init__(self, cur: psycopg.AsyncCursor[Row]) -> None:
        self.cur = cur

    async def all(self, query: str, /, **params: Any) -> list[Row]:
        await self.cur.execute(QUERIES[query], params)
        return await self.cur.fetchall() if _returns_rows(self.cur) else []

    async def one(self, query: str, /, **params: Any) -> Row | None:
        rows = await self.all(query, **params)
        return rows[0] if rows else None

    def savepoint(self) -> contextlib.AbstractAsyncContextManager[Any]:
        """A nested transaction: an error inside undoes only what it did."""
        return self.cur.connection.transaction()


class Sql:
    """Named queries on the pool."""

    def __init__(self, pool: AsyncConnectionPool[Any]) -> None:
        self.pool = pool

    @property
    def url(self) -> str:
        """The pool's connection string, for the few connections that must not come from the pool."""
        return str(self.pool.conninfo)

    async def all(self, query: str, /, **params: Any) -> list[Row]:
        with translated():
            async with self.pool.connection() as conn:
                cur = conn.cursor(row_factory=dict_row)
                await cur.execute(QUERIES[query], params)
                return await cur.fetchall() if _returns_rows(cur) else []

    async def one(self, query: str, /, **params: Any) -> Row | None:
        rows = await self.all(query, **params)
        return rows[0] if rows else None

    async def found(self, query: str, missing: MergebotError, /, **params: Any) -> Row:
        """The one row ``query`` returns; ``missing`` is raised when it returns none."""
        row = await self.one(query, **params)
        if row is None:
            raise missing
        return row

    @contextlib.asynccontextmanager
    async def tx(self) -> AsyncIterator[Tx]:
        with translated():
            async with self.pool.connection() as conn, conn.transaction():
                yield Tx(conn.cursor(row_factory=dict_row))


async def insert_event(q: Sql | Tx, *, actor_id: int | None, kind: str, subtask_id: int | None = None,
                       claim_version: int | None = None, detail: dict[str, Any] | None = None) -> None:
    """Append to the event log (the audit trail every store writes to), alone or inside a transaction."""
    await q.all("event_insert", actor_id=actor_id, kind=kind, subtask_id=subtask_id, claim_version=claim_version,
                detail=Jsonb(detail or {}))
