"""The gateway's traces and its metrics of delivery (docs/observability.md).

Traces: a client's chat request is a `chat.receive` span, whose W3C `traceparent` travels on
the signed call to the owner shard (`trace_headers`); the shard's turn writes its own
traceparent on the entry that starts its stream, and `DeliveryTracker` turns the delivery of
that stream (start entry → terminal entry) into a `chat.deliver` span, a child of the turn.

Metrics: the delivery latency of log entries (their time in the log → handed to the sockets),
frames sent, replays and slow-consumer disconnects. Children are bound once, here: a chunk
costs an increment and a histogram observation, never a label lookup.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from prometheus_client import Counter, Histogram

from durachat.protocol import MessageType
from durachat_infra.eventlog import Kind, LogEntry

TRACER = trace.get_tracer("durachat.gateway")
_PROPAGATOR = TraceContextTextMapPropagator()

DELIVERY_LATENCY = Histogram(
    "durachat_gateway_delivery_latency_seconds",
    "From an event log entry's time (its id) to its frame being handed to the client sockets "
    "(the oldest entry of each batch read together)",
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
)
FRAMES_OUT = Counter("durachat_gateway_frames_out_total", "Frames queued for client sockets")
REPLAYS = Counter(
    "durachat_gateway_replays_total",
    "Streams replayed to a client: `ack` (the resume handshake), `cursor` (a resume cursor)",
    ["kind"],
)
REPLAYS_ACK = REPLAYS.labels("ack")
REPLAYS_CURSOR = REPLAYS.labels("cursor")
SLOW_CONSUMERS = Counter(
    "durachat_gateway_slow_consumer_disconnects_total",
    "Clients disconnected (close code 1013) because their send queue was full",
)

_observe_latency = DELIVERY_LATENCY.observe


def tracing_enabled() -> bool:
    """Whether this process exports spans (an SDK provider is installed)."""
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


@contextlib.contextmanager
def receive_span(frame: Mapping[str, Any], tenant: str, agent: str) -> Iterator[None]:
    """The `chat.receive` span of a client's chat request, current for the block; a no-op
    for other frames."""
    if frame.get("type") != MessageType.USE_CHAT_REQUEST.value:
        yield
        return
    with TRACER.start_as_current_span(
        "chat.receive",
        kind=SpanKind.SERVER,
        attributes={
            "durachat.request_id": str(frame.get("id") or ""),
            "durachat.agent": agent,
            "durachat.tenant": tenant,
        },
    ):
        yield


def trace_headers() -> dict[str, str] | None:
    """The `traceparent` header of the current span, for a call to a shard (None when no
    span is current)."""
    if not trace.get_current_span().get_span_context().is_valid:
        return None
    headers: dict[str, str] = {}
    _PROPAGATOR.inject(headers)
    return headers


def observe_delivery(entry_id: str, now: float) -> None:
    """Record the delivery latency of the entry `entry_id` (`<ms>-<seq>`) at `now`."""
    ms = entry_id.partition("-")[0]
    if ms.isdigit():
        _observe_latency(max(0.0, now - int(ms) / 1000))


class DeliveryTracker:
    """A channel's `chat.deliver` spans: one per traced stream, from its start entry to its
    terminal entry, a child of the turn that wrote them."""

    __slots__ = ("_open",)

    def __init__(self) -> None:
        self._open: dict[str, tuple[str, int]] = {}

    def __bool__(self) -> bool:
        return bool(self._open)

    def control(self, entry: LogEntry) -> None:
        """Note a stream that starts with its turn's traceparent."""
        control = entry.control()
        parent = control.get("tp")
        if control.get("op") == "start" and isinstance(parent, str):
            self._open[entry.request] = (parent, time.time_ns())

    def terminal(self, entry: LogEntry, connections: int) -> None:
        """End the span of the stream `entry` ends, if it is tracked."""
        found = self._open.pop(entry.request, None)
        if found is None:
            return
        parent, started = found
        span = TRACER.start_span(
            "chat.deliver",
            context=_PROPAGATOR.extract({"traceparent": parent}),
            kind=SpanKind.PRODUCER,
            start_time=started,
            attributes={
                "durachat.request_id": entry.request,
                "durachat.connections": connections,
                "durachat.terminal_entry": entry.id,
            },
        )
        span.end()

    @staticmethod
    def tracks(entry: LogEntry) -> bool:
        """Whether an entry concerns delivery spans (a stream's start or end)."""
        return entry.kind is Kind.CONTROL or entry.kind is Kind.TERMINAL
