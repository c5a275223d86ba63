"""Connecting: which server (external URL or the embedded one), migrations, and the connection pool.

Through a transaction pooler (``MERGEBOT_DATABASE_URL`` names PgBouncer in ``pool_mode=transaction`` and
``MERGEBOT_DATABASE_DIRECT_URL`` the server itself): migrations, the queue's leadership and LISTEN use the direct
URL, because each needs one session of its own; the pools prepare no statements (a pooled session may be another
server connection at the next transaction) and pass no startup options (PgBouncer 1.18 refuses ``options``), so
the settings they carried are set on the app role instead (``mergebot.db.roles.pool_settings``)."""

from __future__ import annotations

from typing import Any

from psycopg_pool import AsyncConnectionPool

from mergebot.db.embedded import start_embedded
from mergebot.db.migrate import migrate
from mergebot.settings import Settings


def resolve_url(settings: Settings) -> str:
    """The server to use: MERGEBOT_DATABASE_URL, or the embedded one in the data directory (started now)."""
    return settings.database_url or start_embedded(settings.data_dir)


def direct_url(settings: Settings, url: str) -> str:
    """The server itself for ``url`` (the resolved database URL): MERGEBOT_DATABASE_DIRECT_URL, else ``url``."""
    return settings.database_direct_url if settings.pooled else url


def prepare(settings: Settings) -> str:
    """Resolve the server and bring its schema up to date (on the direct URL). Returns the URL."""
    url = resolve_url(settings)
    migrate(direct_url(settings, url))
    return url


async def open_pool(url: str, settings: Settings, *, statement_timeout_ms: int | None = None,
                    max_size: int | None = None, options: str = "") -> AsyncConnectionPool[Any]:
    """An autocommit pool. With a statement timeout, every query on it is bounded (agent-driven work).

    ``options`` are more server options for each connection (``-c role=...`` from ``mergebot.db.roles``).
    Through a transaction pooler (``settings.pooled``) statements are not prepared and no options are sent:
    the statement timeout is then the role's (``roles.pool_settings``)."""
    kwargs: dict[str, Any] = {"autocommit": True, "prepare_threshold": None if settings.pooled else 0}
    opts = [options] if options else []
    if statement_timeout_ms:
        opts.append(f"-c statement_timeout={int(statement_timeout_ms)}")
    if opts and not settings.pooled:
        kwargs["options"] = " ".join(opts)
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        url, min_size=settings.pool_min_size, max_size=max_size or settings.pool_max_size,
        kwargs=kwargs, open=False, timeout=10.0)
    await pool.open(wait=True, timeout=30.0)
    return pool
