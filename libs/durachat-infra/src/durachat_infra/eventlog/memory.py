"""The in-memory adapter of the event log port: the same contract as the Redis adapter, kept in
Python objects.

For tests and tools that want event logs without Redis. The conformance suite
(`tests/integration/infra/test_eventlog*.py`) runs on it as well as on a real Redis. A
`MemoryEventLog` plays the server: it holds every log, its stream state and the conversations'
leases (set with `set_lease`, as the cluster's lease script would). Writers, readers and the
upkeep are opened on it::

    log = MemoryEventLog()
    writer = MemoryLogWriter(log, owner="shard-1")
    log.set_lease(keys, "shard-1")
    writer.append(keys, Kind.FRAME, '{"type":"x"}')
    await writer.flush()
    entries = await MemoryLogReads(log).read_range(keys)
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

from durachat.protocol import MAIN_BRANCH
from durachat_infra.eventlog.entries import ALL, Kind, LogEntry, branch_tag, entry_id_key
from durachat_infra.eventlog.port import EntryHandler
from durachat_infra.eventlog.state import StreamState, state_fields, state_prefix
from durachat_infra.eventlog.writer import LogFencedError
from durachat_infra.keys import ConversationKeys

__all__ = [
    "MemoryEventLog",
    "MemoryLogMaintenance",
    "MemoryLogReader",
    "MemoryLogReads",
    "MemoryLogWriter",
]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Stream:
    entries: list[LogEntry] = field(default_factory=list)
    last: tuple[int, int] = (0, 0)
    """The newest id handed out (kept when entries are trimmed)."""


@dataclass(slots=True)
class _Pending:
    kind: Kind
    frame: str
    target: str
    request: str
    state: str
    branch: str
    done: asyncio.Future[str] | None = None


class MemoryEventLog:
    """Every conversation's log, stream state and lease."""

    def __init__(self) -> None:
        self._streams: dict[ConversationKeys, _Stream] = {}
        self._states: dict[ConversationKeys, dict[str, str]] = {}
        self._leases: dict[ConversationKeys, str] = {}
        self._listeners: set[Callable[[ConversationKeys], None]] = set()

    def set_lease(self, keys: ConversationKeys, holder: str | None) -> None:
        """Give the conversation's lease to `holder` (`None`: nobody holds it)."""
        if holder is None:
            self._leases.pop(keys, None)
        else:
            self._leases[keys] = holder

    def lease(self, keys: ConversationKeys) -> str | None:
        """Who holds the conversation's lease."""
        return self._leases.get(keys)

    def entries(self, keys: ConversationKeys) -> list[LogEntry]:
        """The entries of a log, oldest first (a copy)."""
        stream = self._streams.get(keys)
        return [] if stream is None else list(stream.entries)

    def state_fields(self, keys: ConversationKeys) -> dict[str, str]:
        """The conversation's state hash (a copy)."""
        return dict(self._states.get(keys, {}))

    def conversations(self) -> list[ConversationKeys]:
        """The keys of every conversation that has a log."""
        return list(self._streams)

    def add(
        self,
        keys: ConversationKeys,
        item: _Pending,
        *,
        maxlen: int | None = None,
        max_bytes: int = 0,
    ) -> LogEntry:
        """Add an entry (and apply its state change), as the append script does."""
        stream = self._streams.setdefault(keys, _Stream())
        ms = int(time.time() * 1000)
        last_ms, last_seq = stream.last
        stream.last = (ms, 0) if ms > last_ms else (last_ms, last_seq + 1)
        entry = LogEntry(
            id=f"{stream.last[0]}-{stream.last[1]}",
            kind=item.kind,
            frame=item.frame,
            target=item.target,
            request=item.request,
            state=item.state,
            branch=item.branch,
        )
        stream.entries.append(entry)
        if maxlen is not None and len(stream.entries) > maxlen:
            del stream.entries[: len(stream.entries) - maxlen]
        if max_bytes:
            size = sum(_entry_bytes(e) for e in stream.entries)
            drop = 0
            while size > max_bytes and drop < len(stream.entries) - 1:
                size -= _entry_bytes(stream.entries[drop])
                drop += 1
            del stream.entries[:drop]
        if item.state:
            change: dict[str, str] = json.loads(item.state)
            self._states.setdefault(keys, {}).update(
                {key: entry.id if value == "$id" else value for key, value in change.items()}
            )
        return entry

    def trim(self, keys: ConversationKeys, min_id: str) -> int:
        """Delete the entries older than `min_id`; returns how many."""
        stream = self._streams.get(keys)
        if stream is None:
            return 0
        bound = entry_id_key(min_id)
        kept = [entry for entry in stream.entries if entry_id_key(entry.id) >= bound]
        removed = len(stream.entries) - len(kept)
        stream.entries = kept
        return removed

    def notify(self, keys: ConversationKeys) -> None:
        """Tell every follower the log has new entries."""
        for listener in list(self._listeners):
            listener(keys)

    def listen(self, listener: Callable[[ConversationKeys], None]) -> None:
        """Call `listener` with a conversation's keys whenever its log grows."""
        self._listeners.add(listener)

    def unlisten(self, listener: Callable[[ConversationKeys], None]) -> None:
        """Stop calling `listener`."""
        self._listeners.discard(listener)


def _entry_bytes(entry: LogEntry) -> int:
    """The bytes an entry counts for in the log's bound: its values, as the append script
    counts them."""
    return sum(
        len(value)
        for value in (entry.kind.value, entry.frame, entry.target, entry.request, entry.state)
    ) + len(entry.branch)


class MemoryLogWriter:
    """Appends entries on behalf of a conversation owner (`LogWriterPort` in memory)."""

    def __init__(
        self,
        log: MemoryEventLog,
        *,
        owner: str = "",
        maxlen: int = 10_000,
        max_bytes: int = 0,
        on_fenced: Callable[[ConversationKeys], None] | None = None,
        reclaim: Callable[[ConversationKeys], Awaitable[bool]] | None = None,
    ) -> None:
        self._log = log
        self._owner = owner
        self._maxlen = maxlen
        self._max_bytes = max_bytes
        self._on_fenced = on_fenced
        self._reclaim = reclaim
        self._writing: dict[ConversationKeys, list[_Pending]] = {}
        self._queue: dict[ConversationKeys, list[_Pending]] = {}
        self._flusher: asyncio.Task[None] | None = None

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
        """Queue an entry."""
        self._enqueue(keys, _Pending(kind, frame, target, request, _state_json(state), branch))

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
        """Queue an entry; the future resolves to its id once written."""
        done: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        item = _Pending(kind, frame, target, request, _state_json(state), branch, done)
        self._enqueue(keys, item)
        return done

    def pending(self, keys: ConversationKeys) -> bool:
        """Whether entries of the conversation are queued or being written."""
        return bool(self._queue.get(keys)) or bool(self._writing.get(keys))

    async def flush(self) -> None:
        """Wait until every entry queued so far is written or refused."""
        while self._queue or (self._flusher is not None and not self._flusher.done()):
            if self._flusher is not None and not self._flusher.done():
                await asyncio.shield(self._flusher)
            else:
                self._kick()

    async def close(self) -> None:
        """Flush and stop."""
        await self.flush()

    def _enqueue(self, keys: ConversationKeys, item: _Pending) -> None:
        self._queue.setdefault(keys, []).append(item)
        self._kick()

    def _kick(self) -> None:
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        # As the Redis writer: everything appended in the current tick joins one batch.
        await asyncio.sleep(0)
        while self._queue:
            batch, self._queue = self._queue, {}
            self._writing = batch
            for keys, items in batch.items():
                await self._write(keys, items)
            self._writing = {}
            await asyncio.sleep(0)

    async def _write(self, keys: ConversationKeys, items: list[_Pending]) -> None:
        if self._owner and self._log.lease(keys) != self._owner:
            if self._reclaim is not None and await self._reclaim(keys):
                # Taken back: written again, ahead of what was queued since.
                self._queue[keys] = items + self._queue.get(keys, [])
                return
            log.warning("event log write fenced off for %s", keys.tag)
            for item in items:
                if item.done is not None and not item.done.done():
                    item.done.set_exception(LogFencedError(keys.tag))
            if self._on_fenced is not None:
                self._on_fenced(keys)
            return
        for item in items:
            entry = self._log.add(keys, item, maxlen=self._maxlen, max_bytes=self._max_bytes)
            if item.done is not None and not item.done.done():
                item.done.set_result(entry.id)
        self._log.notify(keys)


class MemoryLogReads:
    """One-shot reads of logs and their stream state (`LogReadsPort` in memory)."""

    def __init__(self, log: MemoryEventLog) -> None:
        self._log = log

    async def read_range(
        self, keys: ConversationKeys, start: str = "-", *, page: int = 1000
    ) -> list[LogEntry]:
        """Every entry from `start` (inclusive) to the end of the log."""
        entries = self._log.entries(keys)
        if start == "-":
            return entries
        bound = entry_id_key(start)
        return [entry for entry in entries if entry_id_key(entry.id) >= bound]

    async def read_states(self, keys: ConversationKeys) -> dict[str, StreamState]:
        """The stream state of every branch of the conversation."""
        return StreamState.all_from_hash(self._log.state_fields(keys))

    async def read_state(self, keys: ConversationKeys, branch: str = MAIN_BRANCH) -> StreamState:
        """The stream state of one branch of the conversation."""
        return (await self.read_states(keys)).get(branch) or StreamState()

    async def snapshot(self, keys: ConversationKeys) -> tuple[dict[str, StreamState], str]:
        """The states of every branch and the id of the newest entry, together."""
        return await self.read_states(keys), await self.last_id(keys)

    async def first_id(self, keys: ConversationKeys) -> str | None:
        """Id of the oldest entry still in the log (`None` when it is empty)."""
        entries = self._log.entries(keys)
        return entries[0].id if entries else None

    async def last_id(self, keys: ConversationKeys) -> str:
        """Id of the newest entry ("0-0" when the log is empty)."""
        entries = self._log.entries(keys)
        return entries[-1].id if entries else "0-0"


class MemoryLogReader(MemoryLogReads):
    """Follows many logs at once (`LogFollowerPort` in memory): new entries are handed to
    their log's handler in a callback soon after they are written."""

    def __init__(self, log: MemoryEventLog) -> None:
        super().__init__(log)
        self._follows: dict[ConversationKeys, tuple[str, EntryHandler]] = {}
        self._running = False

    async def start(self) -> None:
        """Start delivering (call once)."""
        self._running = True
        self._log.listen(self._schedule)
        for keys in list(self._follows):
            self._schedule(keys)

    async def stop(self) -> None:
        """Stop delivering anything."""
        self._running = False
        self._log.unlisten(self._schedule)
        self._follows.clear()

    def follow(self, keys: ConversationKeys, after: str, handler: EntryHandler) -> None:
        """Deliver every entry after `after` of the log to `handler`."""
        self._follows[keys] = (after, handler)
        self._schedule(keys)

    def unfollow(self, keys: ConversationKeys) -> None:
        """Stop delivering the log's entries."""
        self._follows.pop(keys, None)

    def _schedule(self, keys: ConversationKeys) -> None:
        if self._running and keys in self._follows:
            asyncio.get_running_loop().call_soon(self._deliver, keys)

    def _deliver(self, keys: ConversationKeys) -> None:
        follow = self._follows.get(keys)
        if not self._running or follow is None:
            return
        after, handler = follow
        bound = entry_id_key(after)
        entries = [e for e in self._log.entries(keys) if entry_id_key(e.id) > bound]
        if not entries:
            return
        self._follows[keys] = (entries[-1].id, handler)
        try:
            handler(entries)
        except Exception:
            log.exception("event log handler failed for %s", keys.log)


class MemoryLogMaintenance(MemoryLogReads):
    """Upkeep of every log under `prefix` (`LogMaintenancePort` in memory)."""

    def __init__(self, log: MemoryEventLog, prefix: str) -> None:
        super().__init__(log)
        self._prefix = prefix

    async def logs(self) -> AsyncIterator[ConversationKeys]:
        """The keys of every conversation under the prefix that has a log."""
        for keys in self._log.conversations():
            if keys.prefix == self._prefix:
                yield keys

    async def trim(self, keys: ConversationKeys, min_id: str) -> int:
        """Delete the entries older than `min_id`; returns how many."""
        return self._log.trim(keys, min_id)

    async def close_abandoned(
        self, keys: ConversationKeys, *, branch: str, request: str, frame: str, cutoff_ms: int
    ) -> bool:
        """End the open stream of `request` on `branch` if nobody holds the conversation and
        its log has been quiet since `cutoff_ms`."""
        if self._log.lease(keys) is not None:
            return False
        fields = self._log.state_fields(keys)
        prefix = state_prefix(branch)
        if fields.get(f"{prefix}status") not in ("streaming", "pending"):
            return False
        if fields.get(f"{prefix}req") != request:
            return False
        newest = self._log.entries(keys)[-1:]
        if newest and entry_id_key(newest[0].id)[0] > cutoff_ms:
            return False
        change = _state_json(state_fields(branch, StreamState.change_ended(streamed=True)))
        self._log.add(
            keys, _Pending(Kind.TERMINAL, frame, ALL, request, change, branch_tag(branch))
        )
        self._log.notify(keys)
        return True


def _state_json(state: dict[str, str] | None) -> str:
    return json.dumps(state, separators=(",", ":")) if state else ""
