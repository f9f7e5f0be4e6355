"""Tests for durachat.tools.run_tool: execution forms, preliminary results and errors."""

from __future__ import annotations

import asyncio
import datetime
import threading
from collections.abc import AsyncIterator, Iterator, Sequence

import pytest
from pydantic import BaseModel

from durachat.tools import Tool, ToolContext, ToolEvent, ToolEventKind, run_tool, tool
from durachat.types import UIMessage


class Query(BaseModel):
    q: str
    n: int = 2


class Answer(BaseModel):
    text: str
    at: datetime.date


async def events(
    made: Tool,
    raw_input: object = None,
    *,
    abort: asyncio.Event | None = None,
    messages: Sequence[UIMessage] = (),
) -> list[ToolEvent]:
    payload = {"q": "x"} if raw_input is None else raw_input
    run = run_tool(made, "call-1", payload, abort=abort, messages=messages)
    return [event async for event in run]


async def chunks(made: Tool, raw_input: object = None) -> list[dict[str, object]]:
    return [event.to_chunk() for event in await events(made, raw_input)]


async def test_sync_function_output() -> None:
    @tool(description="d", input=Query)
    def echo(args: Query) -> dict[str, object]:
        return {"q": args.q, "n": args.n}

    assert await chunks(echo) == [
        {"type": "tool-output-available", "toolCallId": "call-1", "output": {"q": "x", "n": 2}}
    ]


async def test_async_function_output() -> None:
    @tool(description="d", input=Query)
    async def echo(args: Query) -> str:
        await asyncio.sleep(0)
        return args.q.upper()

    assert await chunks(echo, {"q": "hi"}) == [
        {"type": "tool-output-available", "toolCallId": "call-1", "output": "HI"}
    ]


async def test_async_generator_streams_preliminary_results_then_last_as_final() -> None:
    @tool(description="d", input=Query)
    async def progress(args: Query) -> AsyncIterator[dict[str, int]]:
        for step in range(args.n):
            yield {"step": step}

    prelim = {"type": "tool-output-available", "toolCallId": "call-1", "preliminary": True}
    assert await chunks(progress, {"q": "x", "n": 3}) == [
        prelim | {"output": {"step": 0}},
        prelim | {"output": {"step": 1}},
        prelim | {"output": {"step": 2}},
        {"type": "tool-output-available", "toolCallId": "call-1", "output": {"step": 2}},
    ]


async def test_empty_async_generator_has_null_output() -> None:
    @tool(description="d", input=Query)
    async def nothing(args: Query) -> AsyncIterator[int]:
        if args.n < 0:
            yield 1

    assert await chunks(nothing) == [
        {"type": "tool-output-available", "toolCallId": "call-1", "output": None}
    ]


async def test_sync_generator_streams_like_an_async_one() -> None:
    @tool(description="d", input=Query)
    def count(args: Query) -> Iterator[int]:
        yield from range(args.n)

    result = await events(count)
    assert [(e.kind, e.output) for e in result] == [
        (ToolEventKind.PRELIMINARY, 0),
        (ToolEventKind.PRELIMINARY, 1),
        (ToolEventKind.OUTPUT, 1),
    ]
    assert [e.final for e in result] == [False, False, True]


async def test_async_function_returning_an_async_iterator_streams() -> None:
    async def numbers() -> AsyncIterator[int]:
        yield 7

    @tool(description="d", input=Query)
    async def indirect(args: Query) -> AsyncIterator[int]:
        return numbers()

    assert [(e.kind, e.output) for e in await events(indirect)] == [
        (ToolEventKind.PRELIMINARY, 7),
        (ToolEventKind.OUTPUT, 7),
    ]


async def test_sync_runs_on_the_loop_thread_unless_blocking() -> None:
    def where(args: Query) -> int:
        return threading.get_ident()

    inline = tool("inline", description="d", input=Query, execute=where)
    threaded = tool("threaded", description="d", input=Query, execute=where, blocking=True)
    loop_thread = threading.get_ident()
    assert (await events(inline))[0].output == loop_thread
    assert (await events(threaded))[0].output != loop_thread


async def test_blocking_sync_generator_steps_in_a_thread() -> None:
    def where(args: Query) -> Iterator[int]:
        yield threading.get_ident()

    threaded = tool("threaded", description="d", input=Query, execute=where, blocking=True)
    result = await events(threaded)
    assert result[0].output != threading.get_ident()
    assert result[-1].kind is ToolEventKind.OUTPUT


async def test_execute_arity_zero_one_two() -> None:
    abort = asyncio.Event()
    messages: list[UIMessage] = [{"id": "u1", "role": "user", "parts": []}]
    seen: list[ToolContext] = []

    def with_context(args: Query, context: ToolContext) -> str:
        seen.append(context)
        return args.q

    def no_args() -> str:
        return "none"

    two = tool("two", description="d", input=Query, execute=with_context)
    zero = tool("zero", description="d", input=Query, execute=no_args)
    assert (await events(two, abort=abort, messages=messages))[0].output == "x"
    assert seen == [ToolContext("call-1", "two", abort, messages)]
    assert (await events(zero))[0].output == "none"


async def test_optional_parameters_are_not_filled() -> None:
    def echo(args: Query, verbose: bool = False) -> bool:
        return verbose

    assert (await events(tool("t", description="d", input=Query, execute=echo)))[0].output is False


async def test_validation_error_is_an_output_error_and_execute_never_runs() -> None:
    calls: list[Query] = []

    @tool(description="d", input=Query)
    def search(args: Query) -> None:
        calls.append(args)

    result = await events(search, {"n": "many"})
    assert [e.to_chunk() for e in result] == [
        {
            "type": "tool-output-error",
            "toolCallId": "call-1",
            "errorText": "Invalid input for tool search: q: Field required; "
            "n: Input should be a valid integer, unable to parse string as an integer",
        }
    ]
    assert calls == []


async def test_exception_becomes_output_error() -> None:
    @tool(description="d", input=Query)
    async def explode(args: Query) -> None:
        raise RuntimeError("backend unavailable")

    (event,) = await events(explode)
    assert event.to_chunk() == {
        "type": "tool-output-error",
        "toolCallId": "call-1",
        "errorText": "backend unavailable",
    }
    assert isinstance(event.exception, RuntimeError)


async def test_exception_without_message_reports_its_class() -> None:
    @tool(description="d", input=Query)
    def explode(args: Query) -> None:
        raise KeyError

    (event,) = await events(explode)
    assert event.error_text == "KeyError"


async def test_exception_mid_stream_follows_preliminary_results() -> None:
    @tool(description="d", input=Query)
    async def flaky(args: Query) -> AsyncIterator[int]:
        yield 1
        raise ValueError("lost connection")

    assert await chunks(flaky) == [
        {"type": "tool-output-available", "toolCallId": "call-1", "output": 1, "preliminary": True},
        {"type": "tool-output-error", "toolCallId": "call-1", "errorText": "lost connection"},
    ]


async def test_blocking_exception_becomes_output_error() -> None:
    def explode(args: Query) -> None:
        raise OSError("disk full")

    made = tool("t", description="d", input=Query, execute=explode, blocking=True)
    assert (await events(made))[0].error_text == "disk full"


async def test_models_are_dumped_as_json() -> None:
    @tool(description="d", input=Query)
    def answer(args: Query) -> Answer:
        return Answer(text=args.q, at=datetime.date(2024, 5, 1))

    @tool(description="d", input=Query)
    def nested(args: Query) -> dict[str, object]:
        return {"answers": (Answer(text="a", at=datetime.date(2024, 1, 2)),), "tags": {"t"}}

    assert (await events(answer))[0].output == {"text": "x", "at": "2024-05-01"}
    assert (await events(nested))[0].output == {
        "answers": [{"text": "a", "at": "2024-01-02"}],
        "tags": ["t"],
    }


async def test_unserialisable_output_is_an_error() -> None:
    @tool(description="d", input=Query)
    def weird(args: Query) -> object:
        return object()

    (event,) = await events(weird)
    assert event.kind is ToolEventKind.ERROR
    assert event.error_text is not None
    assert event.error_text.startswith("Tool output is not JSON-serialisable")


async def test_unserialisable_preliminary_stops_and_closes_the_generator() -> None:
    closed: list[bool] = []

    @tool(description="d", input=Query)
    async def weird(args: Query) -> AsyncIterator[object]:
        try:
            yield 1
            yield object()
            yield 3
        finally:
            closed.append(True)

    result = await events(weird)
    assert [e.kind for e in result] == [ToolEventKind.PRELIMINARY, ToolEventKind.ERROR]
    assert closed == [True]


async def test_generator_cleanup_runs_before_the_final_event() -> None:
    log: list[str] = []

    @tool(description="d", input=Query)
    async def stream(args: Query) -> AsyncIterator[int]:
        try:
            yield 1
        finally:
            log.append("cleanup")

    async for event in run_tool(stream, "c", {"q": "x"}):
        log.append(event.kind)
    assert log == ["preliminary", "cleanup", "output"]


async def test_client_tool_cannot_run_on_the_server() -> None:
    picker = tool("pick", description="d", input=Query)
    (event,) = await events(picker)
    assert event.kind is ToolEventKind.ERROR
    assert event.error_text == (
        "Tool pick has no server-side execute; its result must come from the client"
    )


async def test_schema_only_tool_gets_the_input_dict() -> None:
    def echo(args: dict[str, object]) -> dict[str, object]:
        return args

    made = Tool("t", description="d", parameters={"type": "object"}, execute=echo)
    assert (await events(made, {"any": [1]}))[0].output == {"any": [1]}


async def test_closing_the_run_closes_the_tool_generator() -> None:
    closed = asyncio.Event()

    @tool(description="d", input=Query)
    async def endless(args: Query) -> AsyncIterator[int]:
        try:
            n = 0
            while True:
                yield n
                n += 1
        finally:
            closed.set()

    run = run_tool(endless, "c", {"q": "x"})
    first = await anext(run)
    assert first.kind is ToolEventKind.PRELIMINARY
    await run.aclose()
    assert closed.is_set()


async def test_cancellation_propagates_and_is_not_an_error() -> None:
    started = asyncio.Event()
    never = asyncio.Event()
    closed = asyncio.Event()
    seen: list[ToolEvent] = []

    @tool(description="d", input=Query)
    async def waits(args: Query) -> AsyncIterator[int]:
        try:
            yield 0
            started.set()
            await never.wait()
            yield 1
        finally:
            closed.set()

    async def consume() -> None:
        async for event in run_tool(waits, "c", {"q": "x"}):
            seen.append(event)

    task = asyncio.create_task(consume())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert closed.is_set()
    assert [e.kind for e in seen] == [ToolEventKind.PRELIMINARY]


def test_event_chunks() -> None:
    assert ToolEvent("c", ToolEventKind.PRELIMINARY, {"a": 1}).to_chunk() == {
        "type": "tool-output-available",
        "toolCallId": "c",
        "output": {"a": 1},
        "preliminary": True,
    }
    assert ToolEvent("c", ToolEventKind.OUTPUT, None).to_chunk() == {
        "type": "tool-output-available",
        "toolCallId": "c",
        "output": None,
    }
    assert ToolEvent.failure("c", "boom").to_chunk() == {
        "type": "tool-output-error",
        "toolCallId": "c",
        "errorText": "boom",
    }
