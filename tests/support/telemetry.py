"""OpenTelemetry for tests: record spans in memory, and isolate OpenTelemetry's global tracer
provider (which can be set only once per process) around tests that set it."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util._once import Once

from durachat import observability


def in_memory_provider() -> tuple[TracerProvider, InMemorySpanExporter]:
    """A tracer provider that keeps every finished span in the returned exporter."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


@contextlib.contextmanager
def recorded_events() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    """Make `durachat.observability` record events with an in-memory provider (not the global
    one) for the duration of the block."""
    provider, exporter = in_memory_provider()
    observability.set_tracer_provider(provider)
    try:
        yield provider, exporter
    finally:
        observability.set_tracer_provider(None)
        provider.shutdown()


@contextlib.contextmanager
def isolated_global_tracer_provider() -> Iterator[None]:
    """Let the block set OpenTelemetry's global tracer provider (and run
    `configure_telemetry`) as if the process had just started; both are put back afterwards."""
    from durachat_infra import telemetry

    saved_once = trace._TRACER_PROVIDER_SET_ONCE
    saved_provider = trace._TRACER_PROVIDER
    saved_shutdown = telemetry._shutdown
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace._TRACER_PROVIDER = None
    telemetry._shutdown = None
    try:
        yield
    finally:
        # Annotated, so mypy does not keep the `None` assigned before the block ran.
        shutdown: Callable[[], None] | None = telemetry._shutdown
        if shutdown is not None:
            shutdown()
        trace._TRACER_PROVIDER_SET_ONCE = saved_once
        trace._TRACER_PROVIDER = saved_provider
        telemetry._shutdown = saved_shutdown
