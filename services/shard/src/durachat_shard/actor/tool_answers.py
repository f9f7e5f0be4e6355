"""A client's answers to tool calls: results (`cf_agent_tool_result`) and approvals
(`cf_agent_tool_approval`), applied to the tool part they answer
(docs/protocol.md#client--server-frames)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from durachat.observability import EventType
from durachat.protocol.server_frames import message_updated_frame
from durachat.tools import apply_tool_approval, apply_tool_result
from durachat.types import JSONDict
from durachat_shard.actor.context import ActorContext
from durachat_shard.actor.queue import TurnQueue
from durachat_shard.requests import FrameError

FIND_TOOL_PART_WAIT = 2.0
"""Seconds a tool result waits for the running turn to store the part it answers."""


class ToolAnswers:
    """Applies tool results and approvals, and asks for the continuation they call for."""

    def __init__(self, ctx: ActorContext, queue: TurnQueue) -> None:
        self._ctx = ctx
        self._queue = queue

    async def result(self, requester: str, frame: JSONDict) -> None:
        """A `cf_agent_tool_result`."""
        call_id = frame.get("toolCallId")
        if not isinstance(call_id, str) or not call_id:
            raise FrameError("invalid_frame", "a tool result needs a `toolCallId`")
        state = self._ctx.state
        client_tools = frame.get("clientTools")
        if isinstance(client_tools, list) and client_tools:
            state.last_client_tools = client_tools
        result_state = frame.get("state")
        error_text = frame.get("errorText")
        await self._change_tool_part(
            call_id,
            lambda part: apply_tool_result(
                part,
                output=frame.get("output"),
                state=result_state if isinstance(result_state, str) else None,
                error_text=error_text if isinstance(error_text, str) else None,
            ),
        )
        self._ctx.event(
            EventType.TOOL_RESULT, {"toolCallId": call_id, "toolName": frame.get("toolName")}
        )
        # A failed client tool never continues on its own (the client decides what next); but
        # any result may complete a batch whose continuation an earlier result asked for.
        auto = frame.get("autoContinue") is True and result_state != "output-error"
        if auto or state.continuation is not None:
            self._queue.schedule_continuation(requester)

    async def approval(self, requester: str, frame: JSONDict) -> None:
        """A `cf_agent_tool_approval`."""
        call_id = frame.get("toolCallId")
        approved = frame.get("approved")
        if not isinstance(call_id, str) or not call_id or not isinstance(approved, bool):
            raise FrameError(
                "invalid_frame", "a tool approval needs a `toolCallId` and a boolean `approved`"
            )
        await self._change_tool_part(call_id, lambda part: apply_tool_approval(part, approved))
        self._ctx.event(EventType.TOOL_APPROVAL, {"toolCallId": call_id, "approved": approved})
        if frame.get("autoContinue") is True:
            self._queue.schedule_continuation(requester)

    async def _change_tool_part(
        self, call_id: str, change: Callable[[JSONDict], JSONDict | None]
    ) -> None:
        """Apply a tool result or approval to the part of `call_id`: store the message, tell
        every tab (`cf_agent_message_updated`). Re-applying the same change does nothing."""
        ctx = self._ctx
        located = self._find_tool_part(call_id)
        if located is None and ctx.state.active is not None:
            # The turn that made the call may still be storing it.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(ctx.state.idle.wait(), FIND_TOOL_PART_WAIT)
            located = self._find_tool_part(call_id)
        if located is None:
            raise FrameError("unknown_tool_call", f"no tool call {call_id!r} in this conversation")
        message, index = located
        updated = change(message["parts"][index])
        if updated is None:
            return
        parts = list(message["parts"])
        parts[index] = updated
        new_message = {**message, "parts": parts}
        ctx.writes.behind(ctx.transcript.put_reply(new_message, anchor=None).apply)
        ctx.sync_agent()
        ctx.emit.frame(message_updated_frame(new_message))

    def _find_tool_part(self, call_id: str) -> tuple[JSONDict, int] | None:
        for message in reversed(self._ctx.transcript.messages):
            if message.get("role") != "assistant":
                continue
            for index, part in enumerate(message.get("parts") or []):
                if isinstance(part, dict) and part.get("toolCallId") == call_id:
                    return message, index
        return None
