"""Alembic environment of the durachat store (async engines, SQLite and PostgreSQL).

Used both by `durachat_infra.store.migrate()` and by operators through
`alembic -c <package>/store/alembic.ini upgrade head`. The database URL comes from, in order:
`Config.attributes["url"]` (programmatic), `-x url=...`, the `DATABASE_URL` environment variable,
`sqlalchemy.url` in the ini file.
"""

from __future__ import annotations

import asyncio
import os
from logging.config import fileConfig
from typing import Any

from alembic import context
from sqlalchemy import text
from sqlalchemy.engine import URL, Connection

from durachat_infra.store._engine import (
    BEGIN_OPTION,
    connect,
    create_engine,
    normalize_url,
    translate_errors,
)
from durachat_infra.store._migrate import ADVISORY_LOCK_KEY
from durachat_infra.store.models import Base

config = context.config
if config.config_file_name is not None:
    fileConfig(config.config_file_name, disable_existing_loggers=False)


def _url() -> str | URL:
    # Pass a URL object through as is: str() of one masks the password.
    url = (
        config.attributes.get("url")
        or context.get_x_argument(as_dictionary=True).get("url")
        or os.environ.get("DATABASE_URL")
        or config.get_main_option("sqlalchemy.url")
    )
    if not url:
        raise RuntimeError("no database URL: pass -x url=..., or set DATABASE_URL")
    return url if isinstance(url, URL) else str(url)


def _options(dialect_name: str) -> dict[str, Any]:
    sqlite = dialect_name == "sqlite"
    return {
        "target_metadata": Base.metadata,
        # Alembic assumes SQLite DDL is not transactional because the sqlite3 driver commits
        # around it; our engines issue BEGIN themselves, so DDL is transactional on both.
        "transactional_ddl": True,
        "render_as_batch": sqlite,
        "compare_type": True,
    }


def _run(connection: Connection) -> None:
    if connection.dialect.name == "sqlite":
        # Take the write lock at BEGIN: a concurrent migrator waits here, then finds the schema
        # current. (A deferred BEGIN would let both read the old version first.)
        connection.execution_options(**{BEGIN_OPTION: "IMMEDIATE"})
    context.configure(connection=connection, **_options(connection.dialect.name))
    with context.begin_transaction():
        if connection.dialect.name == "postgresql":
            # Held until this transaction ends; the version table is read after it is granted.
            connection.execute(
                text("SELECT pg_advisory_xact_lock(:key)"), {"key": ADVISORY_LOCK_KEY}
            )
        context.run_migrations()


async def _run_online(url: str | URL) -> None:
    engine = create_engine(url)
    try:
        async with connect(engine, "migrate") as conn:
            with translate_errors("migrate"):
                await conn.run_sync(_run)
    finally:
        await engine.dispose()


def _run_offline(url: str | URL) -> None:
    parsed = normalize_url(url)
    context.configure(
        url=parsed,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
        **_options(parsed.get_backend_name()),
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    _run_offline(_url())
else:
    asyncio.run(_run_online(_url()))
