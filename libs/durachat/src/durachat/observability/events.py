"""The event envelope, the event types durachat emits, and the channel each type is published on.

The envelope is the reference's (`{type, agent, name, payload, timestamp}`, timestamp in
milliseconds since the epoch) plus the tenant. Channels follow the reference's routing for the
prefixes durachat uses; a type with none of them goes to `agents:other`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final


class EventType:
    """The event types durachat emits (plain strings; callers build the payloads)."""

    RECOVERY_DETECTED: Final = "chat:recovery:detected"
    RECOVERY_ATTEMPT: Final = "chat:recovery:attempt"
    RECOVERY_SCHEDULED: Final = "chat:recovery:scheduled"
    RECOVERY_COMPLETED: Final = "chat:recovery:completed"
    RECOVERY_SKIPPED: Final = "chat:recovery:skipped"
    RECOVERY_FAILED: Final = "chat:recovery:failed"
    RECOVERY_EXHAUSTED: Final = "chat:recovery:exhausted"
    MESSAGE_REQUEST: Final = "message:request"
    MESSAGE_RESPONSE: Final = "message:response"
    MESSAGE_CLEAR: Final = "message:clear"
    MESSAGE_CANCEL: Final = "message:cancel"
    MESSAGE_ERROR: Final = "message:error"
    TOOL_RESULT: Final = "tool:result"
    TOOL_APPROVAL: Final = "tool:approval"
    STREAM_STALLED: Final = "chat:stream:stalled"
    TRANSCRIPT_REPAIRED: Final = "chat:transcript:repaired"
    TRANSCRIPT_FORKED: Final = "chat:transcript:forked"
    TURN_STARTED: Final = "chat:turn:started"
    TURN_FINISHED: Final = "chat:turn:finished"
    TURN_FAILED: Final = "chat:turn:failed"
    TOOL_CALL: Final = "tool:call"
    TOOL_APPROVAL_REQUESTED: Final = "tool:approval:requested"
    BRANCH_FORKED: Final = "chat:branch:forked"
    CONNECTION_OPENED: Final = "chat:connection:opened"
    CONNECTION_CLOSED: Final = "chat:connection:closed"
    QUOTA_REFUSED: Final = "chat:quota:refused"


EVENT_TYPES: Final[frozenset[str]] = frozenset(
    value for key, value in vars(EventType).items() if key.isupper() and isinstance(value, str)
)
"""Every type in `EventType`."""


class Channel:
    """Channel names. `ALL` is not a channel events are published on: subscribing to it
    receives the events of every channel."""

    TRANSCRIPT: Final = "agents:transcript"
    CHAT: Final = "agents:chat"
    MESSAGE: Final = "agents:message"
    FIBER: Final = "agents:fiber"
    OTHER: Final = "agents:other"
    ALL: Final = "*"


def channel_for(event_type: str) -> str:
    """The channel an event type is published on.

    `chat:transcript:*` and `transcript:*` → `agents:transcript`; other `chat:*` →
    `agents:chat`; `message:*` and `tool:*` → `agents:message`; `fiber:*` → `agents:fiber`;
    anything else → `agents:other`.
    """
    if event_type.startswith(("transcript:", "chat:transcript:")):
        return Channel.TRANSCRIPT
    if event_type.startswith("chat:"):
        return Channel.CHAT
    if event_type.startswith(("message:", "tool:")):
        return Channel.MESSAGE
    if event_type.startswith("fiber:"):
        return Channel.FIBER
    return Channel.OTHER


@dataclass(frozen=True)
class Event:
    """One observability event.

    `agent` is the agent name, `name` the conversation name, `timestamp` milliseconds since the
    epoch, `tenant` the owning tenant when known.
    """

    type: str
    agent: str
    name: str
    payload: dict[str, Any] = field(default_factory=dict, hash=False)
    timestamp: int = 0
    tenant: str | None = None

    @property
    def channel(self) -> str:
        """The channel this event is published on (`channel_for(self.type)`)."""
        return channel_for(self.type)

    def to_dict(self) -> dict[str, Any]:
        """The reference's envelope as a JSON-ready dict, plus `tenant` when set."""
        envelope: dict[str, Any] = {
            "type": self.type,
            "agent": self.agent,
            "name": self.name,
            "payload": self.payload,
            "timestamp": self.timestamp,
        }
        if self.tenant is not None:
            envelope["tenant"] = self.tenant
        return envelope
