"""Throwaway databases for the SQL store: fresh per test, empty or at the newest schema.

Migrated databases are copies of a template migrated once per session (a SQLite file copied with
the backup API, a PostgreSQL database cloned with `CREATE DATABASE ... TEMPLATE`), which is much
faster than migrating each one.
"""

from __future__ import annotations

import contextlib
import sqlite3
import uuid
from pathlib import Path
from typing import Protocol

from durachat_infra.store import migrate
from support.postgres import PostgresServer


class Databases(Protocol):
    """Creates and drops throwaway databases of one backend."""

    backend: str

    async def create(self, *, migrated: bool) -> str:
        """Create a fresh database, at the newest schema if `migrated`; return its URL."""
        ...

    async def drop(self, url: str) -> None:
        """Drop a database made by `create`."""
        ...


class SQLiteDatabases:
    """SQLite files in a session temp dir; migrated ones are copies of a migrated template."""

    backend = "sqlite"

    def __init__(self, root: Path) -> None:
        self._root = root
        self._template: Path | None = None

    async def create(self, *, migrated: bool) -> str:
        path = self._root / f"{uuid.uuid4().hex[:12]}.db"
        if migrated:
            if self._template is None:
                template = self._root / "template.db"
                await migrate(f"sqlite:///{template}")
                self._template = template
            # The backup API copies a consistent image whatever the WAL holds.
            with (
                contextlib.closing(sqlite3.connect(self._template)) as src,
                contextlib.closing(sqlite3.connect(path)) as dst,
            ):
                src.backup(dst)
        return f"sqlite:///{path}"

    async def drop(self, url: str) -> None:
        path = Path(url.removeprefix("sqlite:///"))
        for suffix in ("", "-wal", "-shm"):
            path.with_name(path.name + suffix).unlink(missing_ok=True)


class PostgresDatabases:
    """Databases on `PostgresServer`; migrated ones are cloned from a migrated template."""

    backend = "postgres"

    def __init__(self, server: PostgresServer) -> None:
        self._server = server
        self._template: str | None = None

    async def create(self, *, migrated: bool) -> str:
        template = None
        if migrated:
            if self._template is None:
                name = await self._server.create_database(prefix="durachat_template")
                await migrate(self._server.url(name))
                self._template = name
            template = self._template
        return self._server.url(await self._server.create_database(template=template))

    async def drop(self, url: str) -> None:
        await self._server.drop_database(url.rsplit("/", 1)[1])

    async def close(self) -> None:
        if self._template is not None:
            await self._server.drop_database(self._template)
