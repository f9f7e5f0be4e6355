"""What the parts of one conversation's actor share: its queued turns, the turn running now,
and the flags its lifecycle sets. Plain data; each part changes only what it is in charge of."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.trace import SpanContext

from durachat.agent import TurnResult
from durachat.types import JSONDict, UIMessage
from durachat_shard.recovery import Recovered
from durachat_shard.requests import ChatRequest


@dataclass(slots=True)
class QueuedTurn:
    """A turn waiting in the conversation's queue (and, once it runs, the turn running)."""

    request: ChatRequest
    requester: str
    """The connection that sent it ("" for programmatic and recovered turns)."""
    generation: int
    """The clear generation it was queued in: a clear since then skips it."""
    anchor: str | None
    """Id of the message the reply answers (the leaf when the request was accepted)."""
    accepted: asyncio.Future[None]
    """Resolves once the request and its messages are durable."""
    continuation: bool = False
    seq: int = 0
    """Order of the send among this conversation's sends (for `latest`-like strategies)."""
    debounce_until: float | None = None
    """When a debounced send may run (monotonic time)."""
    done: asyncio.Future[TurnResult] | None = None
    """Told how the turn ended (programmatic turns wait on it)."""
    prepare: Callable[[QueuedTurn], None] | None = None
    """Run when the turn reaches the front, before it starts (`save_messages`)."""
    recovery: Recovered | None = None
    """Set when the turn recovers an interrupted one."""
    trace: SpanContext | None = None
    """The span that accepted it (its turn's span is a child), when traced."""


@dataclass(slots=True)
class ActiveTurn:
    """The turn running now."""

    request_id: str
    abort: asyncio.Event
    """Set to interrupt it (a cancel, a clear, a fork, a stop)."""


@dataclass(slots=True)
class PendingContinuation:
    """A continuation asked for by tool results or approvals, not queued yet."""

    request_id: str
    requester: str
    timer: asyncio.TimerHandle | None = None


def _set_event() -> asyncio.Event:
    event = asyncio.Event()
    event.set()
    return event


@dataclass(eq=False)
class ActorState:
    """The mutable state of one conversation's actor."""

    turns: asyncio.Queue[QueuedTurn] = field(default_factory=asyncio.Queue)
    """Accepted turns waiting to run, in order."""
    generation: int = 0
    """Bumped by every clear: queued turns of an older generation are skipped."""
    submits: int = 0
    """How many sends (`submit-message` requests) have been queued."""
    active: ActiveTurn | None = None
    inflight: UIMessage | None = None
    """The reply the running turn is building (not on the path yet; clients show it)."""
    idle: asyncio.Event = field(default_factory=_set_event)
    """Set while no turn runs."""
    continuation: PendingContinuation | None = None
    last_body: JSONDict | None = None
    """The custom body fields of the last request (continuations and programmatic turns
    reuse them)."""
    last_client_tools: list[JSONDict] | None = None
    stashes: dict[str, Any] = field(default_factory=dict)
    """What running turns handed to `stash`, by request id."""
    stopping: bool = False
    checkpointing: bool = False
    """Stopping to hand the conversation over: the running turn is left to the next owner."""
    fenced: bool = False
    """A write was refused: another shard owns the conversation now."""
    write_failed: bool = False
    """A write of the chain failed for another reason than fencing."""

    @property
    def turn_pending(self) -> bool:
        """Whether a turn is running or queued."""
        return self.active is not None or not self.turns.empty()

    def abort_active(self) -> str | None:
        """Interrupt the running turn, if there is one; returns its request id."""
        if self.active is None:
            return None
        self.active.abort.set()
        return self.active.request_id


RECENT_REQUESTS = 512
"""How many recent request ids the actor remembers (repeats, and requests that forked)."""
