"""Fixtures of the SQL store suite: every test runs on SQLite and on PostgreSQL.

Fixtures:

* `postgres_server` (session): the PostgreSQL server of the session, from
  `support.postgres.postgres_for_tests()` (a throwaway local server, or the one named by
  `DURACHAT_TEST_POSTGRES_URL`); tests that use it are skipped if there is none.
* `databases` (parametrized `sqlite` / `postgres`): creates fresh databases of one backend,
  `await databases.create(migrated=True)`, and drops them when the test ends.
* `empty_database_url`: URL of a fresh database with no schema (migration tests).
* `database_url`: URL of a fresh database at the newest schema, cloned from a template migrated
  once per session.
* `store`: a `Store` on `database_url`.
* `open_store`: opens more `Store`s (own engine and pool, like another process) on a URL.

`postgres_server` depends on nothing local and can move unchanged to the root conftest (with the
`sys.path` line that makes `support` importable).
"""

from __future__ import annotations

import contextlib
import sqlite3
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Protocol

import pytest

# `tests/` holds the shared `support` package (test directories have no __init__.py). The root
# conftest puts it on sys.path too; doing it here keeps this suite runnable on its own.
_TESTS = str(Path(__file__).resolve().parents[2])
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)

from durachat_infra.store import Store, migrate  # noqa: E402
from support.postgres import (  # noqa: E402
    PostgresNotAvailableError,
    PostgresServer,
    postgres_for_tests,
)

BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


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


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """The session's PostgreSQL server; skips the test if none can be had."""
    with contextlib.ExitStack() as stack:
        try:
            server = stack.enter_context(postgres_for_tests())
        except PostgresNotAvailableError as exc:
            pytest.skip(f"PostgreSQL is not available: {exc}")
        yield server


@pytest.fixture(scope="session")
def sqlite_databases(tmp_path_factory: pytest.TempPathFactory) -> SQLiteDatabases:
    return SQLiteDatabases(tmp_path_factory.mktemp("sqlite"))


@pytest.fixture(scope="session")
async def postgres_databases(postgres_server: PostgresServer) -> AsyncIterator[PostgresDatabases]:
    databases = PostgresDatabases(postgres_server)
    yield databases
    await databases.close()


@pytest.fixture(params=BACKENDS)
def databases(request: pytest.FixtureRequest) -> Databases:
    backend_databases: Databases = request.getfixturevalue(f"{request.param}_databases")
    return backend_databases


@pytest.fixture
async def empty_database_url(databases: Databases) -> AsyncIterator[str]:
    url = await databases.create(migrated=False)
    yield url
    await databases.drop(url)


@pytest.fixture
async def database_url(databases: Databases) -> AsyncIterator[str]:
    url = await databases.create(migrated=True)
    yield url
    await databases.drop(url)


@pytest.fixture
async def open_store() -> AsyncIterator[Callable[[str], Store]]:
    opened: list[Store] = []

    def open_(url: str) -> Store:
        store = Store.from_url(url)
        opened.append(store)
        return store

    yield open_
    for store in opened:
        await store.close()


@pytest.fixture
def store(database_url: str, open_store: Callable[[str], Store]) -> Store:
    return open_store(database_url)
