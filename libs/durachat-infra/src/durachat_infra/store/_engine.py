"""Engines for the store: URL normalisation, per-connection SQLite setup, error translation."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
from collections.abc import AsyncIterator, Iterator
from typing import Any, Final

from sqlalchemy import Insert, event
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, OperationalError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import ConnectionPoolEntry

from durachat_infra.store import _sqlite_inloop
from durachat_infra.store.errors import DatabaseUnavailableError, StoreError

logger = logging.getLogger(__name__)

SQLITE_BUSY_TIMEOUT_MS: Final = 5000
"""How long a SQLite connection waits for another writer before "database is locked"."""

POSTGRES_CONNECT_TIMEOUT_S: Final = 10
"""asyncpg's default (60 s) would hide an unreachable database for a minute."""

BEGIN_OPTION: Final = "durachat_sqlite_begin"
"""Execution option naming the SQLite `BEGIN` variant (`"IMMEDIATE"` for writers)."""

_DRIVERS: Final = {
    "sqlite": "sqlite+aiosqlite",
    "sqlite+aiosqlite": "sqlite+aiosqlite",
    "postgresql": "postgresql+asyncpg",
    "postgres": "postgresql+asyncpg",
    "postgresql+asyncpg": "postgresql+asyncpg",
}
# SQLSTATE classes meaning "the server or the connection is the problem, try again":
# 08 connection exception, 53 insufficient resources, 57P operator intervention (shutdown,
# cannot connect now), 40001/40P01 serialization failure and deadlock.
_UNAVAILABLE_SQLSTATE_PREFIXES: Final = ("08", "53", "57P", "40001", "40P01")
_SQLITE_UNAVAILABLE: Final = (
    "database is locked",
    "database table is locked",
    "unable to open database file",
    "disk i/o error",
)


def normalize_url(url: str | URL) -> URL:
    """Return `url` with the async driver the store uses.

    Accepts `sqlite:///path`, `sqlite+aiosqlite:///path`, `postgresql://...`, `postgres://...`
    and `postgresql+asyncpg://...`.

    Raises:
        ValueError: another database or driver, or an in-memory SQLite database (each pooled
            connection would see its own empty database).
    """
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise ValueError(f"not a database URL: {url!r}") from exc
    driver = _DRIVERS.get(parsed.drivername)
    if driver is None:
        raise ValueError(
            f"unsupported database URL scheme {parsed.drivername!r}: "
            "use sqlite[+aiosqlite]:///path or postgresql[+asyncpg]://..."
        )
    parsed = parsed.set(drivername=driver)
    if parsed.get_backend_name() == "sqlite" and parsed.database in (None, "", ":memory:"):
        raise ValueError("in-memory SQLite is not supported: use a file path (a temp file)")
    return parsed


def create_engine(url: str | URL, *, echo: bool = False) -> AsyncEngine:
    """Create an engine for `url` configured the way the store needs it.

    SQLite connections get foreign keys, WAL, `synchronous=NORMAL` (durable across process
    crashes; a power loss may drop the last commits but never corrupts), a busy timeout, and
    transactions started by SQLAlchemy (`BEGIN`, or `BEGIN IMMEDIATE` under `BEGIN_OPTION`).
    PostgreSQL connections are pre-pinged so a restarted server does not fail the first query.
    """
    parsed = normalize_url(url)
    if parsed.get_backend_name() == "sqlite":
        engine = create_async_engine(parsed, echo=echo)
        install_sqlite_hooks(engine)
        return engine
    return create_async_engine(
        parsed,
        echo=echo,
        pool_pre_ping=True,
        connect_args={"timeout": POSTGRES_CONNECT_TIMEOUT_S},
    )


def sqlite_writer_engine(engine: AsyncEngine) -> AsyncEngine:
    """An engine on the same SQLite file as `engine` whose statements run on the event loop's
    thread (`_sqlite_inloop`), with the store's per-connection setup, for writers."""
    url = engine.url.set(drivername=f"sqlite+{_sqlite_inloop.DRIVER}")
    writer = create_async_engine(url, echo=engine.echo)
    sync_engine = writer.sync_engine
    event.listen(sync_engine, "connect", _on_connect_in_loop)
    event.listen(sync_engine, "begin", _on_begin)
    return writer


def _on_connect_in_loop(dbapi_connection: Any, _record: ConnectionPoolEntry) -> None:
    # As `_on_connect`, for connections whose statements run on the event loop's thread: a
    # statement that waited for the lock inside SQLite would stop the loop, so these fail at
    # once instead (`begin_when_free` waits without blocking). The journal mode is left alone:
    # WAL is a property of the file, set by the migrations and the readers.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA busy_timeout = 0")
        cursor.execute("PRAGMA synchronous = NORMAL")
        cursor.execute("PRAGMA foreign_keys = ON")
    finally:
        cursor.close()


async def begin_when_free(conn: AsyncConnection) -> None:
    """Begin a transaction on `conn`; on a connection that does not wait for SQLite's lock
    itself (`sqlite_writer_engine`), wait for it here, up to the busy timeout, without
    blocking the event loop. Another process of the cluster never holds the lock (the store's
    gate orders them); this is for outside writers (a backup, an operator's shell)."""
    if conn.dialect.driver != _sqlite_inloop.DRIVER:
        await conn.begin()
        return
    loop = asyncio.get_running_loop()
    deadline = loop.time() + SQLITE_BUSY_TIMEOUT_MS / 1000
    delay = 0.002
    while True:
        try:
            await conn.begin()
            return
        except OperationalError as exc:
            if "locked" not in str(exc).lower() or loop.time() + delay > deadline:
                raise
        await conn.rollback()
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.05)


def install_sqlite_hooks(engine: AsyncEngine) -> None:
    """Install the per-connection SQLite setup on `engine` (idempotent; no-op for PostgreSQL).

    Only connections opened after this call are configured, so call it before first use.
    """
    sync_engine = engine.sync_engine
    if sync_engine.dialect.name != "sqlite" or event.contains(sync_engine, "connect", _on_connect):
        return
    event.listen(sync_engine, "connect", _on_connect)
    event.listen(sync_engine, "begin", _on_begin)


def _on_connect(dbapi_connection: Any, _record: ConnectionPoolEntry) -> None:
    # SQLAlchemy's documented recipe: stop the driver from issuing BEGIN itself, so that every
    # transaction (DDL included) is begun by `_on_begin`.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute("PRAGMA synchronous = NORMAL")
        cursor.execute("PRAGMA foreign_keys = ON")
    finally:
        cursor.close()


def _on_begin(conn: Connection) -> None:
    # A writer that began with a plain (deferred) BEGIN would read first and then need to upgrade
    # its lock; two such writers deadlock and one fails at once, without waiting for the busy
    # timeout. BEGIN IMMEDIATE takes the write lock up front, so writers queue instead.
    if conn.get_execution_options().get(BEGIN_OPTION) == "IMMEDIATE":
        conn.exec_driver_sql("BEGIN IMMEDIATE")
    else:
        conn.exec_driver_sql("BEGIN")


def insert_new(conn: AsyncConnection, table: Any, unique: list[str], **values: Any) -> Insert:
    """Build `INSERT ... ON CONFLICT (unique) DO NOTHING` for the connection's database.

    Concurrent inserters of the same key do not fail: PostgreSQL makes the second wait for the
    first and then skip the row. Add `.returning(...)` to learn whether the row was inserted.
    """
    return insert_new_for(conn.dialect.name, table, unique, **values)


def insert_new_for(dialect: str, table: Any, unique: list[str], **values: Any) -> Insert:
    """`insert_new` for the database named `dialect` (`postgresql` or `sqlite`), for
    statements built once, before any connection."""
    if dialect == "postgresql":
        return (
            postgresql.insert(table).values(**values).on_conflict_do_nothing(index_elements=unique)
        )
    return sqlite.insert(table).values(**values).on_conflict_do_nothing(index_elements=unique)


def is_unavailable(exc: BaseException) -> bool:
    """Tell whether `exc` means the database is unreachable or busy rather than the request bad."""
    if isinstance(exc, OSError | TimeoutError):
        return True
    if isinstance(exc, DBAPIError):
        if exc.connection_invalidated:
            return True
        exc = exc.orig if exc.orig is not None else exc
    if isinstance(exc, sqlite3.Error):
        message = str(exc).lower()
        return isinstance(exc, sqlite3.OperationalError) and any(
            fragment in message for fragment in _SQLITE_UNAVAILABLE
        )
    # asyncpg errors (raw, or as wrapped by SQLAlchemy) carry the server's SQLSTATE.
    sqlstate = getattr(exc, "sqlstate", None)
    return isinstance(sqlstate, str) and sqlstate.startswith(_UNAVAILABLE_SQLSTATE_PREFIXES)


@contextlib.contextmanager
def translate_errors(action: str) -> Iterator[None]:
    """Map database exceptions raised inside the block onto the store's errors.

    Only wrap code that talks to the database: `OSError` is taken to mean a lost connection.
    """
    try:
        yield
    except StoreError:
        raise
    except (SQLAlchemyError, OSError, TimeoutError) as exc:
        if is_unavailable(exc):
            raise DatabaseUnavailableError(f"{action}: database unavailable: {exc}") from exc
        raise StoreError(f"{action}: {exc}") from exc


@contextlib.asynccontextmanager
async def connect(engine: AsyncEngine, action: str) -> AsyncIterator[AsyncConnection]:
    """Check a connection out of `engine`; any failure to get one is `DatabaseUnavailableError`.

    The connection is closed (rolling back anything uncommitted) when the block exits.
    """
    try:
        conn = await engine.connect()
    except Exception as exc:
        # asyncpg raises its own exceptions (bad password, missing database, server starting)
        # unwrapped at connect time; whatever the cause, there is no database to talk to.
        raise DatabaseUnavailableError(f"{action}: cannot connect to the database: {exc}") from exc
    try:
        yield conn
    finally:
        await _close_quietly(conn)


async def _close_quietly(conn: AsyncConnection) -> None:
    # Closing rolls back an open transaction. If the connection is already dead that fails too;
    # the pool discards the connection, and the exception that ended the block (if any) is the one
    # worth propagating, so a failure here must not replace it.
    try:
        await conn.close()
    except (SQLAlchemyError, OSError):
        logger.warning("discarding a database connection that failed to close", exc_info=True)
