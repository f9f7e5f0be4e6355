"""One SQLite writer at a time, without SQLite's sleeping busy handler.

SQLite lets one writer in at a time. Left to itself, a writer that finds the lock taken sleeps in
growing steps (1, 2, 5, 10 … 100 ms) before it retries, so under contention writes wait far longer
than the lock is actually held: with several shard processes and pooled connections, turns queued
for seconds. The gate queues writers instead: an asyncio lock within the process, and an advisory
file lock beside the database across processes, which wakes the next writer the moment the lock
is released.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
from collections.abc import AsyncIterator
from pathlib import Path


class WriteGate:
    """Serialises writers of one SQLite database; a no-op without a path (PostgreSQL)."""

    def __init__(self, database: Path | None) -> None:
        self._path = None if database is None else database.with_name(database.name + ".wlock")
        self._lock = asyncio.Lock()
        self._fd: int | None = None

    @contextlib.asynccontextmanager
    async def hold(self) -> AsyncIterator[None]:
        """Hold the gate for one write transaction."""
        if self._path is None:
            yield
            return
        async with self._lock:
            fd = self._file()
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                waiting = asyncio.ensure_future(asyncio.to_thread(fcntl.flock, fd, fcntl.LOCK_EX))
                try:
                    await asyncio.shield(waiting)
                except asyncio.CancelledError:
                    # The thread takes the lock eventually; give it back then.
                    waiting.add_done_callback(lambda f: _unlock_if_taken(f, fd))
                    raise
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)

    def close(self) -> None:
        """Release the lock file."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _file(self) -> int:
        if self._fd is None:
            assert self._path is not None
            self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o600)
        return self._fd


def _unlock_if_taken(future: asyncio.Future[None], fd: int) -> None:
    if not future.cancelled() and future.exception() is None:
        fcntl.flock(fd, fcntl.LOCK_UN)
