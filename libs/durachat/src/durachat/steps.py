"""The multi-step model loop: call the model, run the server tools it asks for, call it again.

One turn's reply may take several model steps. Each step streams the model over the transcript
plus the reply so far; the tool calls it makes are decided one by one (`ToolSet.decide`):
server tools run at once and their results (preliminary ones included) stream as chunks, tools
that need approval stream an approval request, client tools are left for the client. When every
call of a step ran on the server, the next step sees their results. The loop stops when a step
makes no tool call, when a call waits for a human or a client, at `max_steps`, or on abort. The
whole reply ends with one `finish`, the last step's.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator
from typing import Any

from opentelemetry.trace import StatusCode

from durachat.messages import StreamAccumulator
from durachat.models import stream_ui_chunks, to_chat_messages
from durachat.observability.genai import tool_span
from durachat.tools import (
    INTERRUPTED_TOOL_ERROR,
    LedgerEntry,
    ToolCallDecision,
    ToolLedger,
    ToolSet,
    approval_request_chunk,
    approved_tool_parts,
    run_tool,
    tool_part_name,
)
from durachat.types import UIChunk, UIMessage

DEFAULT_MAX_STEPS = 5


async def stream_steps(
    model: str,
    history: list[UIMessage],
    tools: ToolSet,
    *,
    system: str | None = None,
    abort: asyncio.Event | None = None,
    max_steps: int = DEFAULT_MAX_STEPS,
    continuation: bool = False,
    ledger: ToolLedger | None = None,
    **litellm_kwargs: Any,
) -> AsyncIterator[UIChunk]:
    """Stream a reply of up to `max_steps` model steps, running server tools in between.

    Args:
        model: litellm model string.
        history: the transcript the reply answers.
        tools: the tools the model may call (agent tools and the client's).
        system: system prompt.
        abort: stops the loop (and the model stream) when set.
        max_steps: the most model calls one reply may make.
        continuation: the reply continues the last assistant message of `history` (after tool
            results or approvals, or after an interruption): tools the user approved there run
            first, and server calls left without a result are settled through the ledger
            (reusing a recorded output, reporting a call cut off mid-run), then the model.
        ledger: where server tool calls are recorded, so none runs twice (see
            `durachat.tools.ledger`).
        **litellm_kwargs: passed to every model call.

    Yields:
        UI message chunks (no `start`: the host owns the message id).
    """
    reply = StreamAccumulator("reply")
    if continuation and history and history[-1].get("role") == "assistant":
        reply = StreamAccumulator(continuation=True, seed=copy.deepcopy(history[-1]))
        history = history[:-1]
        awaiting_client = False
        for part in approved_tool_parts(reply.parts):
            name = tool_part_name(part)
            tool = tools.get(name or "")
            if tool is not None and tool.is_client:
                # An approved client tool runs in the browser: its result comes back as a tool
                # result, and the model goes on only then.
                awaiting_client = True
                continue
            call = {
                "toolCallId": part.get("toolCallId"),
                "toolName": name,
                "input": part.get("input"),
            }
            async for chunk in _execute(call, tools, reply, abort, ledger):
                yield chunk
        for part in _unsettled_server_calls(reply.parts, tools):
            # A reply cut off while its server tools ran (a crash): the ledger says what
            # became of each call, so none runs twice.
            call = {
                "toolCallId": part.get("toolCallId"),
                "toolName": tool_part_name(part),
                "input": part.get("input"),
            }
            async for chunk in _settle(call, tools, reply, abort, ledger):
                yield chunk
        if awaiting_client:
            return
    specs = tools.for_model() or None
    finish: UIChunk | None = None
    for _ in range(max_steps):
        transcript = [*history, reply.to_message()] if reply.parts else history
        calls: list[UIChunk] = []
        async for chunk in stream_ui_chunks(
            model,
            to_chat_messages(transcript, system=system),
            tools=specs,
            abort=abort,
            **litellm_kwargs,
        ):
            if chunk["type"] == "finish":
                finish = chunk
                continue
            reply.apply(chunk)
            if chunk["type"] == "tool-input-available":
                calls.append(chunk)
            yield chunk
        if not calls or (abort is not None and abort.is_set()):
            break
        all_ran = True
        for call in calls:
            async for chunk in _settle(call, tools, reply, abort, ledger):
                yield chunk
            settled = _tool_part(reply, str(call["toolCallId"]))
            if settled is None or not str(settled.get("state", "")).startswith("output-"):
                all_ran = False
        if not all_ran:
            break
    if finish is not None and not (abort is not None and abort.is_set()):
        yield finish


async def _execute(
    call: UIChunk,
    tools: ToolSet,
    reply: StreamAccumulator,
    abort: asyncio.Event | None,
    ledger: ToolLedger | None,
) -> AsyncIterator[UIChunk]:
    call_id = str(call["toolCallId"])
    name = str(call["toolName"])
    tool = tools.get(name)
    if tool is None or tool.is_client:
        chunk = tools.unavailable(call_id, name).to_chunk()
        reply.apply(chunk)
        yield chunk
        return
    known = await ledger.begin(call_id, name, call.get("input")) if ledger is not None else None
    if known is not None:
        chunk = _from_ledger(call_id, known)
        reply.apply(chunk)
        yield chunk
        return
    # Its span is never current: this generator may be closed from another task.
    span = tool_span(name, call_id)
    try:
        async for event in run_tool(
            tool, call_id, call.get("input"), abort=abort, messages=[reply.to_message()]
        ):
            chunk = event.to_chunk()
            if event.final:
                if chunk["type"] == "tool-output-error":
                    span.set_status(StatusCode.ERROR, str(chunk.get("errorText")))
                if ledger is not None:
                    if chunk["type"] == "tool-output-error":
                        await ledger.finish(call_id, error=str(chunk.get("errorText")))
                    else:
                        await ledger.finish(call_id, output=chunk.get("output"))
            reply.apply(chunk)
            yield chunk
    finally:
        span.end()


def _from_ledger(call_id: str, known: LedgerEntry) -> UIChunk:
    """The result of a call the ledger already holds: it does not run again."""
    if known.status == "completed":
        return {"type": "tool-output-available", "toolCallId": call_id, "output": known.output}
    error = known.error if known.status == "error" else INTERRUPTED_TOOL_ERROR
    return {"type": "tool-output-error", "toolCallId": call_id, "errorText": error}


async def _settle(
    call: UIChunk,
    tools: ToolSet,
    reply: StreamAccumulator,
    abort: asyncio.Event | None,
    ledger: ToolLedger | None,
) -> AsyncIterator[UIChunk]:
    call_id = str(call["toolCallId"])
    name = str(call["toolName"])
    decision = await tools.decide(name, call.get("input"))
    if decision is ToolCallDecision.EXECUTE:
        async for chunk in _execute(call, tools, reply, abort, ledger):
            yield chunk
    elif decision is ToolCallDecision.REQUEST_APPROVAL:
        chunk = approval_request_chunk(call_id)
        reply.apply(chunk)
        yield chunk
    elif decision is ToolCallDecision.UNAVAILABLE:
        chunk = tools.unavailable(call_id, name).to_chunk()
        reply.apply(chunk)
        yield chunk


def _unsettled_server_calls(parts: list[dict[str, Any]], tools: ToolSet) -> list[dict[str, Any]]:
    """Server tool calls with their input but no result: they were running when the reply
    was interrupted."""
    out = []
    for part in parts:
        if part.get("state") != "input-available":
            continue
        tool = tools.get(tool_part_name(part) or "")
        if tool is not None and not tool.is_client:
            out.append(part)
    return out


def _tool_part(reply: StreamAccumulator, call_id: str) -> dict[str, Any] | None:
    for part in reply.parts:
        if part.get("toolCallId") == call_id:
            return part
    return None
