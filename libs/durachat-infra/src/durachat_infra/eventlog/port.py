"""The event log port: what shards, gateways and jobs ask of conversation event logs.

Two adapters implement it: the Redis one (`LogWriter`, `LogReads`, `LogReader`,
`LogMaintenance`) and the in-memory one (`durachat_infra.eventlog.memory`, for tests and
tools). One conformance suite (`tests/integration/infra/test_eventlog*.py`) runs against both, so
what is promised here is what the tests check. See docs/architecture.md#the-event-log and
docs/architecture.md#ports-and-adapters.

A conversation's log is named by its `ConversationKeys`. Its entries have ids `<ms>-<seq>`
that increase along the log (compare them with `entry_id_key`) and are never handed out twice,
even after trimming. Beside the log is its stream state: one `StreamState` per branch, changed
only by the entries that carry a state change, in the same step as the entry is added.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Protocol

from durachat.protocol import MAIN_BRANCH
from durachat_infra.eventlog.entries import ALL, Kind, LogEntry
from durachat_infra.eventlog.state import StreamState
from durachat_infra.keys import ConversationKeys

__all__ = [
    "EntryHandler",
    "LogFollowerPort",
    "LogMaintenancePort",
    "LogReadsPort",
    "LogWriterPort",
]

EntryHandler = Callable[[list[LogEntry]], None]
"""Receives the entries of one followed log, in order."""


class LogWriterPort(Protocol):
    """Appends a conversation owner's entries, fenced by the conversation's lease.

    `append` never waits: entries are written in the order appended, per conversation, in
    batches. A writer with an `owner` writes a batch only while the conversation's lease names
    that owner; otherwise the whole batch for that conversation is refused, its waitable
    entries fail with `LogFencedError` and the writer's `on_fenced` callback is told (once per
    refused batch). A writer without an owner does not check the lease. A state change given
    with an entry is stored in the entry and applied to the stream state, with the value `$id`
    standing for the new entry's id. The log keeps about its newest `maxlen` entries (at least
    that many), and, with `max_bytes`, drops its oldest entries while their values hold more
    than that many bytes (the newest entry is always kept).

    A writer given a `reclaim` callback asks it first, when a batch is refused: if it took the
    lease back (it returns True), the batch is written again ahead of the entries queued since.
    """

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
        """Queue an entry (`branch` is "" for main)."""
        ...

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
        ...

    def pending(self, keys: ConversationKeys) -> bool:
        """Whether entries of the conversation are queued or being written."""
        ...

    async def flush(self) -> None:
        """Wait until every entry queued so far is written or refused."""
        ...

    async def close(self) -> None:
        """Flush and stop."""
        ...


class LogReadsPort(Protocol):
    """One-shot reads of conversation logs and their stream state."""

    async def read_range(
        self, keys: ConversationKeys, start: str = "-", *, page: int = 1000
    ) -> list[LogEntry]:
        """Every entry from id `start` (inclusive; `-`: the oldest) to the end, in order;
        `page` bounds how many entries one round trip fetches."""
        ...

    async def read_states(self, keys: ConversationKeys) -> dict[str, StreamState]:
        """The stream state of every branch that has one (`main` always)."""
        ...

    async def read_state(self, keys: ConversationKeys, branch: str = MAIN_BRANCH) -> StreamState:
        """The stream state of one branch (idle if it has none)."""
        ...

    async def snapshot(self, keys: ConversationKeys) -> tuple[dict[str, StreamState], str]:
        """The states of every branch and the id of the newest entry ("0-0" for an empty
        log), read together: no entry is added between the two."""
        ...

    async def first_id(self, keys: ConversationKeys) -> str | None:
        """Id of the oldest entry still in the log (`None` when it is empty)."""
        ...

    async def last_id(self, keys: ConversationKeys) -> str:
        """Id of the newest entry ("0-0" when the log is empty)."""
        ...


class LogFollowerPort(LogReadsPort, Protocol):
    """Follows many logs at once (a gateway's reader).

    Each followed log's new entries are handed to its handler in order, synchronously on the
    event loop and never twice; a handler that raises is logged, and the entries after the
    ones it failed on are still delivered to it.
    """

    async def start(self) -> None:
        """Start delivering (call once)."""
        ...

    async def stop(self) -> None:
        """Stop delivering anything."""
        ...

    def follow(self, keys: ConversationKeys, after: str, handler: EntryHandler) -> None:
        """Deliver every entry after id `after` of the log to `handler`, including entries
        appended from now on (a log followed while the reader waits is picked up at once)."""
        ...

    def unfollow(self, keys: ConversationKeys) -> None:
        """Stop delivering the log's entries."""
        ...


class LogMaintenancePort(LogReadsPort, Protocol):
    """Upkeep of every log under one key prefix (the jobs service)."""

    def logs(self) -> AsyncIterator[ConversationKeys]:
        """The keys of every conversation that has a log."""
        ...

    async def trim(self, keys: ConversationKeys, min_id: str) -> int:
        """Delete the entries older than id `min_id`; returns how many went."""
        ...

    async def close_abandoned(
        self, keys: ConversationKeys, *, branch: str, request: str, frame: str, cutoff_ms: int
    ) -> bool:
        """End the open stream of `request` on `branch` with the terminal `frame`, if no shard
        holds the conversation's lease, the branch's state still shows that request pending or
        streaming, and the newest entry is not newer than `cutoff_ms`. The terminal entry (for
        everyone, tagged with the branch) sets the branch's status to `done`. Returns whether
        it closed the stream."""
        ...


if TYPE_CHECKING:
    # Both adapters implement every part of the port (checked by mypy, not at run time).
    from durachat_infra.eventlog.maintenance import LogMaintenance
    from durachat_infra.eventlog.memory import (
        MemoryLogMaintenance,
        MemoryLogReader,
        MemoryLogReads,
        MemoryLogWriter,
    )
    from durachat_infra.eventlog.reader import LogReader, LogReads
    from durachat_infra.eventlog.writer import LogWriter

    _WRITERS: tuple[type[LogWriterPort], ...] = (LogWriter, MemoryLogWriter)
    _READS: tuple[type[LogReadsPort], ...] = (LogReads, MemoryLogReads)
    _FOLLOWERS: tuple[type[LogFollowerPort], ...] = (LogReader, MemoryLogReader)
    _UPKEEP: tuple[type[LogMaintenancePort], ...] = (LogMaintenance, MemoryLogMaintenance)
