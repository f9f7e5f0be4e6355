"""Recording events through the OpenTelemetry API (never the SDK).

An event becomes a span event named after its type on the current span when that span is
recording; otherwise it is recorded in a short span of its own, `durachat.event`, which carries
the attributes and the same span event. Tracers come from the tracer provider set with
`set_tracer_provider`, else from OpenTelemetry's global one, looked up at each event.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.util.types import AttributeValue

from durachat.observability.events import Event

TRACER_NAME = "durachat"
EVENT_SPAN_NAME = "durachat.event"

logger = logging.getLogger("durachat.observability")

_provider: trace.TracerProvider | None = None


def set_tracer_provider(provider: trace.TracerProvider | None) -> None:
    """Record events with `provider` instead of OpenTelemetry's global tracer provider
    (`None` goes back to the global one). Meant for tests and embedding processes; the global
    provider can be set only once per process, this one as often as needed."""
    global _provider  # noqa: PLW0603 - the one override of this module
    _provider = provider


def tracer_provider() -> trace.TracerProvider:
    """The provider events are recorded with: the one set here, else the global one."""
    return _provider if _provider is not None else trace.get_tracer_provider()


def event_attributes(event: Event) -> dict[str, AttributeValue]:
    """The OpenTelemetry attributes of an event: its envelope, and each payload field as
    `durachat.payload.<key>` (non-scalar values as JSON, `None` left out)."""
    attributes: dict[str, AttributeValue] = {
        "durachat.event.type": event.type,
        "durachat.event.channel": event.channel,
        "durachat.agent": event.agent,
        "durachat.conversation": event.name,
    }
    if event.tenant is not None:
        attributes["durachat.tenant"] = event.tenant
    attributes.update(_flatten_payload(event.payload))
    return attributes


def _flatten_payload(payload: Mapping[str, Any]) -> dict[str, AttributeValue]:
    flattened: dict[str, AttributeValue] = {}
    for key, value in payload.items():
        if value is None:
            continue
        if isinstance(value, str | bool | int | float):
            flattened[f"durachat.payload.{key}"] = value
        else:
            flattened[f"durachat.payload.{key}"] = json.dumps(
                value, default=str, separators=(",", ":")
            )
    return flattened


def record(event: Event, *, time_ns: int) -> None:
    """Record `event` (which happened at `time_ns`) with OpenTelemetry."""
    span = trace.get_current_span()
    provider = tracer_provider()
    if not span.is_recording() and isinstance(
        provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider
    ):
        return  # no SDK configured: nothing could record it
    attributes = event_attributes(event)
    if span.is_recording():
        span.add_event(event.type, attributes, timestamp=time_ns)
        return
    own = provider.get_tracer(TRACER_NAME).start_span(
        EVENT_SPAN_NAME, kind=trace.SpanKind.INTERNAL, attributes=attributes, start_time=time_ns
    )
    try:
        own.add_event(event.type, attributes, timestamp=time_ns)
    finally:
        own.end()
