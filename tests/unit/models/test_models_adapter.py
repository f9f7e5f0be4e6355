"""`stream_ui_chunks` end to end through litellm, with the scripted model and a probe provider."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, cast

import pytest
from litellm.integrations.custom_logger import CustomLogger

from durachat.models import SCRIPTED_MODEL, ModelError, stream_ui_chunks
from durachat.models._litellm import CustomLLM, litellm, register_provider, to_model_error
from durachat.types import UIChunk
from support.litellm_calls import count_builds

# litellm builds some pydantic schemas lazily on its first call; pydantic then warns about
# `ReadOnly` TypedDict items (litellm's own ignore filter does not survive pytest's reset).
pytestmark = pytest.mark.filterwarnings("ignore:.*`ReadOnly` qualifier:UserWarning")


def user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


def text_of(chunks: list[UIChunk]) -> list[str]:
    return [c["delta"] for c in chunks if c["type"] == "text-delta"]


async def collect(agen: AsyncIterator[UIChunk]) -> list[UIChunk]:
    return [chunk async for chunk in agen]


class Probe(CustomLLM):
    """A provider streaming `count` deltas, each once `gate` is released; records closing."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 3
        self.sent = 0
        self.closed = asyncio.Event()
        self.gate = asyncio.Semaphore(0)
        self.drained = False
        """The stream ran past its last chunk (its reader asked for more and got the end)."""

    def astreaming(self, *args: Any, **kwargs: Any) -> AsyncIterator[dict[str, Any]]:  # type: ignore[override]
        return self._stream()

    async def _stream(self) -> AsyncIterator[dict[str, Any]]:
        try:
            for i in range(self.count):
                await self.gate.acquire()
                self.sent += 1
                yield {
                    "text": f"d{i} ",
                    "tool_use": None,
                    "is_finished": False,
                    "finish_reason": "",
                    "usage": None,
                    "index": 0,
                }
            yield {
                "text": "",
                "tool_use": None,
                "is_finished": True,
                "finish_reason": "stop",
                "usage": None,
                "index": 0,
            }
            self.drained = True
        finally:
            self.closed.set()


@pytest.fixture
def probe() -> Probe:
    handler = Probe()
    register_provider("durachat-probe", handler)
    # The registry keeps the first handler per provider; point it at this test's probe.
    for entry in litellm.custom_provider_map:
        if entry["provider"] == "durachat-probe":
            # litellm types its registry entries read-only; this test swaps the handler in place.
            cast(dict[str, Any], entry)["custom_handler"] = handler
    return handler


async def wait_for(event: asyncio.Event, deadline: float = 5.0) -> None:
    async with asyncio.timeout(deadline):
        await event.wait()


async def finish(task: asyncio.Task[Any], deadline: float = 5.0) -> Any:
    """The task's result, failing (without cancelling it) if it has not ended by the deadline."""
    done, _ = await asyncio.wait({task}, timeout=deadline)
    if task not in done:
        task.cancel()
        pytest.fail("the stream did not end after abort")
    return task.result()


async def test_echo_becomes_one_text_block() -> None:
    chunks = await collect(stream_ui_chunks(SCRIPTED_MODEL, user("hello world"), delay_scale=0))
    part_id = chunks[1]["id"]
    assert chunks == [
        {"type": "start-step"},
        {"type": "text-start", "id": part_id},
        {"type": "text-delta", "id": part_id, "delta": "echo: "},
        {"type": "text-delta", "id": part_id, "delta": "hello "},
        {"type": "text-delta", "id": part_id, "delta": "world"},
        {"type": "text-end", "id": part_id},
        {"type": "finish-step"},
        {"type": "finish", "finishReason": "stop"},
    ]
    assert isinstance(part_id, str) and 0 < len(part_id) <= 16


async def test_sure_and_slow() -> None:
    sure = await collect(stream_ui_chunks(SCRIPTED_MODEL, user("Sure"), delay_scale=0))
    assert text_of(sure) == ["Sure"]
    slow = await collect(stream_ui_chunks(SCRIPTED_MODEL, user("slow"), delay_scale=0.01))
    assert text_of(slow) == [f"s{i:02d} " for i in range(50)]
    assert slow[-1] == {"type": "finish", "finishReason": "stop"}


async def test_part_ids_are_unique_across_streams() -> None:
    ids = set()
    for _ in range(5):
        chunks = await collect(stream_ui_chunks(SCRIPTED_MODEL, user("sure"), delay_scale=0))
        ids.add(chunks[1]["id"])
    assert len(ids) == 5


async def test_error_surfaces_as_model_error_after_partial() -> None:
    chunks: list[UIChunk] = []
    with pytest.raises(ModelError) as raised:
        async for chunk in stream_ui_chunks(SCRIPTED_MODEL, user("error"), delay_scale=0):
            chunks.append(chunk)
    assert [c["type"] for c in chunks] == ["start-step", "text-start", "text-delta"]
    assert text_of(chunks) == ["partial "]
    error = raised.value
    assert isinstance(error.__cause__, litellm.exceptions.MidStreamFallbackError)
    assert "scripted model failure" in error.message
    assert error.public_message == "The model failed to respond."
    assert "scripted" not in error.public_message


async def test_request_errors_surface_as_model_error() -> None:
    with pytest.raises(ModelError) as raised:
        await collect(stream_ui_chunks(SCRIPTED_MODEL, user("hi"), delay_scale="fast"))
    assert "delay scale" in raised.value.message
    assert raised.value.__cause__ is not None


async def test_unknown_provider_is_a_model_error() -> None:
    with pytest.raises(ModelError) as raised:
        await collect(stream_ui_chunks("no-such-provider/model", user("hi")))
    assert isinstance(raised.value.__cause__, litellm.exceptions.BadRequestError)
    assert raised.value.public_message == "The model provider rejected the request."


@pytest.mark.parametrize(
    ("error", "public"),
    [
        (
            litellm.exceptions.RateLimitError("slow down", "openai", "gpt"),
            "The model provider is rate limiting requests. Try again later.",
        ),
        (
            litellm.exceptions.ContextWindowExceededError("too long", "gpt", "openai"),
            "The conversation is too long for the model.",
        ),
        (
            litellm.exceptions.Timeout("timed out", "gpt", "openai"),
            "The model took too long to respond.",
        ),
        (
            litellm.exceptions.AuthenticationError("bad key sk-123", "openai", "gpt"),
            "The model is not available (provider authentication failed).",
        ),
        (RuntimeError("boom"), "The model failed to respond."),
        (
            litellm.exceptions.MidStreamFallbackError(
                "wrapped",
                "gpt",
                "openai",
                original_exception=litellm.exceptions.RateLimitError("slow", "openai", "gpt"),
            ),
            "The model provider is rate limiting requests. Try again later.",
        ),
    ],
)
def test_public_messages_depend_on_the_error_class(error: Exception, public: str) -> None:
    mapped = to_model_error(error)
    assert mapped.public_message == public
    assert mapped.message


async def test_abort_before_start_yields_nothing() -> None:
    abort = asyncio.Event()
    abort.set()
    assert await collect(stream_ui_chunks(SCRIPTED_MODEL, user("hi"), abort=abort)) == []


async def test_abort_interrupts_a_waiting_stream(probe: Probe) -> None:
    abort = asyncio.Event()
    chunks: list[UIChunk] = []
    got_first = asyncio.Event()

    async def consume() -> None:
        async for chunk in stream_ui_chunks("durachat-probe/x", user("hi"), abort=abort):
            chunks.append(chunk)
            if chunk["type"] == "text-delta":
                got_first.set()

    task = asyncio.create_task(consume())
    probe.gate.release()
    await wait_for(got_first)
    # The provider now waits for the gate, which is never released: only abort ends the stream.
    abort.set()
    await finish(task)
    assert [c["type"] for c in chunks] == ["start-step", "text-start", "text-delta"]
    assert probe.sent == 1
    await wait_for(probe.closed)


async def test_abort_set_by_the_consumer_stops_before_the_next_chunk(probe: Probe) -> None:
    abort = asyncio.Event()
    for _ in range(probe.count):
        probe.gate.release()
    chunks: list[UIChunk] = []
    async for chunk in stream_ui_chunks("durachat-probe/x", user("hi"), abort=abort):
        chunks.append(chunk)
        if chunk["type"] == "text-delta":
            abort.set()
            await asyncio.sleep(0)  # let the abort watcher run while no upstream wait is pending
    assert [c["type"] for c in chunks] == ["start-step", "text-start", "text-delta"]
    await wait_for(probe.closed)
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0


async def test_abort_leaves_the_consumer_task_uncancelled(probe: Probe) -> None:
    abort = asyncio.Event()

    async def consume() -> int:
        agen = stream_ui_chunks("durachat-probe/x", user("hi"), abort=abort)
        probe.gate.release()
        assert [(await anext(agen))["type"] for _ in range(3)] == [
            "start-step",
            "text-start",
            "text-delta",
        ]
        asyncio.get_running_loop().call_soon(abort.set)
        with pytest.raises(StopAsyncIteration):
            await anext(agen)
        await asyncio.sleep(0)  # a leftover cancellation would be delivered here
        task = asyncio.current_task()
        assert task is not None
        return task.cancelling()

    assert await finish(asyncio.create_task(consume())) == 0
    await wait_for(probe.closed)


async def test_external_cancellation_still_propagates(probe: Probe) -> None:
    abort = asyncio.Event()
    started = asyncio.Event()

    async def consume() -> None:
        async for chunk in stream_ui_chunks("durachat-probe/x", user("hi"), abort=abort):
            if chunk["type"] == "start-step":
                started.set()

    task = asyncio.create_task(consume())
    await wait_for(started)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await wait_for(probe.closed)


async def test_closing_the_generator_closes_the_model_stream(probe: Probe) -> None:
    probe.gate.release()
    agen = stream_ui_chunks("durachat-probe/x", user("hi"))
    assert isinstance(agen, AsyncGenerator)
    async for chunk in agen:
        if chunk["type"] == "text-delta":
            break
    await agen.aclose()
    await wait_for(probe.closed)


async def test_tools_and_kwargs_are_passed_to_litellm(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}
    real = litellm.acompletion

    async def spy(**kwargs: Any) -> Any:
        seen.update(kwargs)
        return await real(**kwargs)

    monkeypatch.setattr(litellm, "acompletion", spy)
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    await collect(
        stream_ui_chunks(SCRIPTED_MODEL, user("sure"), tools=tools, delay_scale=0, temperature=0)
    )
    assert seen["tools"] == tools
    assert seen["stream"] is True
    assert seen["temperature"] == 0
    assert seen["model"] == SCRIPTED_MODEL


class SuccessLog(CustomLogger):
    """A litellm callback: counts the calls litellm logged as successful."""

    def __init__(self) -> None:
        super().__init__()
        self.logged = asyncio.Event()

    async def async_log_success_event(self, *args: Any, **kwargs: Any) -> None:
        self.logged.set()


async def test_litellm_bookkeeping_is_skipped_once_the_provider_is_read_to_its_end(
    probe: Probe, monkeypatch: pytest.MonkeyPatch
) -> None:
    builds = count_builds(monkeypatch)
    for _ in range(probe.count):
        probe.gate.release()
    chunks = await collect(stream_ui_chunks("durachat-probe/x", user("hi")))
    assert text_of(chunks) == ["d0 ", "d1 ", "d2 "]
    assert chunks[-1] == {"type": "finish", "finishReason": "stop"}
    # The provider's response was read to its end before the stream was closed.
    assert probe.drained
    await wait_for(probe.closed)
    assert builds == []


async def test_litellm_bookkeeping_runs_when_a_litellm_callback_listens(
    probe: Probe, monkeypatch: pytest.MonkeyPatch
) -> None:
    builds = count_builds(monkeypatch)
    listener = SuccessLog()
    monkeypatch.setattr(litellm, "callbacks", [listener])
    try:
        for _ in range(probe.count):
            probe.gate.release()
        chunks = await collect(stream_ui_chunks("durachat-probe/x", user("hi")))
        assert text_of(chunks) == ["d0 ", "d1 ", "d2 "]
        await wait_for(listener.logged)
        assert builds
    finally:
        # litellm copies a call's callbacks into its other lists; the next tests listen to none.
        litellm.logging_callback_manager.remove_callback_from_all_lists(listener)
    assert not litellm.logging_callback_manager.get_all_callbacks()
