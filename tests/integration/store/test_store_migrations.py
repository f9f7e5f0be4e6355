"""Migrations: from empty, idempotent, concurrent, matching the models, usable by operators."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import asyncpg
import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, inspect, text
from sqlalchemy.ext.asyncio import AsyncEngine

from durachat_infra import store as store_package
from durachat_infra.store import Store, migrate
from durachat_infra.store._engine import create_engine
from durachat_infra.store._migrate import ADVISORY_LOCK_KEY, alembic_config
from durachat_infra.store.models import Base
from support.waiting import eventually

if TYPE_CHECKING:
    from support.databases import Databases

TABLES = {
    "tenants",
    "conversations",
    "branches",
    "messages",
    "turns",
    "api_keys",
    "signing_keys",
    "webhooks",
}


def head() -> str:
    revision = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert revision is not None
    return revision


async def schema_state(url: str) -> tuple[set[str], str | None, list[str]]:
    """Return (tables, alembic revision, tenant ids) of the database at `url`."""
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            tables = set(await conn.run_sync(lambda c: inspect(c).get_table_names()))
            version = None
            if "alembic_version" in tables:
                version = await conn.scalar(text("SELECT version_num FROM alembic_version"))
            tenants = []
            if "tenants" in tables:
                tenants = list(await conn.scalars(text("SELECT id FROM tenants ORDER BY id")))
            return tables, version, tenants
    finally:
        await engine.dispose()


async def assert_migrated(url: str) -> None:
    tables, version, tenants = await schema_state(url)
    assert tables >= TABLES | {"alembic_version"}
    assert version == head()
    assert tenants == ["default"]


async def test_migrate_creates_the_schema_from_empty(empty_database_url: str) -> None:
    assert (await schema_state(empty_database_url))[0] == set()

    await migrate(empty_database_url)

    await assert_migrated(empty_database_url)


async def test_migrate_twice_changes_nothing(empty_database_url: str) -> None:
    await migrate(empty_database_url)
    await migrate(empty_database_url)

    await assert_migrated(empty_database_url)


async def test_concurrent_migrate_from_tasks(empty_database_url: str) -> None:
    await asyncio.gather(*(migrate(empty_database_url) for _ in range(3)))

    await assert_migrated(empty_database_url)


async def test_concurrent_migrate_from_processes(empty_database_url: str) -> None:
    code = (
        "import asyncio, sys; from durachat_infra.store import migrate; "
        "asyncio.run(migrate(sys.argv[1]))"
    )
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable, "-c", code, empty_database_url, stderr=asyncio.subprocess.PIPE
        )
        for _ in range(3)
    ]
    results = await asyncio.gather(*(proc.communicate() for proc in procs))

    assert [proc.returncode for proc in procs] == [0, 0, 0], [err.decode() for _, err in results]
    await assert_migrated(empty_database_url)


@pytest.mark.postgres
async def test_migrate_waits_for_the_advisory_lock(postgres_databases: Databases) -> None:
    url = await postgres_databases.create(migrated=False)
    try:
        holder = await asyncpg.connect(url)
        try:
            await holder.execute("SELECT pg_advisory_lock($1)", ADVISORY_LOCK_KEY)
            migration = asyncio.create_task(migrate(url))
            await wait_for_lock_waiter(holder, "advisory")

            assert not migration.done()
            assert (await schema_state(url))[0] == set()
            await holder.execute("SELECT pg_advisory_unlock($1)", ADVISORY_LOCK_KEY)
            await migration
        finally:
            await holder.close()
        await assert_migrated(url)
    finally:
        await postgres_databases.drop(url)


async def wait_for_lock_waiter(conn: asyncpg.Connection, locktype: str) -> None:
    """Wait until some session waits for a lock of `locktype`."""
    await eventually(
        lambda: conn.fetchval(
            "SELECT count(*) FROM pg_locks WHERE locktype = $1 AND NOT granted", locktype
        )
    )


async def test_schema_matches_the_models(database_url: str) -> None:
    def diff(conn: Connection) -> list[object]:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        return list(compare_metadata(context, Base.metadata))

    engine = create_engine(database_url)
    try:
        async with engine.connect() as conn:
            assert await conn.run_sync(diff) == []
    finally:
        await engine.dispose()


async def test_downgrade_to_base_and_upgrade_again(database_url: str) -> None:
    await asyncio.to_thread(command.downgrade, alembic_config(database_url), "base")
    assert await schema_state(database_url) == ({"alembic_version"}, None, [])

    await migrate(database_url)

    await assert_migrated(database_url)


async def test_operators_can_migrate_with_the_shipped_alembic_ini(empty_database_url: str) -> None:
    ini = Path(store_package.__file__).with_name("alembic.ini")
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "alembic",
        "-c",
        str(ini),
        "-x",
        f"url={empty_database_url}",
        "upgrade",
        "head",
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await proc.communicate()

    assert proc.returncode == 0, err.decode()
    await assert_migrated(empty_database_url)


async def test_sqlite_connections_get_foreign_keys_wal_and_busy_timeout(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'pragmas.db'}"
    await migrate(url)
    async with Store.from_url(url) as store:
        engine: AsyncEngine = store.engine
        async with engine.connect() as conn:
            pragmas = {
                name: await conn.scalar(text(f"PRAGMA {name}"))
                for name in ("foreign_keys", "journal_mode", "busy_timeout", "synchronous")
            }
    assert pragmas == {
        "foreign_keys": 1,
        "journal_mode": "wal",
        "busy_timeout": 5000,
        "synchronous": 1,  # NORMAL
    }
