"""Running a server tool call: `run_tool`.

The execution model is the AI SDK's: the result of a plain or async function is the final
output; an async generator streams, every value it yields is a preliminary result and the last
one is also the final output. A sync generator streams the same way. Nothing a tool does can
escape as an exception except cancellation: invalid input, a raised exception and an output
with no JSON form all become a final ERROR event, which the model then sees as the tool's result.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import (
    AsyncGenerator,
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Callable,
    Generator,
    Sequence,
)
from typing import Any, Final

from durachat.tools.events import ToolEvent, ToolEventKind
from durachat.tools.output import ToolOutputError, to_json_output
from durachat.tools.tool import Tool, ToolContext, ToolInputError
from durachat.types import UIMessage

__all__ = ["run_tool"]

_DONE: Final = object()


async def run_tool(
    tool: Tool,
    call_id: str,
    raw_input: object,
    *,
    abort: asyncio.Event | None = None,
    messages: Sequence[UIMessage] = (),
) -> AsyncGenerator[ToolEvent, None]:
    """Validate a call's input, run the tool and report what happens.

    A sync `execute` is called on the event loop, or in a worker thread when the tool is
    `blocking` (for a sync generator, each step runs in the thread). To cancel a call, stop
    iterating and `aclose()` this generator, or cancel the task iterating it: a streaming
    tool's generator is closed, and `asyncio.CancelledError` is never turned into an event.

    Args:
        tool: The tool to run. A client tool (no `execute`) yields a single ERROR event.
        call_id: The `toolCallId` of the call.
        raw_input: The call's input (the `input` of `tool-input-available`).
        abort: Passed to the tool as `ToolContext.abort`.
        messages: Passed to the tool as `ToolContext.messages`.

    Yields:
        Zero or more PRELIMINARY events, then exactly one final event: OUTPUT, or ERROR with the
        exception's message (or its class name when the message is empty). A streaming tool
        that yields nothing has the output None.
    """
    if tool.execute is None:
        yield ToolEvent.failure(
            call_id,
            f"Tool {tool.name} has no server-side execute; its result must come from the client",
        )
        return
    try:
        value = tool.validate_input(raw_input)
    except ToolInputError as exc:
        yield ToolEvent.failure(call_id, str(exc), exc)
        return
    context = ToolContext(call_id, tool.name, abort, messages)
    try:
        result = await _start(tool, value, context)
    except Exception as exc:
        yield _failed(call_id, exc)
        return
    if isinstance(result, AsyncIterable):
        iterator = aiter(result)
        stream = _stream(call_id, lambda: anext(iterator, _DONE), _aclose(iterator))
    elif inspect.isgenerator(result):
        stream = _stream(call_id, _sync_step(result, tool.blocking), _close(result))
    else:
        yield _event(call_id, ToolEventKind.OUTPUT, result)
        return
    # Closing this generator must close the tool's at once, not when it is garbage collected.
    async with contextlib.aclosing(stream):
        async for event in stream:
            yield event


async def _start(tool: Tool, value: Any, context: ToolContext) -> Any:
    if tool.blocking:
        result = await asyncio.to_thread(tool.call_execute, value, context)
    else:
        result = tool.call_execute(value, context)
    if inspect.isawaitable(result):
        result = await result
    return result


async def _stream(
    call_id: str,
    step: Callable[[], Awaitable[Any]],
    close: Callable[[], Awaitable[None]],
) -> AsyncGenerator[ToolEvent, None]:
    last: Any = None
    outcome: ToolEvent
    try:
        while True:
            try:
                item = await step()
            except Exception as exc:
                outcome = _failed(call_id, exc)
                break
            if item is _DONE:
                outcome = ToolEvent(call_id, ToolEventKind.OUTPUT, last)
                break
            event = _event(call_id, ToolEventKind.PRELIMINARY, item)
            if event.kind is ToolEventKind.ERROR:
                outcome = event
                break
            last = event.output
            yield event
    finally:
        # The tool's own cleanup runs before its final result is reported.
        await close()
    yield outcome


def _sync_step(generator: Generator[Any, Any, Any], blocking: bool) -> Callable[[], Awaitable[Any]]:
    async def step() -> Any:
        # `next` with a default: StopIteration cannot cross a thread's future.
        if blocking:
            return await asyncio.to_thread(next, generator, _DONE)
        return next(generator, _DONE)

    return step


def _aclose(iterator: AsyncIterator[Any]) -> Callable[[], Awaitable[None]]:
    async def close() -> None:
        aclose = getattr(iterator, "aclose", None)
        if aclose is not None:
            await aclose()

    return close


def _close(generator: Generator[Any, Any, Any]) -> Callable[[], Awaitable[None]]:
    async def close() -> None:
        generator.close()

    return close


def _event(call_id: str, kind: ToolEventKind, value: object) -> ToolEvent:
    try:
        output = to_json_output(value)
    except ToolOutputError as exc:
        return ToolEvent.failure(call_id, str(exc), exc)
    return ToolEvent(call_id, kind, output)


def _failed(call_id: str, exc: Exception) -> ToolEvent:
    return ToolEvent.failure(call_id, str(exc) or type(exc).__name__, exc)
