"""Fault injection for end-to-end tests, and direct reads of the SQL store.

* `sqlite_write_lock(path)`: another connection holds SQLite's write lock (`BEGIN EXCLUSIVE`),
  so every writer waits for its busy timeout and fails with "database is locked"; readers go on
  (the store uses WAL).
* `postgres_refusing(server, database)`: the database refuses new connections and its open
  ones are terminated, as if its server were down, without disturbing the other databases of
  the session's server.
* `postgres_table_locked(server, database, table)`: another transaction holds an
  `ACCESS EXCLUSIVE` lock on a table, so every query touching it hangs (there is no statement
  timeout) until the block exits: a database that stops answering rather than refusing.
* `sqlite_writer_idle(path)`: whether no durachat process is writing the SQLite database right
  now (its writers hold the store's write gate, an advisory lock on `<database>.wlock`).
* `sql_rows(url, query, **params)`: rows of a query, on SQLite or PostgreSQL.
* `LogMark`: what a process logged after a point in time.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import signal
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
from sqlalchemy import text
from sqlalchemy.engine import make_url

from durachat_infra.local.cluster import Process
from durachat_infra.store import Store
from support.postgres import PostgresServer
from support.waiting import eventually


def sqlite_path(database_url: str) -> Path:
    """The file of a SQLite database URL."""
    database = make_url(database_url).database
    assert database, database_url
    return Path(database)


@contextlib.asynccontextmanager
async def sqlite_write_lock(path: Path) -> AsyncIterator[None]:
    """Hold the write lock of the SQLite database at `path` until the block exits."""
    conn = await asyncio.to_thread(
        sqlite3.connect, str(path), timeout=30, isolation_level=None, check_same_thread=False
    )
    try:
        # Waits (up to 30 s, off the event loop) for a writer that holds the lock right now.
        await asyncio.to_thread(conn.execute, "BEGIN EXCLUSIVE")
        try:
            yield
        finally:
            await asyncio.to_thread(conn.execute, "ROLLBACK")
    finally:
        await asyncio.to_thread(conn.close)


def sqlite_writer_idle(path: Path) -> bool:
    """Whether the store's write gate of the SQLite database at `path` is free right now."""
    fd = os.open(path.with_name(path.name + ".wlock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(fd, fcntl.LOCK_UN)
        return True
    finally:
        os.close(fd)


async def _admin(server: PostgresServer, sql: str, *args: Any) -> None:
    conn = await asyncpg.connect(server.admin_url)
    try:
        await conn.execute(sql, *args)
    finally:
        await conn.close()


@contextlib.asynccontextmanager
async def postgres_refusing(server: PostgresServer, database: str) -> AsyncIterator[None]:
    """Make `database` unavailable until the block exits: new connections are refused and the
    open ones (the cluster's pooled connections) are terminated."""
    await _admin(server, f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS false')
    try:
        await _admin(
            server,
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = $1 AND pid <> pg_backend_pid()",
            database,
        )
        yield
    finally:
        await _admin(server, f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS true')


@contextlib.asynccontextmanager
async def postgres_table_locked(
    server: PostgresServer, database: str, table: str
) -> AsyncIterator[None]:
    """Lock `table` of `database` against every other session until the block exits."""
    conn = await asyncpg.connect(server.url(database))
    try:
        transaction = conn.transaction()
        await transaction.start()
        try:
            await conn.execute(f'LOCK TABLE "{table}" IN ACCESS EXCLUSIVE MODE')
            yield
        finally:
            await transaction.rollback()
    finally:
        await conn.close()


async def sql_rows(database_url: str, query: str, **params: Any) -> list[Any]:
    """Every row of `query` (SQLAlchemy `text`, `:name` parameters) on the database."""
    store = Store.from_url(database_url)
    try:
        async with store.engine.connect() as conn:
            return list((await conn.execute(text(query), params)).all())
    finally:
        await store.close()


class LogMark:
    """The end of a process's log file now; `since()` is what it logged after that."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = path.stat().st_size if path.exists() else 0

    def since(self) -> str:
        """Text logged after the mark."""
        with open(self.path, "rb") as log:
            log.seek(self.offset)
            return log.read().decode(errors="replace")


async def stop_between_writes(process: Process, database_url: str) -> None:
    """SIGSTOP a shard at a moment it is not writing SQLite: one stopped inside a write
    transaction would hold SQLite's only write lock, and every other shard's writes with it,
    until it resumes (an inherent SQLite limit, not what these tests are about)."""
    database = sqlite_path(database_url)

    async def stopped_idle() -> bool:
        os.kill(process.pid, signal.SIGSTOP)
        if await asyncio.to_thread(sqlite_writer_idle, database):
            return True
        os.kill(process.pid, signal.SIGCONT)
        return False

    await eventually(stopped_idle, timeout=10, interval=0.05)
