"""Schema migrations: `migrate()` upgrades a database to the newest revision."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path
from typing import Final

from alembic import command
from alembic.config import Config
from sqlalchemy.engine import URL

from durachat_infra.store._engine import normalize_url
from durachat_infra.store.errors import DatabaseUnavailableError, StoreError

MIGRATIONS_DIR: Final = Path(__file__).with_name("migrations")

ADVISORY_LOCK_KEY: Final = 0x6475726163686174  # "durachat" in ASCII
"""PostgreSQL advisory lock serialising concurrent migrations of one database."""

_SQLITE_ATTEMPTS: Final = 5

# Alembic keeps the running migration's context in module globals (`alembic.context`,
# `alembic.op`), so two migrations must never interleave inside one process, whatever thread or
# event loop they come from. Across processes the database lock in env.py takes over.
_in_process = threading.Lock()


async def migrate(url: str) -> None:
    """Upgrade the database at `url` to the newest schema revision.

    Safe to call from several processes at once (every shard does at startup): PostgreSQL
    migrations serialise on an advisory lock, SQLite ones on the database write lock
    (`BEGIN IMMEDIATE`, retried if the wait outlasts the busy timeout). Whoever comes second
    finds the schema current and does nothing. Each run is one transaction on both databases.

    Alembic is synchronous, so the work runs in a worker thread; the event loop stays free.

    Args:
        url: same forms as `Store.from_url`.

    Raises:
        ValueError: unsupported URL.
        DatabaseUnavailableError: the database cannot be reached or stayed locked.
        StoreError: a migration failed (nothing of it was applied).
    """
    await asyncio.to_thread(_upgrade, normalize_url(url))


def alembic_config(url: str | URL | None = None) -> Config:
    """Build the Alembic configuration without an ini file.

    Args:
        url: the database to migrate; if omitted, env.py falls back to `-x url=...`, then
            `DATABASE_URL`, then `sqlalchemy.url`.
    """
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("path_separator", "os")
    if url is not None:
        config.attributes["url"] = normalize_url(url)
    return config


def _upgrade(url: URL) -> None:
    if url.get_backend_name() == "sqlite":
        _check_sqlite_opens(url)
    with _in_process:
        for attempt in range(1, _SQLITE_ATTEMPTS + 1):
            try:
                command.upgrade(alembic_config(url), "head")
                return
            except DatabaseUnavailableError as exc:
                locked = url.get_backend_name() == "sqlite" and "locked" in str(exc)
                if not locked or attempt == _SQLITE_ATTEMPTS:
                    raise
            except StoreError:
                raise
            except Exception as exc:
                # Alembic's own errors (a broken revision graph, a failing migration script).
                raise StoreError(f"migration failed: {exc}") from exc


def _check_sqlite_opens(url: URL) -> None:
    # aiosqlite leaves its worker thread posting to the event loop after a failed connect, and
    # the loop of this thread is about to close: fail here, before aiosqlite is involved.
    try:
        sqlite3.connect(url.database or "", uri=url.query.get("uri") == "true").close()
    except sqlite3.Error as exc:
        raise DatabaseUnavailableError(f"migrate: cannot open {url.database}: {exc}") from exc
