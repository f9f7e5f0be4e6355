"""Fixtures of the store suite, the conformance suite of the store port.

Tests of the port's contract take `store` or `backend` and run on every backend: the in-memory
adapter, SQLite and PostgreSQL. Tests of what only the SQL adapter has (migrations, URLs, driver
errors, the engine) take `databases` or a URL fixture and run on SQLite and PostgreSQL.

Fixtures:

* `postgres_server` (session, root conftest): the PostgreSQL server of the session.
* `sqlite_databases`, `postgres_databases` (session): makers of fresh databases of one backend
  (`support.databases`): `url = await databases.create(migrated=True)`, then
  `await databases.drop(url)`.
* `databases` (parametrized `sqlite` / `postgres`): one of the two, so a test runs on both.
* `empty_database_url`: URL of a fresh database with no schema (migration tests).
* `database_url`: URL of a fresh database at the newest schema, cloned from a template migrated
  once per session.
* `open_store`: opens more `Store`s (own engine and pool, like another process) on a URL.
* `backend` (parametrized `memory` / `sqlite` / `postgres`): a fresh database of one backend
  (`support.store_backends.StoreBackend`): `backend.open()` opens a store on it, its other
  methods read what the port does not show.
* `store`: a store (`StorePort`) on `backend`.

`postgres_server` depends on nothing local and can move unchanged to the root conftest (with the
`sys.path` line that makes `support` importable).
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

# `tests/` holds the shared `support` package (test directories have no __init__.py). The root
# conftest puts it on sys.path too; doing it here keeps this suite runnable on its own.
_TESTS = str(Path(__file__).resolve().parents[2])
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)

from durachat_infra.store import Store  # noqa: E402
from durachat_infra.store.port import StorePort  # noqa: E402
from support.databases import Databases, PostgresDatabases, SQLiteDatabases  # noqa: E402
from support.postgres import PostgresServer  # noqa: E402
from support.store_backends import MemoryBackend, SQLBackend, StoreBackend  # noqa: E402

BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
PORT_BACKENDS = ["memory", *BACKENDS]


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


@pytest.fixture(params=PORT_BACKENDS)
def port_backend(request: pytest.FixtureRequest) -> tuple[str, Databases | None]:
    """The backend's name and, for SQL, its database maker (fetched here: an async fixture
    cannot fetch another async fixture by name)."""
    if request.param == "memory":
        return "memory", None
    backend_databases: Databases = request.getfixturevalue(f"{request.param}_databases")
    return request.param, backend_databases


@pytest.fixture
async def backend(port_backend: tuple[str, Databases | None]) -> AsyncIterator[StoreBackend]:
    name, databases = port_backend
    if databases is None:
        yield MemoryBackend()
        return
    url = await databases.create(migrated=True)
    sql = SQLBackend(name, url)
    try:
        yield sql
    finally:
        await sql.close()
        await databases.drop(url)


@pytest.fixture
def store(backend: StoreBackend) -> StorePort:
    return backend.open()
