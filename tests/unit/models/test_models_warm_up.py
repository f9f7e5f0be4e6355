"""`warm_up`: a shard runs one call through litellm before it takes traffic, so its first turns
do not pay litellm's start-up; that call must reach no provider and no litellm callback."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest
from litellm.integrations.custom_logger import CustomLogger

from durachat.models import adapter, stream_ui_chunks, warm_up
from durachat.models._litellm import CustomLLM, litellm, register_provider

pytestmark = pytest.mark.timeout(30)

PROVIDER = "durachat-warm"


class Counting(CustomLLM):
    """A provider that streams one word and counts the calls that reached it."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def astreaming(self, *args: Any, **kwargs: Any) -> AsyncIterator[dict[str, Any]]:  # type: ignore[override]
        self.calls += 1
        return self._stream()

    async def _stream(self) -> AsyncIterator[dict[str, Any]]:
        for text, finished in (("word", False), ("", True)):
            yield {
                "text": text,
                "tool_use": None,
                "is_finished": finished,
                "finish_reason": "stop" if finished else "",
                "usage": None,
                "index": 0,
            }


class Logged(CustomLogger):
    """A litellm callback: the messages of every call litellm logged as successful."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[Any] = []
        self.logged = asyncio.Event()

    async def async_log_success_event(self, kwargs: Any, *args: Any, **rest: Any) -> None:
        self.calls.append(kwargs.get("messages"))
        self.logged.set()


@pytest.fixture
def provider() -> Counting:
    handler = Counting()
    register_provider(PROVIDER, handler)
    # The registry keeps the first handler per provider; point it at this test's.
    for entry in litellm.custom_provider_map:
        if entry["provider"] == PROVIDER:
            cast(dict[str, Any], entry)["custom_handler"] = handler
    return handler


async def test_warming_up_reaches_no_provider(provider: Counting) -> None:
    assert await warm_up(f"{PROVIDER}/x")
    assert provider.calls == 0
    # The provider is reachable: a real call gets to it.
    chunks = [
        c async for c in stream_ui_chunks(f"{PROVIDER}/x", [{"role": "user", "content": "hi"}])
    ]
    assert provider.calls == 1
    assert {"type": "text-delta", "id": chunks[1]["id"], "delta": "word"} in chunks


async def test_no_litellm_callback_sees_the_warm_up(
    provider: Counting, monkeypatch: pytest.MonkeyPatch
) -> None:
    listener = Logged()
    monkeypatch.setattr(litellm, "callbacks", [listener])
    try:
        assert await warm_up(f"{PROVIDER}/x")
        real = [{"role": "user", "content": "a real call"}]
        async for _ in stream_ui_chunks(f"{PROVIDER}/x", real):
            pass
        async with asyncio.timeout(10):
            await listener.logged.wait()
        # Logged in call order: had the warm-up been logged, it would be there first.
        assert listener.calls == [real]
    finally:
        # litellm copies a call's callbacks into its other lists; the next tests listen to none.
        litellm.logging_callback_manager.remove_callback_from_all_lists(listener)
    assert not litellm.logging_callback_manager.get_all_callbacks()


async def test_a_model_litellm_cannot_resolve_is_reported_not_raised() -> None:
    assert not await warm_up("no-such-provider/model")


async def test_a_warm_up_that_does_not_finish_in_time_is_given_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    never = asyncio.Event()

    async def hangs(model: str) -> None:
        await never.wait()

    monkeypatch.setattr(adapter, "_warm_up", hangs)
    assert not await warm_up(f"{PROVIDER}/x", timeout=0.05)
