"""A throwaway PostgreSQL server for a test session, and one database per test.

`postgres_for_tests()` yields a `PostgresServer`:

* if `DURACHAT_TEST_POSTGRES_URL` is set (for example
  `postgresql://postgres:secret@127.0.0.1:5432/postgres`), that server is used as is; the URL must
  name a role allowed to create and drop databases;
* otherwise a private server is started from the local PostgreSQL binaries (`initdb` into a temp
  dir, listening on 127.0.0.1 on a free port, durability switched off for speed) and is stopped
  and removed when the context exits;
* if neither is possible, `PostgresNotAvailableError` says why, and callers skip.

When the tests run as root (CI containers do), `initdb` and `pg_ctl` refuse to run, so they are
run as the `postgres` OS user through `runuser`, in a temp dir owned by that user.

Databases are created with `PostgresServer.create_database()` under unique names and dropped with
`drop_database()`, so tests never share state and a shared external server is left clean.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
from sqlalchemy.engine import make_url

from durachat_infra.local.ports import free_port

ENV_URL = "DURACHAT_TEST_POSTGRES_URL"
"""Point the tests at an existing server instead of starting one."""

PREFERRED_BINDIR = Path("/usr/lib/postgresql/15/bin")
_REQUIRED_BINARIES = ("initdb", "pg_ctl", "postgres")
_OS_USER = "postgres"
_START_ATTEMPTS = 3
_SERVER_SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    # Throwaway data: trade crash safety for speed.
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "200",
}


class PostgresNotAvailableError(RuntimeError):
    """No PostgreSQL server can be provided on this machine; the message says why."""


@dataclass(frozen=True)
class PostgresServer:
    """A PostgreSQL server the tests may create databases on.

    Attributes:
        admin_url: libpq-style URL (`postgresql://user[:password]@host:port/dbname`) of a
            maintenance database, used to create and drop test databases.
    """

    admin_url: str

    def url(self, database: str) -> str:
        """Return the URL of `database` on this server (plain `postgresql://` scheme)."""
        return (
            make_url(self.admin_url)
            .set(drivername="postgresql", database=database)
            .render_as_string(hide_password=False)
        )

    async def create_database(
        self, *, template: str | None = None, prefix: str = "durachat_test"
    ) -> str:
        """Create a database with a unique name and return the name.

        Args:
            template: copy this database (which must have no open connections) instead of
                `template1`; cloning a migrated template is much faster than migrating again.
            prefix: start of the generated name.
        """
        name = f"{prefix}_{uuid.uuid4().hex[:12]}"
        sql = f'CREATE DATABASE "{name}"'
        if template is not None:
            sql += f' TEMPLATE "{template}"'
        await self._admin(sql)
        return name

    async def drop_database(self, name: str) -> None:
        """Drop `name`, disconnecting anyone still connected to it."""
        await self._admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    async def _admin(self, sql: str) -> None:
        conn = await asyncpg.connect(self.url(make_url(self.admin_url).database or "postgres"))
        try:
            await conn.execute(sql)
        finally:
            await conn.close()


def find_bindir() -> Path | None:
    """Find a directory holding `initdb`, `pg_ctl` and `postgres`, PostgreSQL 15 first."""
    candidates = [PREFERRED_BINDIR]
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(
            ["pg_config", "--bindir"], capture_output=True, text=True, check=True, timeout=10
        )
        candidates.append(Path(out.stdout.strip()))
    initdb = shutil.which("initdb")
    if initdb is not None:
        candidates.append(Path(initdb).resolve().parent)
    candidates.extend(sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True))
    for bindir in candidates:
        if all((bindir / name).is_file() for name in _REQUIRED_BINARIES):
            return bindir
    return None


@contextlib.contextmanager
def postgres_for_tests() -> Iterator[PostgresServer]:
    """Yield the server named by `DURACHAT_TEST_POSTGRES_URL`, or a throwaway local one.

    Raises:
        PostgresNotAvailableError: no URL is configured and no usable binaries were found.
    """
    url = os.environ.get(ENV_URL)
    if url:
        yield PostgresServer(admin_url=url)
        return
    bindir = find_bindir()
    if bindir is None:
        raise PostgresNotAvailableError(
            f"no PostgreSQL binaries (initdb, pg_ctl, postgres) in {PREFERRED_BINDIR}, "
            f"`pg_config --bindir` or PATH; install PostgreSQL 15 or set {ENV_URL}"
        )
    with throwaway_postgres(bindir) as server:
        yield server


@contextlib.contextmanager
def throwaway_postgres(bindir: Path) -> Iterator[PostgresServer]:
    """Run a private PostgreSQL server from `bindir` until the context exits, then delete it."""
    as_user = _run_as_prefix()
    root = Path(tempfile.mkdtemp(prefix="durachat-pg-"))
    try:
        if as_user:
            entry = pwd.getpwnam(_OS_USER)
            os.chown(root, entry.pw_uid, entry.pw_gid)
        datadir = root / "data"
        _run(
            [
                *as_user,
                str(bindir / "initdb"),
                "--pgdata",
                str(datadir),
                "--username",
                "postgres",
                "--auth",
                "trust",
                "--encoding",
                "UTF8",
                "--no-locale",
                "--no-sync",
            ]
        )
        server = _start(bindir, as_user, root, datadir)
        try:
            yield server
        finally:
            _run([*as_user, str(bindir / "pg_ctl"), "stop", "-D", str(datadir), "-m", "fast"])
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _start(bindir: Path, as_user: list[str], root: Path, datadir: Path) -> PostgresServer:
    log = root / "postgres.log"
    conf = datadir / "postgresql.conf"
    base_conf = conf.read_text()
    for _ in range(_START_ATTEMPTS):
        # The port is free now but may be taken before postgres binds it: retry with another.
        port = free_port()
        settings = {**_SERVER_SETTINGS, "port": str(port), "unix_socket_directories": f"'{root}'"}
        conf.write_text(base_conf + "".join(f"{k} = {v}\n" for k, v in settings.items()))
        pg_ctl = [*as_user, str(bindir / "pg_ctl")]
        started = subprocess.run(
            [*pg_ctl, "start", "-w", "-t", "30", "-D", str(datadir), "-l", str(log)],
            capture_output=True,
            text=True,
            check=False,
        )
        if started.returncode == 0:
            return PostgresServer(admin_url=f"postgresql://postgres@127.0.0.1:{port}/postgres")
    tail = log.read_text()[-2000:] if log.exists() else started.stderr
    raise RuntimeError(f"PostgreSQL did not start:\n{tail}")


def _run_as_prefix() -> list[str]:
    if os.geteuid() != 0:
        return []
    try:
        pwd.getpwnam(_OS_USER)
    except KeyError:
        raise PostgresNotAvailableError(
            f"running as root and there is no {_OS_USER!r} OS user to run PostgreSQL as; "
            f"create one or set {ENV_URL}"
        ) from None
    runuser = shutil.which("runuser")
    if runuser is None:
        raise PostgresNotAvailableError(f"running as root and `runuser` is missing; set {ENV_URL}")
    return [runuser, "-u", _OS_USER, "--"]


def _run(argv: list[str]) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        command = " ".join(argv)
        raise RuntimeError(f"{command} failed ({done.returncode}): {done.stderr or done.stdout}")
