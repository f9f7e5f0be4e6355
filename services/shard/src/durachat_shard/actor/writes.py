"""The write chain: a conversation's fenced SQL transactions, one after another, in the order
they were queued.

The actor changes its transcript in memory first and queues the transaction that makes the
change durable (docs/architecture.md#the-path-of-a-chat-request). Queuing never waits, so a
reply starts streaming before SQL has caught up; because the transactions run strictly in
order, the database always goes through the same history as memory, a little behind.
Each write's lag (queued → committed) is measured; when the code that queued it runs in a
recording span, the write is a `chat.write` span, its child (docs/observability.md#traces).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Generic, Protocol, TypeVar

from opentelemetry import trace

from durachat_shard.metrics import WRITE_CHAIN_LAG
from durachat_shard.tracing import TRACER

TxT = TypeVar("TxT")
TxT_co = TypeVar("TxT_co", covariant=True)
T = TypeVar("T")


class Backlog:
    """The writes of a process's write chains that are queued and not yet done, oldest
    first: how far behind the database the shard's memory is (`overload`)."""

    def __init__(self) -> None:
        self._queued: collections.OrderedDict[int, float] = collections.OrderedDict()
        self._serial = 0

    def add(self, queued: float) -> int:
        """Count a write queued at `queued` (monotonic); returns its handle for `done`."""
        self._serial += 1
        self._queued[self._serial] = queued
        return self._serial

    def done(self, handle: int) -> None:
        """The write is committed, failed or cancelled."""
        self._queued.pop(handle, None)

    def __len__(self) -> int:
        return len(self._queued)

    def age(self, now: float) -> float:
        """Seconds the oldest write still queued has waited (0 with none)."""
        for queued in self._queued.values():
            return max(0.0, now - queued)
        return 0.0


BACKLOG = Backlog()
"""The process's writes in flight. Process-wide like the metrics: a shard is one process."""


class TransactionRunner(Protocol[TxT_co]):
    """Runs work in one fenced transaction of the conversation and returns its result
    (`Store.run_transaction` bound to the conversation and the owner's epoch).

    It raises when the epoch is no longer the conversation's (`FencedError`); an exception in
    the work rolls everything it did back. On SQLite, the writes of every conversation of a
    shard that are queued at the same moment share a turn of the write lock
    (docs/architecture.md#storage).
    """

    def __call__(self, work: Callable[[TxT_co], Awaitable[T]]) -> Awaitable[T]: ...


class WriteChain(Generic[TxT]):
    """Runs queued writes, each in a transaction of its own, strictly in queue order.

    A write that fails leaves memory ahead of the database. Every write queued after it fails
    with the same error (nothing of them is applied), and `on_failure` is told of each: the
    owner stops acting for the conversation, which is re-activated from SQL later.
    """

    def __init__(
        self,
        run_transaction: TransactionRunner[TxT],
        *,
        on_failure: Callable[[BaseException], None],
    ) -> None:
        self._run = run_transaction
        self._on_failure = on_failure
        self._last: asyncio.Future[None] | None = None

    def behind(self, work: Callable[[TxT], Awaitable[None]]) -> asyncio.Future[None]:
        """Queue `work` after every write queued before it and return its outcome; the caller
        need not wait for it."""
        previous = self._last
        queued = time.monotonic()
        traced = trace.get_current_span().is_recording()

        pending = BACKLOG.add(queued)

        async def run() -> None:
            if previous is not None:
                await previous
            if traced:
                with TRACER.start_as_current_span("chat.write") as span:
                    span.set_attribute("durachat.write.waited_s", time.monotonic() - queued)
                    await self._run(work)
            else:
                await self._run(work)
            WRITE_CHAIN_LAG.observe(time.monotonic() - queued)

        task: asyncio.Future[None] = asyncio.ensure_future(run())
        # However it ends (a task cancelled before its first step runs no `finally`).
        task.add_done_callback(lambda _: BACKLOG.done(pending))
        task.add_done_callback(self._after)
        self._last = task
        return task

    async def write(self, work: Callable[[TxT], Awaitable[None]]) -> None:
        """Queue `work` and wait for it (still in order with the queued ones)."""
        await self.behind(work)

    async def settled(self) -> None:
        """Wait until every write queued so far is done (or failed)."""
        if self._last is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._last)

    async def run(self, work: Callable[[TxT], Awaitable[T]]) -> T:
        """Run `work` in a transaction of its own, after the writes queued before it, and
        return its result. Unlike a queued write, its errors are the caller's: nothing of it
        is applied, `on_failure` is not told, and the chain carries on."""
        await self.settled()
        return await self._run(work)

    def _after(self, task: asyncio.Future[None]) -> None:
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            self._on_failure(exc)
