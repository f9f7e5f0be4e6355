"""The narrow interfaces a turn is run against.

`TurnRunner` knows nothing of Redis, SQL or litellm: the actor hands it the conversation's
emitter (`TurnSink`), its write chain over fenced transactions (`TurnWrites`), the agent
(`TurnAgent`) and the recovery planner (`RecoveryHooks`), which satisfy these structurally.
Tests hand it small in-memory implementations.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Protocol

from durachat.agent import Turn
from durachat.tools import Tool
from durachat.types import UIChunk, UIMessage
from durachat_infra.store import TurnStatus
from durachat_shard.recovery import IncidentWriter, Recovered
from durachat_shard.transcript import PathWriter


class TurnTransaction(PathWriter, IncidentWriter, Protocol):
    """One fenced transaction, as a turn writes in it: its reply on the branch's path, its
    turn record, and the incident of a recovered turn (`FencedTransaction` in the shard)."""

    async def update_turn(
        self,
        request_id: str,
        *,
        status: TurnStatus | None = None,
        message_id: str | None = None,
        error: str | None = None,
        owner: str | None = None,
    ) -> None: ...


TurnWrite = Callable[[TurnTransaction], Awaitable[None]]


class TurnWrites(Protocol):
    """The conversation's write chain (`WriteChain`): writes run one after another in the
    order they were queued; a failed one fails those queued after it."""

    def behind(self, work: TurnWrite) -> Awaitable[None]:
        """Queue a write; the caller need not wait for it."""
        ...

    async def write(self, work: TurnWrite) -> None:
        """Queue a write and wait for it; raises what it raised."""
        ...


class TurnSink(Protocol):
    """Where a turn's frames go, in order (`Emitter`: the conversation's event log)."""

    def stream_start(
        self,
        request_id: str,
        *,
        continuation: bool,
        base: tuple[str, int] | None = None,
        traceparent: str | None = None,
    ) -> None: ...

    def chunk(self, request_id: str, seq: int, chunk: UIChunk, *, continuation: bool) -> None: ...

    def error(
        self, request_id: str, text: str, *, message_ids: list[str] | None, continuation: bool
    ) -> None: ...

    def terminal(
        self,
        request_id: str,
        *,
        outcome: str | None,
        message_ids: list[str] | None,
        continuation: bool,
        streamed: bool,
    ) -> None: ...

    def messages(self, messages: list[UIMessage], *, exclude: str | None = None) -> None: ...


class TurnAgent(Protocol):
    """The agent, as a turn runs it (`durachat.Agent`)."""

    @property
    def tools(self) -> Sequence[Tool]: ...

    @property
    def stream_stall_timeout(self) -> float: ...

    @property
    def max_persisted_messages(self) -> int | None: ...

    def on_chat_message(self, turn: Turn) -> AsyncIterator[UIChunk]: ...


class RecoveryHooks(Protocol):
    """How a recovered turn closes its incident (`RecoveryPlanner`)."""

    def settle(
        self, recovered: Recovered, outcome: TurnStatus
    ) -> Callable[[IncidentWriter], Awaitable[None]]:
        """The write, made with the turn's own, that records how the incident ended."""
        ...

    def finished(self, recovered: Recovered, outcome: TurnStatus, reply: UIMessage) -> None:
        """Told once the recovered turn has ended and its terminal frame is out."""
        ...
