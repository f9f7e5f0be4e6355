"""The lean WebSocket protocol's receive queue and write flag (docs/benchmarks.md#idle-sockets):
what uvicorn needs of an `asyncio.Queue` and an `asyncio.Event`, with no object made until
someone has to wait."""

from __future__ import annotations

import asyncio

import pytest

from durachat_gateway.ws_protocol import Flag, Inbox


async def test_the_inbox_hands_out_messages_in_order_and_wakes_its_reader() -> None:
    inbox = Inbox()
    assert inbox.empty()
    inbox.put_nowait({"type": "websocket.connect"})
    inbox.put_nowait({"type": "websocket.receive", "text": "a"})
    assert not inbox.empty()
    assert (await inbox.get())["type"] == "websocket.connect"
    assert await inbox.get() == {"type": "websocket.receive", "text": "a"}
    assert inbox.empty()
    reading = asyncio.create_task(inbox.get())
    await asyncio.sleep(0)
    assert not reading.done()
    inbox.put_nowait({"type": "websocket.disconnect", "code": 1000})
    async with asyncio.timeout(5):
        assert (await reading)["type"] == "websocket.disconnect"


async def test_a_cancelled_read_loses_nothing() -> None:
    inbox = Inbox()
    reading = asyncio.create_task(inbox.get())
    await asyncio.sleep(0)
    reading.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reading
    inbox.put_nowait({"type": "websocket.receive", "text": "kept"})
    async with asyncio.timeout(5):
        assert (await inbox.get())["text"] == "kept"  # type: ignore[typeddict-item]


async def test_the_inbox_has_one_reader_at_a_time() -> None:
    inbox = Inbox()
    first = asyncio.create_task(inbox.get())
    await asyncio.sleep(0)
    with pytest.raises(RuntimeError):
        await inbox.get()
    inbox.put_nowait({"type": "websocket.connect"})
    async with asyncio.timeout(5):
        assert (await first)["type"] == "websocket.connect"


async def test_the_flag_holds_writers_while_cleared_and_wakes_them_all() -> None:
    flag = Flag()
    assert flag.is_set()
    async with asyncio.timeout(5):
        await flag.wait()
    flag.clear()
    writers = [asyncio.create_task(flag.wait()) for _ in range(3)]
    gone = asyncio.create_task(flag.wait())
    await asyncio.sleep(0)
    gone.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gone
    assert not any(w.done() for w in writers)
    flag.set()
    async with asyncio.timeout(5):
        await asyncio.gather(*writers)
    assert flag.is_set()
