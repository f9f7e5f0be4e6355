"""The scripted model, called through litellm's own `acompletion` code path."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from durachat.models import SCRIPTED_MODEL, register_scripted_model
from durachat.models import scripted as scripted_module
from durachat.models._litellm import litellm

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
