"""Error translation at the boundary, URL handling and the public surface."""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import durachat_infra.store
from durachat_infra.store import (
    ConversationKey,
    DatabaseUnavailableError,
    FencedError,
    Store,
    StoreError,
    UnknownTenantError,
    migrate,
)

if TYPE_CHECKING:
    from support.databases import PostgresDatabases

KEY = ConversationKey("default", "agent", "c")


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port  # closed again: connections are refused


async def test_a_postgres_url_on_a_closed_port_is_unavailable() -> None:
    url = f"postgresql://durachat@127.0.0.1:{closed_port()}/durachat"
    async with Store.from_url(url) as store:
        with pytest.raises(DatabaseUnavailableError) as raised:
            await store.find_conversation(KEY)
    assert isinstance(raised.value.__cause__, OSError)

    with pytest.raises(DatabaseUnavailableError):
        await migrate(url)


async def test_an_unopenable_sqlite_file_is_unavailable(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'missing-dir' / 'store.db'}"
    async with Store.from_url(url) as store:
        with pytest.raises(DatabaseUnavailableError) as raised:
            await store.find_conversation(KEY)
    assert raised.value.__cause__ is not None

    with pytest.raises(DatabaseUnavailableError):
        await migrate(url)


async def test_a_missing_schema_is_a_store_error_not_a_driver_error(tmp_path: Path) -> None:
    async with Store.from_url(f"sqlite:///{tmp_path / 'empty.db'}") as store:
        with pytest.raises(StoreError) as raised:
            await store.find_conversation(KEY)
    assert not isinstance(raised.value, DatabaseUnavailableError)
    assert raised.value.__cause__ is not None


@pytest.mark.postgres
async def test_a_connection_killed_mid_transaction_is_unavailable(
    postgres_databases: PostgresDatabases, open_store: Callable[[str], Store]
) -> None:
    url = await postgres_databases.create(migrated=True)
    try:
        store = open_store(url)
        conv = await store.get_or_create_conversation(KEY)

        with pytest.raises(DatabaseUnavailableError):
            async with store.transaction(conv.id, 0) as tx:
                async with store.engine.connect() as admin:
                    await admin.exec_driver_sql(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                        " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                    )
                await tx.save_request_context({"lost": True}, None)

        # The pool replaces the dead connection; the lost write was never applied.
        assert await store.load_request_context(conv.id) == (None, None)
        await store.close()
    finally:
        await postgres_databases.drop(url)


@pytest.mark.parametrize(
    ("url", "driver"),
    [
        ("sqlite:///x.db", "sqlite+aiosqlite"),
        ("sqlite+aiosqlite:///x.db", "sqlite+aiosqlite"),
        ("postgresql://u@h/db", "postgresql+asyncpg"),
        ("postgres://u@h/db", "postgresql+asyncpg"),
        ("postgresql+asyncpg://u@h/db", "postgresql+asyncpg"),
    ],
)
async def test_from_url_fills_in_the_async_driver(url: str, driver: str) -> None:
    store = Store.from_url(url)
    try:
        assert store.engine.url.drivername == driver
    finally:
        await store.close()


@pytest.mark.parametrize(
    "url",
    [
        "not a url",
        "sqlite://",
        "sqlite:///:memory:",
        "mysql://u@h/db",
        "postgresql+psycopg2://u@h/db",
    ],
)
def test_from_url_rejects_unsupported_urls(url: str) -> None:
    with pytest.raises(ValueError):
        Store.from_url(url)


def test_errors_share_one_root() -> None:
    for error in (FencedError, UnknownTenantError, DatabaseUnavailableError):
        assert issubclass(error, StoreError)


def test_public_surface_is_pinned() -> None:
    public = sorted(name for name in vars(durachat_infra.store) if not name.startswith("_"))
    # Submodules imported by name: the errors, the models, the port and its in-memory adapter,
    # the repair of unreadable rows.
    modules = {"errors", "models", "port", "memory", "repair"}
    assert sorted(durachat_infra.store.__all__) == sorted(set(public) - modules)
