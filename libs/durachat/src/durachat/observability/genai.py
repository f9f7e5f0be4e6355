"""Spans of model calls and tool executions, named and attributed by the OpenTelemetry GenAI
semantic conventions (docs/observability.md#traces).

A model call is a `chat <model>` span (`gen_ai.operation.name`, `gen_ai.system`,
`gen_ai.request.model`, `gen_ai.usage.input_tokens` / `output_tokens`,
`gen_ai.response.finish_reasons`), with the time to its first token as the attribute
`durachat.time_to_first_token_s` and the event `gen_ai.first_token`. A tool execution is an
`execute_tool <name>` span. Both are children of the current span (a shard's turn) and are
never made current themselves: they live in async generators, which may be closed from
another task. With no SDK configured the spans are no-ops and a chunk costs one test of a
boolean.
"""

from __future__ import annotations

import time
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, StatusCode

from durachat.observability.tracing import TRACER_NAME, tracer_provider

_tracers: dict[int, tuple[trace.TracerProvider, trace.Tracer]] = {}


def _tracer() -> trace.Tracer:
    """The tracer of the current provider, made once per provider (an SDK makes a new one at
    every `get_tracer`)."""
    provider = tracer_provider()
    known = _tracers.get(id(provider))
    if known is None or known[0] is not provider:
        known = _tracers[id(provider)] = (provider, provider.get_tracer(TRACER_NAME))
    return known[1]


def model_system(model: str) -> str:
    """The `gen_ai.system` of a litellm model string: its provider prefix (`openai/...`)."""
    provider, slash, _ = model.partition("/")
    return provider if slash else "litellm"


class ModelCallSpan:
    """The span of one streamed model call."""

    __slots__ = ("_began", "_first", "recording", "span")

    def __init__(self, model: str, *, tools: int = 0) -> None:
        self.span: Span = _tracer().start_span(
            f"chat {model}",
            kind=SpanKind.CLIENT,
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.system": model_system(model),
                "gen_ai.request.model": model,
                "durachat.tools": tools,
            },
        )
        self.recording = self.span.is_recording()
        """Whether the span records; callers test it before calling `chunk`."""
        self._began = time.monotonic()
        self._first = True

    def chunk(self, raw: Any) -> None:
        """A raw chunk of the model's stream arrived (called only while `recording`)."""
        if self._first:
            self._first = False
            self.span.set_attribute(
                "durachat.time_to_first_token_s", time.monotonic() - self._began
            )
            self.span.add_event("gen_ai.first_token")
        usage = getattr(raw, "usage", None)
        if usage is None and isinstance(raw, dict):
            usage = raw.get("usage")
        if usage:
            self._usage(usage)

    def _usage(self, usage: Any) -> None:
        for source, attribute in (
            ("prompt_tokens", "gen_ai.usage.input_tokens"),
            ("completion_tokens", "gen_ai.usage.output_tokens"),
        ):
            value = usage.get(source) if isinstance(usage, dict) else getattr(usage, source, None)
            if isinstance(value, int):
                self.span.set_attribute(attribute, value)

    def end(self, *, finish_reason: str | None = None, error: BaseException | None = None) -> None:
        """End the span, with the finish reason or the error that ended the call."""
        if not self.recording:
            return
        if finish_reason:
            self.span.set_attribute("gen_ai.response.finish_reasons", [finish_reason])
        if error is not None:
            self.span.set_attribute("error.type", type(error).__name__)
            self.span.set_status(StatusCode.ERROR, str(error) or type(error).__name__)
        self.span.end()


def tool_span(name: str, call_id: str) -> Span:
    """The `execute_tool <name>` span of one server tool call (end it when the call ends)."""
    return _tracer().start_span(
        f"execute_tool {name}",
        kind=SpanKind.INTERNAL,
        attributes={
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.call.id": call_id,
        },
    )
