"""durachat.observability: the envelope, channel routing, subscriptions, and recording with
OpenTelemetry (read back from an in-memory exporter)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from durachat import observability
from durachat.observability import Channel, Event, EventType, channel_for, emit, subscribe
from support.telemetry import recorded_events

Subscribe = Callable[[str, Callable[[Event], None]], Callable[[], None]]


@pytest.fixture
def subscribed() -> Iterator[Subscribe]:
    """`subscribe`, with every subscription removed at the end of the test."""
    unsubscribers: list[Callable[[], None]] = []

    def _subscribe(channel: str, handler: Callable[[Event], None]) -> Callable[[], None]:
        unsubscribe = subscribe(channel, handler)
        unsubscribers.append(unsubscribe)
        return unsubscribe

    yield _subscribe
    for unsubscribe in unsubscribers:
        unsubscribe()


@pytest.fixture
def otel() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    with recorded_events() as recording:
        yield recording


@pytest.mark.parametrize(
    ("event_type", "channel"),
    [
        ("chat:transcript:repaired", "agents:transcript"),
        ("transcript:anything", "agents:transcript"),
        ("chat:recovery:detected", "agents:chat"),
        ("chat:stream:stalled", "agents:chat"),
        ("chat:transcriptx", "agents:chat"),
        ("message:request", "agents:message"),
        ("tool:approval", "agents:message"),
        ("fiber:start", "agents:fiber"),
        ("connect", "agents:other"),
        ("schedule:create", "agents:other"),
        ("chatter", "agents:other"),
        ("", "agents:other"),
    ],
)
def test_channel_routing(event_type: str, channel: str) -> None:
    assert channel_for(event_type) == channel
    assert Event(type=event_type, agent="a", name="n").channel == channel


def test_event_types_are_the_reference_names() -> None:
    assert EventType.RECOVERY_EXHAUSTED == "chat:recovery:exhausted"
    assert EventType.TRANSCRIPT_REPAIRED == "chat:transcript:repaired"
    assert EventType.TRANSCRIPT_FORKED == "chat:transcript:forked"
    # The reference's 17, and those of the event feed (docs/observability.md).
    assert len(observability.EVENT_TYPES) == 17 + 9
    assert EventType.TURN_STARTED == "chat:turn:started"
    assert {channel_for(t) for t in observability.EVENT_TYPES} == {
        Channel.CHAT,
        Channel.MESSAGE,
        Channel.TRANSCRIPT,
    }


def test_emit_builds_the_envelope(subscribed: Subscribe) -> None:
    payload = {"requestId": "r1"}
    received: list[Event] = []
    subscribed(Channel.MESSAGE, received.append)

    event = emit(EventType.MESSAGE_CANCEL, agent="chat-agent", name="c1", payload=payload)
    payload["requestId"] = "changed"

    assert received == [event]
    assert event.type == "message:cancel"
    assert (event.agent, event.name, event.tenant) == ("chat-agent", "c1", None)
    assert event.payload == {"requestId": "r1"}
    # milliseconds since the epoch, like Date.now()
    assert 1_600_000_000_000 < event.timestamp < 10_000_000_000_000
    assert event.to_dict() == {
        "type": "message:cancel",
        "agent": "chat-agent",
        "name": "c1",
        "payload": {"requestId": "r1"},
        "timestamp": event.timestamp,
    }
    tenant_event = emit("message:clear", agent="a", name="n", payload={}, tenant="t1")
    assert tenant_event.to_dict()["tenant"] == "t1"


def test_subscribers_get_only_their_channel(subscribed: Subscribe) -> None:
    chat: list[str] = []
    message: list[str] = []
    everything: list[str] = []
    subscribed(Channel.CHAT, lambda e: chat.append(e.type))
    subscribed(Channel.MESSAGE, lambda e: message.append(e.type))
    subscribed(Channel.ALL, lambda e: everything.append(e.type))

    for event_type in ("chat:recovery:attempt", "tool:result", "chat:transcript:repaired", "x"):
        emit(event_type, agent="a", name="n", payload={})

    assert chat == ["chat:recovery:attempt"]
    assert message == ["tool:result"]
    assert everything == ["chat:recovery:attempt", "tool:result", "chat:transcript:repaired", "x"]


def test_unsubscribe_stops_delivery_and_is_idempotent(subscribed: Subscribe) -> None:
    first: list[str] = []
    second: list[str] = []
    unsubscribe_first = subscribed(Channel.CHAT, lambda e: first.append(e.type))
    subscribed(Channel.CHAT, lambda e: second.append(e.type))
    emit("chat:a", agent="a", name="n", payload={})

    unsubscribe_first()
    unsubscribe_first()
    emit("chat:b", agent="a", name="n", payload={})

    assert first == ["chat:a"]
    assert second == ["chat:a", "chat:b"]
    assert observability.has_subscribers(Channel.CHAT)


def test_the_same_handler_twice_is_two_subscriptions(subscribed: Subscribe) -> None:
    seen: list[Event] = []
    one = subscribed(Channel.OTHER, seen.append)
    subscribed(Channel.OTHER, seen.append)
    emit("other", agent="a", name="n", payload={})
    assert len(seen) == 2

    one()
    emit("other", agent="a", name="n", payload={})
    assert len(seen) == 3


def test_has_subscribers() -> None:
    assert not observability.has_subscribers("agents:nobody-here")
    unsubscribe = subscribe(Channel.ALL, lambda e: None)
    try:
        assert observability.has_subscribers("agents:nobody-here")
    finally:
        unsubscribe()
    assert not observability.has_subscribers("agents:nobody-here")


def test_a_raising_handler_is_logged_and_others_still_run(
    subscribed: Subscribe, caplog: pytest.LogCaptureFixture
) -> None:
    received: list[str] = []

    def broken(event: Event) -> None:
        raise RuntimeError("handler bug")

    subscribed(Channel.CHAT, broken)
    subscribed(Channel.CHAT, lambda e: received.append("chat"))
    subscribed(Channel.ALL, lambda e: received.append("all"))

    with caplog.at_level(logging.ERROR, logger="durachat.observability"):
        event = emit("chat:recovery:failed", agent="a", name="n", payload={})

    assert event.type == "chat:recovery:failed"
    assert received == ["chat", "all"]
    [record] = [r for r in caplog.records if r.name == "durachat.observability"]
    assert "chat:recovery:failed" in record.getMessage()
    assert record.exc_info is not None
    assert isinstance(record.exc_info[1], RuntimeError)


def test_subscribing_and_unsubscribing_during_delivery(subscribed: Subscribe) -> None:
    order: list[str] = []
    unsubscribers: dict[str, Callable[[], None]] = {}

    def first(event: Event) -> None:
        order.append(f"first:{event.type}")
        unsubscribers["first"]()  # removes itself
        unsubscribers["second"]()  # and the next one: it still gets this event
        subscribed(Channel.CHAT, lambda e: order.append(f"late:{e.type}"))

    unsubscribers["first"] = subscribed(Channel.CHAT, first)
    unsubscribers["second"] = subscribed(Channel.CHAT, lambda e: order.append(f"second:{e.type}"))

    emit("chat:1", agent="a", name="n", payload={})
    emit("chat:2", agent="a", name="n", payload={})

    assert order == ["first:chat:1", "second:chat:1", "late:chat:2"]


def test_an_event_on_a_recording_span_is_a_span_event(
    otel: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = otel
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("turn"):
        event = emit(
            EventType.RECOVERY_SCHEDULED,
            agent="chat-agent",
            name="c1",
            tenant="acme",
            payload={
                "incidentId": "i1",
                "attempt": 2,
                "ratio": 0.5,
                "manual": False,
                "reason": None,
                "context": {"b": [1, 2], "a": "x"},
            },
        )

    [span] = exporter.get_finished_spans()
    assert span.name == "turn"
    assert span.attributes == {}
    [span_event] = span.events
    assert span_event.name == "chat:recovery:scheduled"
    assert span_event.timestamp // 1_000_000 == event.timestamp
    attributes = dict(span_event.attributes or {})
    context = attributes.pop("durachat.payload.context")
    assert isinstance(context, str)
    assert json.loads(context) == {"b": [1, 2], "a": "x"}
    assert attributes == {
        "durachat.event.type": "chat:recovery:scheduled",
        "durachat.event.channel": "agents:chat",
        "durachat.agent": "chat-agent",
        "durachat.conversation": "c1",
        "durachat.tenant": "acme",
        "durachat.payload.incidentId": "i1",
        "durachat.payload.attempt": 2,
        "durachat.payload.ratio": 0.5,
        "durachat.payload.manual": False,
    }


def test_an_event_without_a_recording_span_gets_its_own_span(
    otel: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    _, exporter = otel
    assert not trace.get_current_span().is_recording()

    emit(EventType.TOOL_APPROVAL, agent="chat-agent", name="c2", payload={"approved": True})

    [span] = exporter.get_finished_spans()
    assert span.name == "durachat.event"
    expected = {
        "durachat.event.type": "tool:approval",
        "durachat.event.channel": "agents:message",
        "durachat.agent": "chat-agent",
        "durachat.conversation": "c2",
        "durachat.payload.approved": True,
    }
    assert dict(span.attributes or {}) == expected
    [span_event] = span.events
    assert span_event.name == "tool:approval"
    assert dict(span_event.attributes or {}) == expected
    assert span.instrumentation_scope is not None
    assert span.instrumentation_scope.name == "durachat"


def test_the_own_span_is_a_child_of_the_current_context(
    otel: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    _, exporter = otel
    parent = trace.SpanContext(
        trace_id=0x1234, span_id=0x5678, is_remote=True, trace_flags=trace.TraceFlags(1)
    )
    with trace.use_span(trace.NonRecordingSpan(parent)):
        emit("message:request", agent="a", name="n", payload={})

    [span] = exporter.get_finished_spans()
    assert span.name == "durachat.event"
    assert span.context is not None
    assert span.context.trace_id == 0x1234
    assert span.parent is not None
    assert span.parent.span_id == 0x5678


def test_events_go_back_to_the_global_provider_after_reset() -> None:
    with recorded_events() as (_, exporter):
        emit("message:request", agent="a", name="n", payload={})
        assert len(exporter.get_finished_spans()) == 1
        assert observability.tracer_provider() is not trace.get_tracer_provider()
    emit("message:request", agent="a", name="n", payload={})
    assert len(exporter.get_finished_spans()) == 1
    assert observability.tracer_provider() is trace.get_tracer_provider()
