"""Agents only the tests serve: the demo agent under each concurrency strategy."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from durachat import Turn, TurnResult
from durachat.demo import ChatAgent
from durachat.types import UIChunk


class LatestAgent(ChatAgent):
    """`latest`."""

    message_concurrency = "latest"


class MergeAgent(ChatAgent):
    """`merge`."""

    message_concurrency = "merge"


class DropAgent(ChatAgent):
    """`drop`."""

    message_concurrency = "drop"


class DebounceAgent(ChatAgent):
    """`debounce`, 300 ms."""

    message_concurrency = {"strategy": "debounce", "debounce_ms": 300}


CONTINUED: list[UIChunk] = [
    {"type": "text-start", "id": "more"},
    {"type": "text-delta", "id": "more", "delta": " (continued)"},
    {"type": "text-end", "id": "more"},
]


class ProgrammaticAgent(ChatAgent):
    """Uses the programmatic API after its turns: `schedule:<text>` makes it save a new user
    message `<text>` and run a turn on it; `more` makes it continue its last reply (with the
    text ` (continued)`); a slow reply asked with `abort-self` aborts itself after a few
    chunks."""

    async def on_chat_message(self, turn: Turn) -> AsyncIterator[UIChunk]:
        if turn.continuation and _last_user_text(turn.messages) == "more":
            # The model would add nothing to a finished reply (it continues a prefill).
            for chunk in CONTINUED:
                yield chunk
            return
        count = 0
        async for chunk in self.stream_model(turn):
            yield chunk
            count += 1
            if count == 5 and _last_user_text(turn.messages) == "abort-self slow":
                self.abort_request(turn.request_id)

    async def on_chat_response(self, result: TurnResult) -> None:
        if result.status != "completed" or result.continuation:
            return
        text = _last_user_text(self.messages)
        if text.startswith("schedule:"):
            follow_up = {
                "id": f"scheduled-{result.request_id}",
                "role": "user",
                "parts": [{"type": "text", "text": text.removeprefix("schedule:")}],
            }
            await self.save_messages(lambda messages: [*messages, follow_up])
        elif text == "more":
            await self.continue_last_turn()
        elif text == "stable?":
            stable = await self.wait_until_stable(timeout=5)
            pending = self.has_pending_interaction()
            note = {
                "id": f"note-{result.request_id}",
                "role": "system",
                "parts": [{"type": "text", "text": f"stable={stable} pending={pending}"}],
            }
            await self.persist_messages([*self.messages, note])


def _last_user_text(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            return "".join(
                str(p.get("text", "")) for p in message.get("parts", []) if p.get("type") == "text"
            )
    return ""


class TurnStateAgent(ChatAgent):
    """Drives `abort_all_requests` and `reset_turn_state` from a running turn: while a reply
    streams, a user message `abort-all` or `reset-turns` sent behind it (so queued) makes it
    call `abort_all_requests()` or `reset_turn_state()`, once, after its next chunk."""

    async def on_chat_message(self, turn: Turn) -> AsyncIterator[UIChunk]:
        known = {m.get("id") for m in turn.messages}
        acted = False
        async for chunk in self.stream_model(turn):
            yield chunk
            if acted:
                continue
            later = [
                _text(m)
                for m in self.messages
                if m.get("role") == "user" and m.get("id") not in known
            ]
            if "abort-all" in later:
                acted = True
                self.abort_all_requests()
            elif "reset-turns" in later:
                acted = True
                await self.reset_turn_state()


def _text(message: dict[str, Any]) -> str:
    return "".join(
        str(p.get("text", "")) for p in message.get("parts", []) if p.get("type") == "text"
    )


class ParallelToolsAgent(ChatAgent):
    """The demo agent, but `two-calls` makes it call the client tool `getLocation` twice in one
    step (a parallel batch); the continuation after the results is the scripted model's."""

    async def on_chat_message(self, turn: Turn) -> AsyncIterator[UIChunk]:
        if turn.continuation or _last_user_text(turn.messages) != "two-calls":
            async for chunk in self.stream_model(turn):
                yield chunk
            return
        yield {"type": "start-step"}
        for suffix in ("a", "b"):
            yield {
                "type": "tool-input-available",
                "toolCallId": f"call_{turn.request_id}_{suffix}",
                "toolName": "getLocation",
                "input": {},
            }
        yield {"type": "finish-step"}
        yield {"type": "finish", "finishReason": "tool-calls"}


class BlobAgent(ChatAgent):
    """Streams large transient data parts (not stored): the request body's `blobs` parts of
    `size` characters each, `pause` seconds apart, then `done` as text. For the tests of
    bounded buffers."""

    async def on_chat_message(self, turn: Turn) -> AsyncIterator[UIChunk]:
        body = turn.body or {}
        count, size = int(body.get("blobs", 1)), int(body.get("size", 1024))
        pause = float(body.get("pause", 0))
        blob = "b" * size
        for n in range(count):
            yield {"type": "data-blob", "id": f"blob-{n}", "data": blob, "transient": True}
            if pause:
                await asyncio.sleep(pause)
        yield {"type": "text-start", "id": "t"}
        yield {"type": "text-delta", "id": "t", "delta": "done"}
        yield {"type": "text-end", "id": "t"}
