"""Agents that write their reply themselves, chunk by chunk, instead of (or around) a model.

Serve it (from the repository root)::

    DURACHAT_AGENTS=durachat.demo,examples.handwritten_agent make run
    .venv/bin/durachat chat --agent report-agent "durable chat"

`report-agent` needs no model at all. It shows the chunks a reply is made of, a `data-progress`
part updated in place (same type and id), and a transient `data-status` part that clients see
live but that is never stored. `status-then-model-agent` wraps the model: a transient status
first, then whatever `stream_model` produces.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from durachat import Agent, Turn
from durachat.types import JSONDict, UIChunk, UIMessage

MAX_STEPS = 10
SOURCES = ("The durachat docs", "The AI SDK docs")


def last_user_text(messages: list[UIMessage]) -> str:
    """The text of the newest user message."""
    for message in reversed(messages):
        if message.get("role") == "user":
            return " ".join(
                str(part.get("text", ""))
                for part in message.get("parts") or []
                if part.get("type") == "text"
            ).strip()
    return ""


def requested_steps(body: JSONDict | None) -> int:
    """`steps` from the request body (`useAgentChat({body: {steps: 5}})`), 3 by default."""
    raw = (body or {}).get("steps", 3)
    steps = raw if isinstance(raw, int) and not isinstance(raw, bool) else 3
    return max(1, min(steps, MAX_STEPS))


class ReportAgent(Agent):
    """Served as `report-agent`: a fake research report, written without a model."""

    async def on_chat_message(self, turn: Turn) -> AsyncIterator[UIChunk]:
        topic = last_user_text(turn.messages) or "nothing in particular"
        steps = requested_steps(turn.body)
        # No `messageId`: the host stamps the id the reply is stored under. The metadata is
        # kept on the stored message.
        yield {"type": "start", "messageMetadata": {"kind": "report"}}
        # Transient: shown live (the browser's `onData` callback gets it), never stored.
        yield {"type": "data-status", "data": {"text": f"Researching {topic}"}, "transient": True}
        for done in range(1, steps + 1):
            if turn.abort.is_set():
                return  # cancelled: whatever was produced so far is stored
            # Same type and id each time: the part is replaced in place, not appended.
            yield {
                "type": "data-progress",
                "id": "research",
                "data": {"done": done, "total": steps},
            }
        yield {"type": "text-start", "id": "summary"}
        for word in ("Report ", "on ", topic, "."):
            yield {"type": "text-delta", "id": "summary", "delta": word}
        yield {"type": "text-end", "id": "summary"}
        # Data parts without an id are appended: one part per source.
        for title in SOURCES:
            yield {"type": "data-source", "data": {"title": title}}
        yield {"type": "finish"}


class StatusThenModelAgent(Agent):
    """Served as `status-then-model-agent`: a transient status, then the model's reply."""

    async def on_chat_message(self, turn: Turn) -> AsyncIterator[UIChunk]:
        yield {"type": "data-status", "data": {"text": "Thinking"}, "transient": True}
        async for chunk in self.stream_model(turn):
            yield chunk
