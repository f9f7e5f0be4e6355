"""The owner's side of the event log: fenced appends, batched per event-loop tick."""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from redis.exceptions import NoScriptError, RedisError, ResponseError

from durachat_infra.eventlog.entries import ALL, Kind
from durachat_infra.eventlog.scripts import APPEND
from durachat_infra.keys import ConversationKeys
from durachat_infra.redis_client import RedisClient, queue_evalsha, register_script

log = logging.getLogger(__name__)


_RETRIES = 30
"""Times a conversation's entries are written again after Redis refused them (about a minute
with the back-off) before they are dropped."""


_PROCESS = secrets.token_hex(4)
_SERIAL = itertools.count()


def _entry_token() -> str:
    """Unique across processes and within this one: a random per-process prefix and a counter
    (one system call per process, not one per entry)."""
    return f"{_PROCESS}{next(_SERIAL):x}"


class LogFencedError(Exception):
    """The writer no longer holds the conversation's lease; nothing was appended."""


@dataclass(slots=True)
class _Append:
    kind: Kind
    frame: str
    target: str
    request: str
    state: str
    branch: str = ""
    done: asyncio.Future[str] | None = field(default=None)
    token: str = field(default_factory=_entry_token)


def _token(items: list[_Append]) -> str:
    """The token of a batch: its first entry's and its length. The same entries written again
    (after Redis took them but its reply was lost) carry the same token; any other batch of the
    conversation starts with another entry."""
    return f"{items[0].token}:{len(items)}"


def _state_json(state: dict[str, str] | None) -> str:
    return json.dumps(state, separators=(",", ":")) if state else ""


class LogWriter:
    """Appends entries to conversation event logs on behalf of their owner.

    `append` never blocks: entries queue up and a single flusher writes them, one script call
    per conversation per batch, all in one pipelined round trip. Everything appended while a
    batch is in flight goes into the next one, so under load a round trip carries many chunks.
    Each script call checks that `owner` still holds the conversation's lease: a shard that lost
    a conversation cannot add to its log. `on_fenced` is told which conversation was lost.

    Before that, `reclaim` (if given) may take a vacant lease back (see `Leases.reclaim`): when
    it does, the refused entries are written again, ahead of those queued since, so a running
    reply goes on in order after Redis lost its leases.
    """

    def __init__(
        self,
        redis: RedisClient,
        *,
        owner: str = "",
        maxlen: int = 10_000,
        max_bytes: int = 0,
        on_fenced: Callable[[ConversationKeys], None] | None = None,
        reclaim: Callable[[ConversationKeys], Awaitable[bool]] | None = None,
    ) -> None:
        self._redis = redis
        self._owner = owner
        self._maxlen = str(maxlen)
        self._max_bytes = str(max_bytes)
        self._queue: dict[ConversationKeys, list[_Append]] = {}
        self._flusher: asyncio.Task[None] | None = None
        self._script = register_script(redis, APPEND)
        self._loaded = False
        self._on_fenced = on_fenced
        self._reclaim = reclaim
        self._writing: dict[ConversationKeys, list[_Append]] = {}

    def append(
        self,
        keys: ConversationKeys,
        kind: Kind,
        frame: str,
        *,
        target: str = ALL,
        request: str = "",
        state: dict[str, str] | None = None,
        branch: str = "",
    ) -> None:
        """Queue an entry; `state` changes the stream state hash atomically with it; `branch`
        tags it with the branch it belongs to ("" for main)."""
        self._enqueue(keys, _Append(kind, frame, target, request, _state_json(state), branch))

    def append_waitable(
        self,
        keys: ConversationKeys,
        kind: Kind,
        frame: str,
        *,
        target: str = ALL,
        request: str = "",
        state: dict[str, str] | None = None,
        branch: str = "",
    ) -> asyncio.Future[str]:
        """Queue an entry; the future resolves to its entry id once written (or fails with
        `LogFencedError`)."""
        done: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._enqueue(keys, _Append(kind, frame, target, request, _state_json(state), branch, done))
        return done

    def _enqueue(self, keys: ConversationKeys, item: _Append) -> None:
        self._queue.setdefault(keys, []).append(item)
        self._kick()

    def pending(self, keys: ConversationKeys) -> bool:
        """Whether entries of the conversation are queued or being written."""
        return bool(self._queue.get(keys)) or bool(self._writing.get(keys))

    async def flush(self) -> None:
        """Wait until every entry queued so far is written (or dropped as fenced)."""
        while self._queue or (self._flusher is not None and not self._flusher.done()):
            if self._flusher is not None and not self._flusher.done():
                await asyncio.shield(self._flusher)
            else:
                self._kick()

    async def close(self) -> None:
        """Flush and stop."""
        await self.flush()

    def _kick(self) -> None:
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        # Yield once so everything appended during the current tick joins the first batch.
        await asyncio.sleep(0)
        delay = 0.05
        refused: dict[ConversationKeys, int] = {}
        while self._queue:
            batch, self._queue = self._queue, {}
            self._writing = batch
            while True:
                try:
                    results = await self._write(batch)
                    break
                except RedisError as exc:
                    log.warning("event log write failed, retrying: %s", exc)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 2.0)
            retry = False
            for (keys, items), result in zip(batch.items(), results, strict=True):
                if isinstance(result, ResponseError) and str(result).startswith("FENCED"):
                    if await self._took_back(keys):
                        self._queue[keys] = items + self._queue.get(keys, [])
                        continue
                    log.warning("event log write fenced off for %s", keys.tag)
                    for item in items:
                        if item.done is not None and not item.done.done():
                            item.done.set_exception(LogFencedError(keys.tag))
                    if self._on_fenced is not None:
                        self._on_fenced(keys)
                    continue
                if isinstance(result, Exception):
                    # A Redis that is loading its data or refusing writes for a while: the
                    # entries are written again, in order, unless it goes on refusing.
                    refused[keys] = refused.get(keys, 0) + 1
                    if refused[keys] <= _RETRIES:
                        log.warning("event log write refused for %s: %s", keys.tag, result)
                        self._queue[keys] = items + self._queue.get(keys, [])
                        retry = True
                        continue
                    log.error("event log write failed for %s: %s", keys.tag, result)
                    continue
                refused.pop(keys, None)
                assert isinstance(result, list)
                for item, entry_id in zip(items, result, strict=True):
                    if item.done is not None and not item.done.done():
                        item.done.set_result(str(entry_id))
            self._writing = {}
            if retry:
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
            else:
                delay = 0.05

    async def _took_back(self, keys: ConversationKeys) -> bool:
        if self._reclaim is None:
            return False
        try:
            return await self._reclaim(keys)
        except RedisError as exc:
            log.warning("could not take back the lease of %s: %s", keys.tag, exc)
            return False

    async def _write(self, batch: dict[ConversationKeys, list[_Append]]) -> list[object]:
        if not self._loaded:
            await self._redis.script_load(APPEND)
            self._loaded = True
        # EVALSHA straight away: a pipeline of registered scripts would first ask SCRIPT EXISTS,
        # one more round trip per batch.
        pipe = self._redis.pipeline(transaction=False)
        for keys, items in batch.items():
            args: list[str] = [self._owner, self._maxlen, _token(items), self._max_bytes]
            for item in items:
                args += [
                    item.kind.value,
                    item.frame,
                    item.target,
                    item.request,
                    item.state,
                    item.branch,
                ]
            queue_evalsha(
                pipe,
                self._script.sha,
                [keys.log, keys.state, keys.lease, keys.appended, keys.log_bytes],
                args,
            )
        results: list[object] = await pipe.execute(raise_on_error=False)
        if any(isinstance(r, NoScriptError) for r in results):
            # Redis restarted and forgot the script; nothing of this batch was applied.
            self._loaded = False
            raise NoScriptError("append script not loaded")
        return results
