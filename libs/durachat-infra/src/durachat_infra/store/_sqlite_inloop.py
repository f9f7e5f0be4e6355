"""A SQLite dialect for the store's writers that runs statements on the event loop's thread.

aiosqlite runs every DB-API call on a thread of its own and hands the result back through the
event loop: about four hops per statement. A write transaction holds SQLite's only write lock
(and the store's cross-process gate) across all of them, so under load the time the lock is
held follows the event loop's latency, not the database's: measured at 200 streaming
conversations on two shards, write transactions held the lock ~10 ms on average for well
under 1 ms of SQL, and writers queued for seconds (docs/benchmarks.md, "The write path").

Here the DB-API calls are plain `sqlite3` calls behind SQLAlchemy's asyncio adapter classes, so
a transaction runs from `BEGIN IMMEDIATE` to `COMMIT` without giving the loop a turn and the
lock is held for exactly the SQL's time. That blocks the loop for that time, which is why only
writers use it (short, indexed statements on a local file, run once the gate is held); reads
stay on aiosqlite's threads, which WAL lets run beside a writer.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from sqlalchemy import pool
from sqlalchemy.connectors.asyncio import (
    AsyncAdapt_dbapi_connection,
    AsyncAdapt_dbapi_module,
)
from sqlalchemy.dialects import registry
from sqlalchemy.dialects.sqlite.pysqlite import SQLiteDialect_pysqlite
from sqlalchemy.engine import URL

DRIVER = "durachat_inloop"
"""The driver name in URLs: `sqlite+durachat_inloop:///path`."""


class _Cursor:
    """`sqlite3.Cursor` with the coroutine methods SQLAlchemy's adapter awaits; each one runs
    to completion at once."""

    def __init__(self, cursor: sqlite3.Cursor) -> None:
        self._cursor = cursor

    @property
    def description(self) -> Any:
        return self._cursor.description

    @property
    def rowcount(self) -> int:
        return self._cursor.rowcount

    @property
    def lastrowid(self) -> int | None:
        return self._cursor.lastrowid

    @property
    def arraysize(self) -> int:
        return self._cursor.arraysize

    @arraysize.setter
    def arraysize(self, value: int) -> None:
        self._cursor.arraysize = value

    async def __aenter__(self) -> _Cursor:
        return self

    async def execute(self, operation: str, parameters: Any = ()) -> None:
        self._cursor.execute(operation, parameters)

    async def executemany(self, operation: str, seq_of_parameters: Any) -> None:
        self._cursor.executemany(operation, seq_of_parameters)

    async def fetchone(self) -> Any:
        return self._cursor.fetchone()

    async def fetchmany(self, size: int | None = None) -> list[Any]:
        return self._cursor.fetchmany(self._cursor.arraysize if size is None else size)

    async def fetchall(self) -> list[Any]:
        return self._cursor.fetchall()

    async def close(self) -> None:
        self._cursor.close()


class _Connection:
    """`sqlite3.Connection` with the coroutine methods SQLAlchemy's adapter awaits."""

    def __init__(self, connection: sqlite3.Connection) -> None:
        self.sqlite = connection

    def cursor(self) -> _Cursor:
        return _Cursor(self.sqlite.cursor())

    async def commit(self) -> None:
        self.sqlite.commit()

    async def rollback(self) -> None:
        self.sqlite.rollback()

    async def close(self) -> None:
        self.sqlite.close()


class _AdaptedConnection(AsyncAdapt_dbapi_connection):
    __slots__ = ()

    _connection: Any

    @property
    def isolation_level(self) -> str | None:
        return self._connection.sqlite.isolation_level  # type: ignore[no-any-return]

    @isolation_level.setter
    def isolation_level(self, value: str | None) -> None:
        self._connection.sqlite.isolation_level = value

    def create_function(self, *args: Any, **kwargs: Any) -> None:
        self._connection.sqlite.create_function(*args, **kwargs)


class _DBAPI(AsyncAdapt_dbapi_module):
    def __init__(self) -> None:
        super().__init__(sqlite3, dbapi_module=sqlite3)
        self.paramstyle = "qmark"
        for name in (
            "DatabaseError",
            "Error",
            "IntegrityError",
            "InterfaceError",
            "NotSupportedError",
            "OperationalError",
            "ProgrammingError",
            "sqlite_version",
            "sqlite_version_info",
            "PARSE_COLNAMES",
            "PARSE_DECLTYPES",
            "Binary",
        ):
            setattr(self, name, getattr(sqlite3, name))

    def connect(self, *args: Any, **kwargs: Any) -> _AdaptedConnection:
        # Made and used on the loop's thread; the pool may still close one from a
        # garbage-collection callback elsewhere.
        kwargs["check_same_thread"] = False
        connection: Any = _Connection(sqlite3.connect(*args, **kwargs))
        return _AdaptedConnection(self, connection)


class SQLiteDialectInLoop(SQLiteDialect_pysqlite):
    """`sqlite3` driven synchronously under SQLAlchemy's asyncio extension."""

    driver = DRIVER
    is_async = True
    supports_statement_cache = True

    @classmethod
    def import_dbapi(cls) -> Any:
        return _DBAPI()

    @classmethod
    def get_pool_class(cls, url: URL) -> type[pool.Pool]:
        # The asyncio-aware queue: a caller waiting for a pooled connection awaits it.
        return pool.AsyncAdaptedQueuePool

    def get_driver_connection(self, connection: Any) -> Any:
        return connection._connection.sqlite


registry.register(f"sqlite.{DRIVER}", __name__, "SQLiteDialectInLoop")
