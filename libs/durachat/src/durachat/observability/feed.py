"""The tenants' event feed as subscribers receive it (docs/observability.md#subscribing-to-events):
one event (`FeedEvent`) and the filters a subscriber chooses events by (`EventFilter`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class FeedEvent:
    """An event of a tenant's feed.

    Attributes:
        type: the event type (`chat:turn:started`, `chat:recovery:detected`, ...).
        tenant: the tenant whose conversation it concerns.
        agent: the agent name.
        name: the conversation name.
        time: when it was emitted, in milliseconds since the epoch.
        data: the event's payload.
        process: the process that emitted it (`shard:<id>`, `gateway:<id>`, `jobs:<id>`).
        id: the stream entry id (set once it was read back from Redis).
    """

    type: str
    tenant: str
    agent: str
    name: str
    time: int
    data: dict[str, Any]
    process: str
    id: str | None = None

    def to_json(self) -> str:
        """The event as subscribers receive it (with `id` once it has one)."""
        body: dict[str, Any] = {
            "type": self.type,
            "tenant": self.tenant,
            "agent": self.agent,
            "name": self.name,
            "time": self.time,
            "data": self.data,
            "process": self.process,
        }
        if self.id is not None:
            body = {"id": self.id, **body}
        return json.dumps(body, default=str, separators=(",", ":"))

    @classmethod
    def from_entry(cls, entry_id: str, raw: str) -> FeedEvent:
        """Decode a stream entry's JSON (`ValueError` if it is not an event)."""
        body = json.loads(raw)
        if not isinstance(body, dict) or not isinstance(body.get("type"), str):
            raise ValueError("not an event")
        data = body.get("data")
        return cls(
            type=body["type"],
            tenant=str(body.get("tenant", "")),
            agent=str(body.get("agent", "")),
            name=str(body.get("name", "")),
            time=int(body.get("time", 0)),
            data=data if isinstance(data, dict) else {},
            process=str(body.get("process", "")),
            id=entry_id,
        )


@dataclass(frozen=True, slots=True)
class EventFilter:
    """Which events a subscriber wants.

    Attributes:
        types: type patterns; an entry ending in `*` matches every type starting with what
            precedes it (`chat:recovery:*`, `*`). Empty: every type.
        agent: only this agent's conversations.
        name: only this conversation name.
        prefix: only conversation names starting with it (a client token's prefix).
        tenant: only this tenant (the operator's feed of every tenant).
    """

    types: tuple[str, ...] = ()
    agent: str | None = None
    name: str | None = None
    prefix: str | None = None
    tenant: str | None = None

    @classmethod
    def parse_types(cls, raw: str | None) -> tuple[str, ...]:
        """Comma-separated type patterns as a tuple (blank entries dropped)."""
        if not raw:
            return ()
        return tuple(part.strip() for part in raw.split(",") if part.strip())

    def matches(self, event: FeedEvent) -> bool:
        """Whether `event` passes every condition."""
        if self.tenant is not None and event.tenant != self.tenant:
            return False
        if self.agent is not None and event.agent != self.agent:
            return False
        if self.name is not None and event.name != self.name:
            return False
        if self.prefix is not None and not event.name.startswith(self.prefix):
            return False
        return type_matches(self.types, event.type)


def type_matches(patterns: tuple[str, ...] | list[str], event_type: str) -> bool:
    """Whether `event_type` matches one of `patterns` (none: every type)."""
    if not patterns:
        return True
    for pattern in patterns:
        if pattern.endswith("*"):
            if event_type.startswith(pattern[:-1]):
                return True
        elif event_type == pattern:
            return True
    return False
