"""Structured observability events: the reference's `chat:*`, `message:*` and `tool:*` events.

`emit` builds an `Event`, delivers it to the in-process subscribers of its channel
(`subscribe`), and records it with OpenTelemetry (API only: a span event on the current span,
or a `durachat.event` span of its own when none is recording). Processes configure the SDK
(`durachat_infra.telemetry.configure_telemetry`); without it the recording costs nothing.

Subscriptions and delivery are meant for one asyncio loop (no locking): handlers run
synchronously inside `emit` and must be quick.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from durachat.observability.events import EVENT_TYPES, Channel, Event, EventType, channel_for
from durachat.observability.subscribers import Handler, has_subscribers, publish, subscribe
from durachat.observability.tracing import (
    EVENT_SPAN_NAME,
    TRACER_NAME,
    event_attributes,
    record,
    set_tracer_provider,
    tracer_provider,
)

__all__ = [
    "EVENT_SPAN_NAME",
    "EVENT_TYPES",
    "TRACER_NAME",
    "Channel",
    "Event",
    "EventType",
    "Handler",
    "channel_for",
    "emit",
    "event_attributes",
    "has_subscribers",
    "set_tracer_provider",
    "subscribe",
    "tracer_provider",
]

logger = logging.getLogger("durachat.observability")


def emit(
    type: str,
    *,
    agent: str,
    name: str,
    payload: Mapping[str, Any] | None = None,
    tenant: str | None = None,
) -> Event:
    """Emit one event: `agent` is the agent name, `name` the conversation name.

    Subscribers of the event's channel (and of `"*"`) are called first; a failing one is
    logged and never reaches the caller. Then the event is recorded with OpenTelemetry. The
    payload is copied (shallowly) into the returned event.
    """
    now_ns = time.time_ns()
    event = Event(
        type=type,
        agent=agent,
        name=name,
        payload=dict(payload) if payload is not None else {},
        timestamp=now_ns // 1_000_000,
        tenant=tenant,
    )
    publish(event)
    try:
        record(event, time_ns=now_ns)
    except Exception:
        logger.exception("could not record event %s with OpenTelemetry", type)
    return event
