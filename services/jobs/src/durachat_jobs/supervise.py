"""Keeping the jobs worker up through Redis and database outages.

An arq worker ends when a poll of its queue meets a dead Redis (and gives up starting after a
few seconds without one), so a Redis restart used to take the jobs service down with it. Here
the worker runs under a supervisor in the same process: when the worker ends on an error, its
connections are closed, and a new worker is built and started after a back-off (0.5 s doubling
to 10 s, with jitter; back at the start once a worker ran for a minute). Only SIGTERM or SIGINT
ends the process (docs/operations.md#failure-modes).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from arq.worker import Worker
from redis.exceptions import AskError, ClusterDownError, MovedError, RedisClusterException
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from durachat_infra.store import DatabaseUnavailableError

log = logging.getLogger(__name__)

UNAVAILABLE = (
    RedisConnectionError,
    RedisTimeoutError,
    ClusterDownError,
    RedisClusterException,
    DatabaseUnavailableError,
    OSError,
    TimeoutError,
)
"""Errors that mean a dependency is away for now (Redis loading its data after a restart raises
a `ConnectionError` too; a Redis Cluster without a quorum of masters, the cluster errors)."""


@dataclass(frozen=True, slots=True)
class Backoff:
    """How long to wait before starting a worker again."""

    initial: float = 0.5
    maximum: float = 10.0
    reset_after: float = 60.0
    """A worker that ran this long before it failed starts the back-off over."""

    def next(self, delay: float) -> float:
        """The delay after `delay`."""
        return min(self.maximum, delay * 2)

    def jittered(self, delay: float) -> float:
        """`delay`, spread by up to a quarter either way, so that several workers do not all
        reconnect at the same instant."""
        return delay * random.uniform(0.75, 1.25)


async def supervise(
    build: Callable[[], Awaitable[Worker]],
    *,
    stop: asyncio.Event,
    backoff: Backoff | None = None,
) -> None:
    """Run workers made by `build` (without arq's own signal handling) until `stop` is set,
    starting a new one whenever one ends on an error (or could not be made: `build` finds the
    queue's Redis node on a cluster)."""
    backoff = backoff or Backoff()
    loop = asyncio.get_running_loop()
    delay = backoff.initial
    while not stop.is_set():
        started = loop.time()
        error: BaseException | None
        try:
            worker = await build()
        except UNAVAILABLE as exc:
            error = exc
        else:
            main = asyncio.create_task(worker.main(), name="jobs-worker")
            worker.main_task = main
            stopping = asyncio.create_task(stop.wait())
            await asyncio.wait({main, stopping}, return_when=asyncio.FIRST_COMPLETED)
            stopping.cancel()
            if not main.done():
                main.cancel()
                await asyncio.gather(main, return_exceptions=True)
                await close_worker(worker)
                return
            error = None if main.cancelled() else main.exception()
            await close_worker(worker)
        if error is None:
            return
        if loop.time() - started >= backoff.reset_after:
            delay = backoff.initial
        wait = backoff.jittered(delay)
        if isinstance(error, UNAVAILABLE) or _slot_moved(error):
            log.warning("jobs worker stopped: %r; starting again in %.1f s", error, wait)
        else:
            log.error("jobs worker failed; starting again in %.1f s", wait, exc_info=error)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), wait)
        delay = backoff.next(delay)


def _slot_moved(error: BaseException) -> bool:
    """Whether the queue's slot moved to another Redis Cluster master (resharding, failover):
    arq's client, which talks to one master, is answered `MOVED`; the next worker finds the
    new one (docs/operations.md#redis-cluster)."""
    return isinstance(error, MovedError | AskError) or "MOVED " in str(error)


async def close_worker(worker: Worker) -> None:
    """Stop a worker's jobs and release what it holds, whether or not Redis answers (arq's
    own `close` stops at the first Redis error, before the shutdown hook)."""
    for task in worker.tasks.values():
        task.cancel()
    await asyncio.gather(*worker.tasks.values(), return_exceptions=True)
    pool = worker._pool
    if pool is not None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(pool.delete(worker.health_check_key), 2)
    if worker.on_shutdown is not None and "durachat" in worker.ctx:
        try:
            await worker.on_shutdown(worker.ctx)
        except Exception:
            log.warning("jobs worker shutdown failed", exc_info=True)
    if pool is not None:
        with contextlib.suppress(Exception):
            await pool.close(close_connection_pool=True)
        worker._pool = None


def stop_on_signals(stop: asyncio.Event) -> None:
    """Set `stop` on SIGTERM or SIGINT."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
