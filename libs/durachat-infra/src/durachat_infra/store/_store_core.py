"""What every `Store` method stands on: the engine, the SQLite write gate, and connections."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from types import TracebackType
from typing import Self, TypeVar

from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from durachat_infra.store._engine import (
    BEGIN_OPTION,
    begin_when_free,
    connect,
    create_engine,
    install_sqlite_hooks,
    sqlite_writer_engine,
    translate_errors,
)
from durachat_infra.store._gate import WriteGate
from durachat_infra.store.errors import DatabaseUnavailableError

T = TypeVar("T")

_SUPPORTED_DIALECTS = ("sqlite", "postgresql")


class StoreCore:
    """The engine of a `Store`, its lifecycle, and the read and write connections its methods
    run in."""

    def __init__(self, engine: AsyncEngine) -> None:
        """Wrap `engine` (SQLite via aiosqlite or PostgreSQL via asyncpg).

        Prefer `from_url`. An engine passed here must not have opened connections yet, so that
        every SQLite connection gets the store's setup (foreign keys, WAL, busy timeout).

        Raises:
            ValueError: the engine is for another database.
        """
        if engine.dialect.name not in _SUPPORTED_DIALECTS:
            raise ValueError(f"unsupported database {engine.dialect.name!r}")
        install_sqlite_hooks(engine)
        self._engine = engine
        database = engine.url.database
        sqlite_file = engine.url.get_backend_name() == "sqlite" and bool(database)
        # On SQLite, writers run their statements on the loop's thread so that the write lock
        # is held only for the SQL's time (see `_sqlite_inloop`); reads stay on `engine`.
        self._writer_engine = sqlite_writer_engine(engine) if sqlite_file else engine
        # Writers take SQLite's write lock when they begin (see `_engine._on_begin`).
        self._writer = self._writer_engine.execution_options(**{BEGIN_OPTION: "IMMEDIATE"})
        self._gate = WriteGate(Path(database).resolve() if sqlite_file and database else None)

    @classmethod
    def from_url(cls, url: str, *, echo: bool = False) -> Self:
        """Create a store for a database URL.

        Args:
            url: `sqlite:///path` or `postgresql://user:pass@host/db`; the async drivers
                (`+aiosqlite`, `+asyncpg`) are filled in when missing.
            echo: log every SQL statement.

        Raises:
            ValueError: unsupported URL, or in-memory SQLite.
        """
        return cls(create_engine(url, echo=echo))

    @property
    def engine(self) -> AsyncEngine:
        """The underlying engine."""
        return self._engine

    async def close(self) -> None:
        """Close every pooled connection. The store must not be used afterwards."""
        await self._engine.dispose()
        if self._writer_engine is not self._engine:
            await self._writer_engine.dispose()
        self._gate.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    @contextlib.asynccontextmanager
    async def _read(self, action: str) -> AsyncIterator[AsyncConnection]:
        async with connect(self._engine, action) as conn:
            with translate_errors(action):
                yield conn

    async def _run_lookup(self, action: str, work: Callable[[AsyncConnection], Awaitable[T]]) -> T:
        """`_read` for one small indexed read on a hot path. On SQLite it runs on the event
        loop's thread, as writes do (`_sqlite_inloop`): the read takes less time than a reader
        thread's hops (0.2 against 0.7 ms for a conversation's lookup, docs/benchmarks.md). WAL
        lets it run beside a writer; should SQLite still answer busy, the read is made again on
        a reader thread, which waits for the busy timeout."""
        if self._writer_engine is not self._engine:
            try:
                async with connect(self._writer_engine, action) as conn:
                    return await work(conn)
            except (OperationalError, DatabaseUnavailableError) as exc:
                # Busy when connecting (`DatabaseUnavailableError`) or when reading.
                if "locked" not in str(exc).lower():
                    with translate_errors(action):
                        raise
        async with self._read(action) as conn:
            return await work(conn)

    @contextlib.asynccontextmanager
    async def _write(self, action: str) -> AsyncIterator[AsyncConnection]:
        async with self._gate.hold(), self._unfenced(action) as conn:
            yield conn

    async def _run_write(self, action: str, work: Callable[[AsyncConnection], Awaitable[T]]) -> T:
        """`_write` for statements only, queued to share a turn of the write lock."""

        async def run() -> T:
            async with self._unfenced(action) as conn:
                return await work(conn)

        return await self._gate.run(run)

    @contextlib.asynccontextmanager
    async def _unfenced(self, action: str) -> AsyncIterator[AsyncConnection]:
        async with connect(self._writer, action) as conn:
            with translate_errors(action):
                await begin_when_free(conn)
                yield conn
                await conn.commit()
