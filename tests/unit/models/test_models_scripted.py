"""The scripted model, called through litellm's own `acompletion` code path."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from durachat.models import SCRIPTED_MODEL, register_scripted_model, stream_ui_chunks
from durachat.models import scripted as scripted_module
from durachat.models._litellm import litellm
from durachat.types import UIChunk

# litellm builds some pydantic schemas lazily on its first call; pydantic then warns about
# `ReadOnly` TypedDict items (litellm's own ignore filter does not survive pytest's reset).
pytestmark = pytest.mark.filterwarnings("ignore:.*`ReadOnly` qualifier:UserWarning")

FAST = 0.01  # delay scale that keeps paced tests quick


def user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


async def stream_deltas(text: str, **kwargs: Any) -> tuple[list[str], list[Any]]:
    """Text deltas and all chunks of a streamed scripted completion."""
    register_scripted_model()
    response = await litellm.acompletion(
        model=SCRIPTED_MODEL, messages=user(text), stream=True, **kwargs
    )
    chunks = [chunk async for chunk in response]
    deltas = [
        c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content
    ]
    return deltas, chunks


@pytest.mark.parametrize("text", ["sure", "  SURE ", "Sure"])
async def test_sure_is_one_delta(text: str) -> None:
    deltas, chunks = await stream_deltas(text, delay_scale=FAST)
    assert deltas == ["Sure"]
    assert chunks[-1].choices[0].finish_reason == "stop"


async def test_sure_must_be_exact() -> None:
    deltas, _ = await stream_deltas("sure thing", delay_scale=0)
    assert deltas == ["echo: ", "sure ", "thing"]


async def test_echo_splits_after_each_space() -> None:
    deltas, chunks = await stream_deltas("  hello world  ", delay_scale=FAST)
    assert deltas == ["echo: ", "hello ", "world"]
    assert chunks[-1].choices[0].finish_reason == "stop"


async def test_echo_of_empty_text() -> None:
    deltas, _ = await stream_deltas("   ", delay_scale=0)
    assert deltas == ["echo: "]


async def test_reply_depends_on_the_last_user_message_only() -> None:
    register_scripted_model()
    messages = [
        {"role": "system", "content": "be slow"},
        {"role": "user", "content": "error"},
        {"role": "assistant", "content": "slow"},
        {
            "role": "user",
            "content": [{"type": "text", "text": "hi"}, {"type": "text", "text": "x"}],
        },
    ]
    response = await litellm.acompletion(
        model=SCRIPTED_MODEL, messages=messages, stream=True, delay_scale=0
    )
    deltas = [c.choices[0].delta.content async for c in response if c.choices[0].delta.content]
    assert deltas == ["echo: ", "hi\nx"]


async def test_slow_streams_fifty_paced_deltas() -> None:
    loop = asyncio.get_running_loop()
    register_scripted_model()
    response = await litellm.acompletion(
        model=SCRIPTED_MODEL, messages=user("go slow please"), stream=True, delay_scale=FAST
    )
    arrivals: list[float] = []
    deltas: list[str] = []
    async for chunk in response:
        if chunk.choices and chunk.choices[0].delta.content:
            deltas.append(chunk.choices[0].delta.content)
            arrivals.append(loop.time())
    assert deltas == [f"s{i:02d} " for i in range(50)]
    assert arrivals == sorted(arrivals)


async def test_deltas_are_scheduled_from_the_stream_start(monkeypatch: pytest.MonkeyPatch) -> None:
    deadlines: list[float] = []

    async def record(loop: asyncio.AbstractEventLoop, deadline: float) -> None:
        deadlines.append(deadline)
        await asyncio.sleep(0)

    monkeypatch.setattr(scripted_module, "_sleep_until", record)
    deltas, _ = await stream_deltas("slow", delay_scale=2.0)
    assert len(deltas) == 50
    # Delta i is due at start + i * interval: no accumulated drift, whatever the loop did.
    interval = scripted_module.SLOW_INTERVAL * 2.0
    assert len(deadlines) == 49
    assert [d - deadlines[0] for d in deadlines] == pytest.approx(
        [i * interval for i in range(49)], abs=1e-9
    )


async def test_error_yields_partial_then_raises_through_litellm() -> None:
    register_scripted_model()
    response = await litellm.acompletion(
        model=SCRIPTED_MODEL, messages=user("raise an error"), stream=True, delay_scale=0
    )
    deltas: list[str] = []
    # litellm's stream wrapper wraps mid-stream provider errors for its Router's fallbacks.
    with pytest.raises(litellm.exceptions.MidStreamFallbackError) as raised:
        async for chunk in response:
            if chunk.choices and chunk.choices[0].delta.content:
                deltas.append(chunk.choices[0].delta.content)
    assert deltas == ["partial "]
    original = raised.value.original_exception
    assert isinstance(original, litellm.exceptions.APIError)
    assert original.status_code == 500
    assert "scripted model failure" in str(original)


async def test_final_chunk_carries_usage() -> None:
    register_scripted_model()
    response = await litellm.acompletion(
        model=SCRIPTED_MODEL,
        messages=user("hello world"),
        stream=True,
        stream_options={"include_usage": True},
        delay_scale=0,
    )
    chunks = [chunk async for chunk in response]
    usage = next(c.usage for c in reversed(chunks) if getattr(c, "usage", None))
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (2, 3, 5)


async def test_non_streaming_returns_the_whole_text() -> None:
    register_scripted_model()
    response = await litellm.acompletion(
        model=SCRIPTED_MODEL, messages=user("hello world"), delay_scale=FAST
    )
    assert response.choices[0].message.content == "echo: hello world"
    assert response.choices[0].finish_reason == "stop"
    assert response.usage.completion_tokens == 3


async def test_non_streaming_error_raises() -> None:
    register_scripted_model()
    with pytest.raises(litellm.exceptions.APIError):
        await litellm.acompletion(model=SCRIPTED_MODEL, messages=user("error"), delay_scale=0)


async def test_delay_scale_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    deadlines: list[float] = []

    async def record(loop: asyncio.AbstractEventLoop, deadline: float) -> None:
        deadlines.append(deadline)
        await asyncio.sleep(0)

    monkeypatch.setattr(scripted_module, "_sleep_until", record)
    monkeypatch.setenv(scripted_module.DELAY_SCALE_ENV, "0.5")
    await stream_deltas("a b c")
    assert deadlines[1] - deadlines[0] == pytest.approx(scripted_module.ECHO_INTERVAL * 0.5)
    # The keyword wins over the environment.
    deadlines.clear()
    await stream_deltas("a b c", delay_scale=3)
    assert deadlines[1] - deadlines[0] == pytest.approx(scripted_module.ECHO_INTERVAL * 3)


@pytest.mark.parametrize("scale", ["fast", -1, float("nan")])
async def test_invalid_delay_scale_is_rejected(scale: object) -> None:
    register_scripted_model()
    with pytest.raises(Exception, match="delay scale"):
        response = await litellm.acompletion(
            model=SCRIPTED_MODEL, messages=user("hi"), stream=True, delay_scale=scale
        )
        async for _ in response:
            pass


def test_registration_is_idempotent() -> None:
    register_scripted_model()
    register_scripted_model()
    entries = [e for e in litellm.custom_provider_map if e["provider"] == "durachat"]
    assert len(entries) == 1
    assert SCRIPTED_MODEL == "durachat/scripted"


# Assistant prefill (crash recovery) and the `stall` directive.

SLOW_TEXT = [f"s{i:02d} " for i in range(50)]


def prefilled(text: str, partial: Any) -> list[dict[str, Any]]:
    """A conversation whose reply to `text` was cut after `partial` (an assistant content)."""
    return [
        {"role": "user", "content": text},
        {"role": "assistant", "content": partial},
    ]


async def stream_messages(
    messages: list[dict[str, Any]], **kwargs: Any
) -> tuple[list[str], list[Any]]:
    """Text deltas and all chunks of a streamed scripted completion of `messages`."""
    register_scripted_model()
    response = await litellm.acompletion(
        model=SCRIPTED_MODEL, messages=messages, stream=True, **kwargs
    )
    chunks = [chunk async for chunk in response]
    deltas = [
        c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content
    ]
    return deltas, chunks


def finish_reason(chunks: list[Any]) -> str | None:
    return next(
        (c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason),
        None,
    )


@pytest.mark.parametrize("directive", ["slow", "stall"])
async def test_prefill_cut_at_a_delta_boundary_continues_with_the_rest(directive: str) -> None:
    partial = "".join(SLOW_TEXT[:25])
    deltas, chunks = await stream_messages(prefilled(directive, partial), delay_scale=0)
    assert deltas == SLOW_TEXT[25:]
    assert partial + "".join(deltas) == "".join(SLOW_TEXT)  # s00 ... s49, each exactly once
    assert finish_reason(chunks) == "stop"


@pytest.mark.parametrize(
    "partial",
    [
        "s00 s01 s0",
        [{"type": "text", "text": "s00 "}, {"type": "text", "text": "s01 s0"}],
        [{"type": "text", "text": "s00 s01 s0"}, {"type": "image_url", "image_url": {"url": "x"}}],
    ],
    ids=["string", "text-parts", "ignores-other-parts"],
)
async def test_prefill_cut_inside_a_delta_starts_with_the_rest_of_it(partial: Any) -> None:
    deltas, _ = await stream_messages(prefilled("slow", partial), delay_scale=0)
    assert deltas == ["2 ", *SLOW_TEXT[3:]]
    assert "s00 s01 s0" + "".join(deltas) == "".join(SLOW_TEXT)


async def test_prefill_continues_an_echo() -> None:
    deltas, chunks = await stream_messages(
        prefilled("hello big world", "echo: hel"), delay_scale=FAST
    )
    assert deltas == ["lo ", "big ", "world"]
    assert finish_reason(chunks) == "stop"


async def test_remaining_deltas_are_paced_from_the_stream_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    deadlines: list[float] = []

    async def record(loop: asyncio.AbstractEventLoop, deadline: float) -> None:
        deadlines.append(deadline)
        await asyncio.sleep(0)

    monkeypatch.setattr(scripted_module, "_sleep_until", record)
    register_scripted_model()
    loop = asyncio.get_running_loop()
    before = loop.time()
    deltas, _ = await stream_messages(
        prefilled("slow", "".join(SLOW_TEXT[:40]) + "s4"), delay_scale=2.0
    )
    assert deltas == ["0 ", *SLOW_TEXT[41:]]
    # The k-th remaining delta is due at start + k * interval: the first one at once, the
    # second one interval later (not 41 intervals).
    interval = scripted_module.SLOW_INTERVAL * 2.0
    start = deadlines[0] - interval
    assert before <= start <= loop.time()
    assert [d - start for d in deadlines] == pytest.approx(
        [k * interval for k in range(1, 10)], abs=1e-9
    )


@pytest.mark.parametrize(
    ("text", "whole"),
    [("hi there", "echo: hi there"), ("sure", "Sure"), ("slow", "".join(SLOW_TEXT))],
)
async def test_prefill_of_the_whole_text_is_an_empty_completion(text: str, whole: str) -> None:
    deltas, chunks = await stream_messages(
        prefilled(text, whole), delay_scale=FAST, stream_options={"include_usage": True}
    )
    assert deltas == []
    assert finish_reason(chunks) == "stop"
    usage = next(c.usage for c in reversed(chunks) if getattr(c, "usage", None))
    assert usage.completion_tokens == 0


@pytest.mark.parametrize(
    "partial",
    ["something else", "echo: hello world and more", "echo:  hello", "Echo: "],
)
async def test_prefill_that_is_not_a_prefix_gets_the_whole_script(partial: str) -> None:
    deltas, chunks = await stream_messages(prefilled("hello world", partial), delay_scale=0)
    assert deltas == ["echo: ", "hello ", "world"]
    assert finish_reason(chunks) == "stop"


@pytest.mark.parametrize("partial", ["", None, []])
async def test_empty_trailing_assistant_is_not_a_prefill(partial: Any) -> None:
    deltas, _ = await stream_messages(prefilled("hello world", partial), delay_scale=0)
    assert deltas == ["echo: ", "hello ", "world"]


async def test_completion_tokens_count_the_emitted_deltas() -> None:
    _, chunks = await stream_messages(
        prefilled("slow", "".join(SLOW_TEXT[:20]) + "s2"),
        delay_scale=0,
        stream_options={"include_usage": True},
    )
    usage = next(c.usage for c in reversed(chunks) if getattr(c, "usage", None))
    # "1 " and s21 ... s49; the prompt counts the prefill's words too.
    assert usage.completion_tokens == 30
    assert usage.prompt_tokens == 1 + 21


async def test_error_still_fails_after_its_remainder() -> None:
    register_scripted_model()
    response = await litellm.acompletion(
        model=SCRIPTED_MODEL, messages=prefilled("error", "part"), stream=True, delay_scale=0
    )
    deltas: list[str] = []
    with pytest.raises(litellm.exceptions.MidStreamFallbackError):
        async for chunk in response:
            if chunk.choices and chunk.choices[0].delta.content:
                deltas.append(chunk.choices[0].delta.content)
    assert deltas == ["ial "]


async def test_non_streaming_returns_the_remainder() -> None:
    register_scripted_model()
    response = await litellm.acompletion(
        model=SCRIPTED_MODEL, messages=prefilled("hello big world", "echo: he"), delay_scale=FAST
    )
    assert response.choices[0].message.content == "llo big world"
    assert response.choices[0].finish_reason == "stop"
    assert response.usage.completion_tokens == 3
    whole = await litellm.acompletion(
        model=SCRIPTED_MODEL, messages=prefilled("hi", "echo: hi"), delay_scale=FAST
    )
    assert whole.choices[0].message.content in ("", None)
    assert whole.choices[0].finish_reason == "stop"
    assert whole.usage.completion_tokens == 0
    other = await litellm.acompletion(
        model=SCRIPTED_MODEL, messages=prefilled("hi", "nope"), delay_scale=0
    )
    assert other.choices[0].message.content == "echo: hi"


# Tool steps are not prefills.

WEATHER_CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "getWeather", "arguments": '{"city": "Paris"}'},
}


def after_tool_call(*tail: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "tool:Paris"},
        {"role": "assistant", "content": None, "tool_calls": [WEATHER_CALL]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temp": 21}'},
        *tail,
    ]


async def test_tool_results_still_get_the_tool_result_reply() -> None:
    deltas, chunks = await stream_messages(after_tool_call(), delay_scale=0)
    assert deltas == ['tool result: {"temp":21}']
    assert finish_reason(chunks) == "stop"


async def test_trailing_assistant_with_text_and_tool_results_is_not_a_prefill() -> None:
    messages = after_tool_call()
    messages[1]["content"] = "tool result: "  # text before the call, in the same step
    deltas, _ = await stream_messages(messages, delay_scale=0)
    assert deltas == ['tool result: {"temp":21}']


async def test_trailing_tool_call_without_results_is_not_a_prefill() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "hello world"},
        {"role": "assistant", "content": "echo: ", "tool_calls": [WEATHER_CALL]},
    ]
    deltas, _ = await stream_messages(messages, delay_scale=0)
    assert deltas == ["echo: ", "hello ", "world"]


async def test_prefill_after_tool_results_continues_the_tool_result_reply() -> None:
    deltas, chunks = await stream_messages(
        after_tool_call({"role": "assistant", "content": "tool res"}), delay_scale=0
    )
    assert deltas == ['ult: {"temp":21}']
    assert finish_reason(chunks) == "stop"


async def test_tool_call_script_ignores_a_text_prefill() -> None:
    register_scripted_model()
    response = await litellm.acompletion(
        model=SCRIPTED_MODEL, messages=prefilled("tool:Paris", "x"), stream=True, delay_scale=0
    )
    chunks = [chunk async for chunk in response]
    calls = [
        call
        for c in chunks
        if c.choices and c.choices[0].delta.tool_calls
        for call in c.choices[0].delta.tool_calls
    ]
    assert [call.function.name for call in calls] == ["getWeather"]
    assert finish_reason(chunks) == "tool_calls"


# `stall`.


def lingering_tasks(before: set[asyncio.Task[Any]]) -> set[asyncio.Task[Any]]:
    current = asyncio.current_task()
    return {t for t in asyncio.all_tasks() - before if t is not current and not t.done()}


async def test_stall_goes_silent_after_ten_deltas() -> None:
    before = asyncio.all_tasks()
    register_scripted_model()
    response = await litellm.acompletion(
        model=SCRIPTED_MODEL, messages=user("please stall"), stream=True, delay_scale=FAST
    )
    deltas: list[str] = []
    try:
        async with asyncio.timeout(5):
            while len(deltas) < 10:
                chunk = await response.__anext__()
                if chunk.choices and chunk.choices[0].delta.content:
                    deltas.append(chunk.choices[0].delta.content)
        assert deltas == SLOW_TEXT[:10]
        # Delta 11 would be due 1 ms after delta 10 at this scale: nothing comes, not even the
        # finish chunk.
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(response.__anext__(), 0.25)
    finally:
        await response.aclose()
    assert lingering_tasks(before) == set()


async def test_stall_streams_to_the_end_when_continuing_a_prefill() -> None:
    async with asyncio.timeout(5):
        deltas, chunks = await stream_messages(
            prefilled("stall", "".join(SLOW_TEXT[:10])), delay_scale=FAST
        )
    assert deltas == SLOW_TEXT[10:]
    assert finish_reason(chunks) == "stop"


@pytest.mark.parametrize("partial", ["s00 s0", "not a prefix"])
async def test_stall_with_any_prefill_does_not_stall(partial: str) -> None:
    async with asyncio.timeout(5):
        deltas, chunks = await stream_messages(prefilled("stall", partial), delay_scale=0)
    assert "".join(deltas).endswith("s48 s49 ")
    assert len(deltas) > 10
    assert finish_reason(chunks) == "stop"


async def test_stall_non_streaming_never_returns() -> None:
    before = asyncio.all_tasks()
    register_scripted_model()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(
            litellm.acompletion(model=SCRIPTED_MODEL, messages=user("stall"), delay_scale=0),
            0.25,
        )
    assert lingering_tasks(before) == set()
    response = await litellm.acompletion(
        model=SCRIPTED_MODEL, messages=prefilled("stall", "s00 "), delay_scale=0
    )
    assert response.choices[0].message.content == "".join(SLOW_TEXT[1:])


async def test_stall_ends_cleanly_on_abort() -> None:
    before = asyncio.all_tasks()
    abort = asyncio.Event()
    chunks: list[UIChunk] = []
    async with asyncio.timeout(5):
        async for chunk in stream_ui_chunks(
            SCRIPTED_MODEL, user("stall"), abort=abort, delay_scale=FAST
        ):
            chunks.append(chunk)
            if sum(c["type"] == "text-delta" for c in chunks) == 10:
                # A watchdog: give up once nothing came for a while.
                asyncio.get_running_loop().call_later(0.1, abort.set)
    assert [c["delta"] for c in chunks if c["type"] == "text-delta"] == SLOW_TEXT[:10]
    assert chunks[-1]["type"] == "text-delta"  # no finish: the stream was abandoned
    assert lingering_tasks(before) == set()


async def test_stall_consumer_can_be_cancelled() -> None:
    register_scripted_model()
    ten = asyncio.Event()

    async def consume() -> None:
        response = await litellm.acompletion(
            model=SCRIPTED_MODEL, messages=user("stall"), stream=True, delay_scale=0
        )
        try:
            count = 0
            async for chunk in response:
                if chunk.choices and chunk.choices[0].delta.content:
                    count += 1
                    if count == 10:
                        ten.set()
        finally:
            await response.aclose()

    before = asyncio.all_tasks()
    task = asyncio.create_task(consume())
    async with asyncio.timeout(5):
        await ten.wait()
    await asyncio.sleep(0.05)  # let it reach the silent part
    assert not task.done()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert lingering_tasks(before) == set()


@pytest.mark.parametrize(
    ("text", "first", "count"),
    [("stall slowly", "s00 ", 50), ("stall on error", "partial ", 1), ("STALL", "echo: ", 2)],
)
async def test_slow_and_error_come_before_stall(text: str, first: str, count: int) -> None:
    register_scripted_model()
    response = await litellm.acompletion(
        model=SCRIPTED_MODEL, messages=user(text), stream=True, delay_scale=0
    )
    deltas: list[str] = []
    with contextlib.suppress(litellm.exceptions.MidStreamFallbackError):
        async with asyncio.timeout(5):
            async for chunk in response:
                if chunk.choices and chunk.choices[0].delta.content:
                    deltas.append(chunk.choices[0].delta.content)
    assert deltas[0] == first
    assert len(deltas) == count
