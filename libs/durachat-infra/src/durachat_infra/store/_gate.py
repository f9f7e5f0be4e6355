"""One SQLite writer at a time, without SQLite's sleeping busy handler, and writes combined.

SQLite lets one writer in at a time. Left to itself, a writer that finds the lock taken sleeps in
growing steps (1, 2, 5, 10 … 100 ms) before it retries, so under contention writes wait far longer
than the lock is actually held. The gate queues writers instead: an advisory file lock beside the
database across processes, which wakes the next writer the moment the lock is released.

Within a process, writes are combined: every write queued while the lock is held or awaited runs
in the same turn of the lock, one after another, in the order they were queued, by one drain
task. Handing the lock from one coroutine to the next would cost a turn of the event loop each
time, and under load a turn of the loop takes milliseconds: the shard's writes queued behind
those hand-offs (docs/benchmarks.md, "The write path"). The writers' statements run on the
loop's thread (`_sqlite_inloop`), so a write queued with `run` does not yield to the loop
between its statements and a batch holds the file lock only for the SQL's time. A batch gives
the loop (and the other processes) a turn after `SLICE_S` of work.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import fcntl
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, Final, TypeVar

from durachat_infra.store.errors import StoreError

T = TypeVar("T")

SLICE_S: Final = 0.005
"""How long one turn of the lock may run queued writes before the loop gets a turn."""

_Work = tuple[Callable[[], Awaitable[Any]], "asyncio.Future[Any]"]


class WriteGate:
    """Serialises and combines the writers of one SQLite database; without a path
    (PostgreSQL) writes run at once, side by side."""

    def __init__(self, database: Path | None) -> None:
        self._path = None if database is None else database.with_name(database.name + ".wlock")
        self._fd: int | None = None
        self._queue: collections.deque[_Work] = collections.deque()
        self._drain: asyncio.Task[None] | None = None

    async def run(self, work: Callable[[], Awaitable[T]]) -> T:
        """Run `work` holding the gate, after every write queued before it.

        `work` runs in the gate's drain task: once started it completes even if the caller
        stops waiting, and its exception is raised to the caller.
        """
        if self._path is None:
            return await work()
        done: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._queue.append((work, done))
        if self._drain is None:
            self._drain = asyncio.ensure_future(self._run_queue())
        return await done

    @contextlib.asynccontextmanager
    async def hold(self) -> AsyncIterator[None]:
        """Hold the gate for the block (for writes whose statements the caller interleaves
        with other awaits; prefer `run`)."""
        if self._path is None:
            yield
            return
        entered: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        released: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        async def holding() -> None:
            if entered.done():  # the caller gave up before its turn came
                return
            entered.set_result(None)
            await released

        queued = asyncio.ensure_future(self.run(holding))
        queued.add_done_callback(_retrieve)
        try:
            await asyncio.shield(entered)
        except asyncio.CancelledError:
            entered.cancel()
            released.set_result(None)
            raise
        try:
            yield
        finally:
            released.set_result(None)
            await queued

    def close(self) -> None:
        """Release the lock file; writes still queued fail."""
        if self._drain is not None:
            self._drain.cancel()
        self._fail_queued(StoreError("the store is closed"))
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    async def _run_queue(self) -> None:
        try:
            while self._queue:
                fd = await self._lock()
                try:
                    started = time.monotonic()
                    while self._queue and time.monotonic() - started < SLICE_S:
                        work, done = self._queue.popleft()
                        if done.done():  # its caller was cancelled before it ran
                            continue
                        try:
                            result = await work()
                        except asyncio.CancelledError:
                            if not done.done():
                                done.cancel()
                            raise
                        except BaseException as exc:
                            if not done.done():
                                done.set_exception(exc)
                        else:
                            if not done.done():
                                done.set_result(result)
                finally:
                    fcntl.flock(fd, fcntl.LOCK_UN)
                if self._queue:
                    # Let the loop deliver what it has, and another process take the lock.
                    await asyncio.sleep(0)
        finally:
            self._drain = None
            self._fail_queued(StoreError("the write gate stopped"))

    async def _lock(self) -> int:
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
        return fd

    def _fail_queued(self, exc: BaseException) -> None:
        while self._queue:
            _, done = self._queue.popleft()
            if not done.done():
                done.set_exception(exc)

    def _file(self) -> int:
        if self._fd is None:
            assert self._path is not None
            self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o600)
        return self._fd


def _retrieve(future: asyncio.Future[None]) -> None:
    # The caller learns about failures through its own block; nothing to report twice.
    if not future.cancelled():
        future.exception()


def _unlock_if_taken(future: asyncio.Future[None], fd: int) -> None:
    if not future.cancelled() and future.exception() is None:
        fcntl.flock(fd, fcntl.LOCK_UN)
