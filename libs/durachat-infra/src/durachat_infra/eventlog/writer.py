"""The owner's side of the event log: appends, batched per event-loop tick."""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass, field

from redis.asyncio import Redis
from redis.exceptions import RedisError

from durachat_infra.eventlog.entries import ALL, Kind
from durachat_infra.eventlog.scripts import APPEND_WITH_STATE
from durachat_infra.keys import ConversationKeys

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Append:
    keys: ConversationKeys
    kind: Kind
    frame: str
    target: str
    request: str
    state: dict[str, str] | None
    done: asyncio.Future[str] | None = field(default=None)


class LogWriter:
    """Appends entries to conversation event logs.

    `append` never blocks: entries queue up and a single flusher writes them with one pipelined
    round trip per batch, in order. Everything appended while a batch is in flight goes into the
    next batch, so under load a round trip carries many chunks. Entries that change the stream
    state go through a script that updates the state hash in the same step.
    """

    def __init__(self, redis: Redis, *, maxlen: int = 10_000) -> None:
        self._redis = redis
        self._maxlen = str(maxlen)
        self._queue: list[_Append] = []
        self._flusher: asyncio.Task[None] | None = None
        self._script = redis.register_script(APPEND_WITH_STATE)
        self._closed = False

    def append(
        self,
        keys: ConversationKeys,
        kind: Kind,
        frame: str,
        *,
        target: str = ALL,
        request: str = "",
        state: dict[str, str] | None = None,
    ) -> None:
        """Queue an entry; `state` changes the stream state hash atomically with it."""
        self._queue.append(_Append(keys, kind, frame, target, request, state))
        self._kick()

    def append_waitable(
        self,
        keys: ConversationKeys,
        kind: Kind,
        frame: str,
        *,
        target: str = ALL,
        request: str = "",
        state: dict[str, str] | None = None,
    ) -> asyncio.Future[str]:
        """Queue an entry and return a future resolving to its entry id once written."""
        done: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._queue.append(_Append(keys, kind, frame, target, request, state, done))
        self._kick()
        return done

    async def flush(self) -> None:
        """Wait until every entry queued so far is written."""
        while self._queue or (self._flusher is not None and not self._flusher.done()):
            if self._flusher is not None:
                await asyncio.shield(self._flusher)
            else:
                self._kick()

    async def close(self) -> None:
        """Flush and stop."""
        await self.flush()
        self._closed = True

    def _kick(self) -> None:
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        # Yield once so everything appended during the current tick joins the first batch.
        await asyncio.sleep(0)
        delay = 0.05
        while self._queue:
            batch, self._queue = self._queue, []
            while True:
                try:
                    ids = await self._write(batch)
                    break
                except RedisError as exc:
                    log.warning("event log write failed, retrying: %s", exc)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 2.0)
            delay = 0.05
            for item, entry_id in zip(batch, ids, strict=True):
                if item.done is not None and not item.done.done():
                    item.done.set_result(entry_id)

    async def _write(self, batch: list[_Append]) -> list[str]:
        pipe = self._redis.pipeline(transaction=False)
        for item in batch:
            if item.state is None:
                pipe.xadd(
                    item.keys.log,
                    {"k": item.kind.value, "f": item.frame, "t": item.target, "r": item.request},
                    maxlen=int(self._maxlen),
                    approximate=True,
                )
            else:
                args: list[str] = [
                    self._maxlen,
                    item.kind.value,
                    item.frame,
                    item.target,
                    item.request,
                    json.dumps(item.state, separators=(",", ":")),
                ]
                for name, value in item.state.items():
                    args += [name, value]
                await self._script(keys=[item.keys.log, item.keys.state], args=args, client=pipe)
        results = await pipe.execute()
        return [str(r) for r in results]
