"""Small in-memory implementations of the interfaces the shard's write chain and turn runner
depend on (`durachat_shard.actor.ports`, `durachat_shard.actor.writes`).

* `MemoryDatabase` opens transactions (`TransactionRunner`) whose writes (`TurnTransaction`)
  are buffered and committed together, or rolled back when the block raises; it can be fenced,
  refuse a kind of write, or hold a transaction open.
* `RecordingSink` records the frames a turn sends (`TurnSink`), each with the number of
  transactions committed when it was sent.
* `ScriptedAgent` streams a script of chunks (`TurnAgent`); a script step can also wait for an
  event, stay silent, or raise.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from durachat.agent import Turn
from durachat.tools import LedgerEntry, Tool
from durachat.types import JSONDict, UIChunk, UIMessage
from durachat_infra.store import BranchRef, DatabaseUnavailableError, FencedError, TurnStatus
from durachat_shard.recovery import IncidentWriter, Recovered

Op = tuple[Any, ...]


T = TypeVar("T")


@dataclass(eq=False)
class MemoryDatabase:
    """Commits whole transactions, one at a time, in the order they end."""

    committed: list[list[Op]] = field(default_factory=list)
    """The operations of each committed transaction, in commit order."""
    rolled_back: list[list[Op]] = field(default_factory=list)
    fenced: bool = False
    """Every transaction is refused on entry, as a former owner's are."""
    refuse: set[str] = field(default_factory=set)
    """Kinds of operation that fail (the database is unavailable)."""
    hold: asyncio.Event | None = None
    """While set to an unset event, a transaction waits for it before committing."""
    open_now: int = 0
    most_open: int = 0
    _next_pk: int = 1

    async def run_transaction(self, work: Callable[[MemoryTransaction], Awaitable[T]]) -> T:
        """A `TransactionRunner`: `work` in one fenced transaction."""
        async with self.transaction() as tx:
            return await work(tx)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[MemoryTransaction]:
        """One fenced transaction."""
        if self.fenced:
            raise FencedError(1, 1, 2)
        self.open_now += 1
        self.most_open = max(self.most_open, self.open_now)
        tx = MemoryTransaction(self)
        try:
            yield tx
            if self.hold is not None:
                await self.hold.wait()
        except BaseException:
            self.rolled_back.append(tx.ops)
            raise
        else:
            self.committed.append(tx.ops)
        finally:
            self.open_now -= 1

    @property
    def ops(self) -> list[Op]:
        """Every committed operation, in order."""
        return [op for ops in self.committed for op in ops]

    def kinds(self) -> list[list[str]]:
        """The kinds of operation of each committed transaction."""
        return [[op[0] for op in ops] for ops in self.committed]

    def allocate(self) -> int:
        pk = self._next_pk
        self._next_pk += 1
        return pk


@dataclass(eq=False)
class MemoryTransaction:
    """A `TurnTransaction` buffering its operations until its transaction commits."""

    db: MemoryDatabase
    ops: list[Op] = field(default_factory=list)

    def _do(self, *op: Any) -> None:
        if op[0] in self.db.refuse:
            raise DatabaseUnavailableError(f"{op[0]} refused")
        self.ops.append(op)

    async def note(self, label: str) -> None:
        """A write of the tests' own."""
        self._do("note", label)

    async def insert_chain(self, parent_pk: int | None, messages: Sequence[JSONDict]) -> list[int]:
        pks = [self.db.allocate() for _ in messages]
        self._do("insert", parent_pk, [m["id"] for m in messages], [dict(m) for m in messages])
        return pks

    async def update_message(self, pk: int, message: JSONDict) -> None:
        self._do("update", pk, message["id"], dict(message))

    async def reparent(self, pk: int, parent_pk: int | None) -> None:
        self._do("reparent", pk, parent_pk)

    async def set_leaf(self, branch: BranchRef, leaf_pk: int | None) -> None:
        self._do("leaf", branch, leaf_pk)

    async def trim_path(self, branch: BranchRef, keep: int) -> int:
        self._do("trim", branch, keep)
        return 0

    async def clear(self) -> None:
        self._do("clear")

    async def update_turn(
        self,
        request_id: str,
        *,
        status: TurnStatus | None = None,
        message_id: str | None = None,
        error: str | None = None,
        owner: str | None = None,
    ) -> None:
        self._do("turn", request_id, status, message_id, error)

    async def save_incident(
        self, incident_id: str, *, request_id: str, status: str, attempt: int, data: JSONDict
    ) -> None:
        self._do("incident", incident_id, status)


@dataclass(eq=False)
class RecordingSink:
    """A `TurnSink` keeping every frame as `(kind, fields)`, in order."""

    db: MemoryDatabase
    frames: list[tuple[str, JSONDict]] = field(default_factory=list)

    def _record(self, kind: str, **fields: Any) -> None:
        self.frames.append((kind, {**fields, "commits": len(self.db.committed)}))

    def stream_start(
        self,
        request_id: str,
        *,
        continuation: bool,
        base: tuple[str, int] | None = None,
        traceparent: str | None = None,
    ) -> None:
        self._record("start", request=request_id, continuation=continuation, base=base)

    def chunk(self, request_id: str, seq: int, chunk: UIChunk, *, continuation: bool) -> None:
        self._record("chunk", request=request_id, seq=seq, chunk=chunk, continuation=continuation)

    def error(
        self, request_id: str, text: str, *, message_ids: list[str] | None, continuation: bool
    ) -> None:
        self._record("error", request=request_id, text=text, message_ids=message_ids)

    def terminal(
        self,
        request_id: str,
        *,
        outcome: str | None,
        message_ids: list[str] | None,
        continuation: bool,
        streamed: bool,
    ) -> None:
        self._record(
            "terminal",
            request=request_id,
            outcome=outcome,
            message_ids=message_ids,
            continuation=continuation,
        )

    def messages(self, messages: list[UIMessage], *, exclude: str | None = None) -> None:
        self._record("messages", ids=[m["id"] for m in messages], exclude=exclude)

    def kinds(self) -> list[str]:
        return [kind for kind, _ in self.frames]

    def of(self, kind: str) -> list[JSONDict]:
        return [fields for k, fields in self.frames if k == kind]

    def chunks(self) -> list[UIChunk]:
        return [fields["chunk"] for fields in self.of("chunk")]


@dataclass(frozen=True, slots=True)
class Wait:
    """A script step: wait for `event` before going on."""

    event: asyncio.Event


@dataclass(frozen=True, slots=True)
class Silence:
    """A script step: produce nothing, ever."""


@dataclass(frozen=True, slots=True)
class Fail:
    """A script step: raise `error`."""

    error: Exception


Step = UIChunk | Wait | Silence | Fail


@dataclass(eq=False)
class ScriptedAgent:
    """A `TurnAgent` streaming its script; `turns` are the turns it was asked to answer."""

    script: list[Step]
    stream_stall_timeout: float = 0.0
    max_persisted_messages: int | None = None
    tools: Sequence[Tool] = ()
    turns: list[Turn] = field(default_factory=list)
    closed: bool = False
    """The stream was closed (its `finally` ran)."""

    def on_chat_message(self, turn: Turn) -> AsyncIterator[UIChunk]:
        self.turns.append(turn)
        return self._stream()

    async def _stream(self) -> AsyncIterator[UIChunk]:
        try:
            for step in self.script:
                if isinstance(step, Wait):
                    await step.event.wait()
                elif isinstance(step, Silence):
                    await asyncio.Event().wait()
                elif isinstance(step, Fail):
                    raise step.error
                else:
                    yield step
        finally:
            self.closed = True


class NoLedger:
    """A `ToolLedger` for turns that call no server tools."""

    async def begin(self, tool_call_id: str, tool_name: str, input: Any) -> LedgerEntry | None:
        return None

    async def finish(
        self, tool_call_id: str, *, output: Any = None, error: str | None = None
    ) -> None:
        return None


@dataclass(eq=False)
class RecordingRecovery:
    """`RecoveryHooks` noting how recovered turns ended."""

    finished_with: list[tuple[str, TurnStatus, UIMessage]] = field(default_factory=list)

    def settle(
        self, recovered: Recovered, outcome: TurnStatus
    ) -> Callable[[IncidentWriter], Awaitable[None]]:
        async def write(tx: IncidentWriter) -> None:
            status = "completed" if outcome != "error" else "failed"
            await tx.save_incident(
                recovered.incident.incident_id,
                request_id=recovered.request.request_id,
                status=status,
                attempt=1,
                data={},
            )

        return write

    def finished(self, recovered: Recovered, outcome: TurnStatus, reply: UIMessage) -> None:
        self.finished_with.append((recovered.request.request_id, outcome, reply))
