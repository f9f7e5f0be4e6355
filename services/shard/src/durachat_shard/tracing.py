"""The shard's spans of a turn (docs/observability.md#traces).

A chat request arrives with the gateway's W3C `traceparent` on the forwarded call; the shard's
`chat.accept` span is its child, and the turn's `chat.turn` span a child of that. The turn
writes its own traceparent on the control entry that starts its stream, where gateways (the
delivery span) and recovery on any shard (the `chat.recovery` span's link) find it.

Everything here is per turn or per frame, never per chunk. With no SDK configured the tracer
is a no-op and `traceparent` returns None, so nothing is written to the log either.
"""

from __future__ import annotations

from collections.abc import Mapping

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, Span, SpanContext, SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

TRACER = trace.get_tracer("durachat.shard")

_PROPAGATOR = TraceContextTextMapPropagator()


def incoming_context(headers: Mapping[str, str]) -> Context | None:
    """The trace context a forwarded call carries (its `traceparent` header), if any."""
    if "traceparent" not in headers:
        return None
    return _PROPAGATOR.extract(headers)


def current_span_context() -> SpanContext | None:
    """The context of the current span, when there is a valid one."""
    context = trace.get_current_span().get_span_context()
    return context if context.is_valid else None


def traceparent(span: Span) -> str | None:
    """The W3C traceparent of a recording span (None for a no-op one)."""
    if not span.is_recording():
        return None
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, trace.set_span_in_context(span))
    return carrier.get("traceparent")


def parse_traceparent(value: object) -> SpanContext | None:
    """The span context a stored traceparent names (None when absent or malformed)."""
    if not isinstance(value, str) or not value:
        return None
    context = trace.get_current_span(_PROPAGATOR.extract({"traceparent": value}))
    span_context = context.get_span_context()
    return span_context if span_context.is_valid else None


def parent_of(span_context: SpanContext | None) -> Context | None:
    """A context whose current span is `span_context` (to start a child of it)."""
    if span_context is None:
        return None
    return trace.set_span_in_context(trace.NonRecordingSpan(span_context))


def start_recovery_span(
    interrupted: SpanContext | None, attributes: Mapping[str, str | int]
) -> Span:
    """The `chat.recovery` span of a recovered turn: a trace of its own, linked to the
    interrupted turn's span when its traceparent was found in the log."""
    links = [Link(interrupted)] if interrupted is not None else None
    return TRACER.start_span(
        "chat.recovery",
        context=Context(),
        kind=SpanKind.INTERNAL,
        links=links,
        attributes=dict(attributes),
    )
