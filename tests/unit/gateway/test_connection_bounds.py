"""A connection's bounds in bytes (docs/operations.md#buffers): the frames waiting for their
shard (back-pressure, then a refusal), and the frames waiting for the client (closed with
1013, the queue dropped, the close sent ahead of it)."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest
from starlette.websockets import WebSocket

from durachat_gateway.connection import ClientConnection, ForwardQueueFullError


class Socket:
    """What a connection uses of a WebSocket: sends wait until `flowing` is set."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.closed_with: int | None = None
        self.flowing = asyncio.Event()
        self.closing = asyncio.Event()

    async def send_text(self, text: str) -> None:
        await self.flowing.wait()
        self.sent.append(text)

    async def close(self, code: int = 1000) -> None:
        self.closed_with = code
        self.closing.set()


def connection(socket: Any, **bounds: int) -> ClientConnection:
    return ClientConnection(cast(WebSocket, socket), "c1", limit=1000, **bounds)


async def test_frames_waiting_for_their_shard_hold_the_reader_back_then_are_refused() -> None:
    conn = connection(None, forward_bytes=1000)
    release = asyncio.Event()
    delivered: list[int] = []

    def work(n: int) -> Any:
        async def run() -> None:
            await release.wait()
            delivered.append(n)

        return run

    conn.forward(work(1), 600)
    conn.forward(work(2), 600)
    # Over the bound: the next frame waits for room, and is refused if none comes.
    with pytest.raises(ForwardQueueFullError):
        await conn.forward_room(100, timeout=0.05)
    waiting = asyncio.create_task(conn.forward_room(100, timeout=5))
    await asyncio.sleep(0.01)
    assert not waiting.done()
    release.set()
    async with asyncio.timeout(5):
        await waiting
    assert delivered == [1, 2]


async def test_a_small_frame_always_fits_an_empty_forward_queue() -> None:
    conn = connection(None, forward_bytes=10)
    async with asyncio.timeout(1):
        await conn.forward_room(10_000, timeout=0)


async def test_a_client_that_falls_behind_is_closed_with_1013_and_its_queue_dropped() -> None:
    socket = Socket()
    conn = connection(socket, limit_bytes=1000)
    conn.start()
    conn.send("x" * 400)
    conn.send("y" * 500)
    assert conn.buffered_bytes == 900
    conn.send("z" * 200)  # past the bound
    assert (conn.closed, conn.buffered_bytes) == (True, 0)
    async with asyncio.timeout(5):
        await socket.closing.wait()
    assert socket.closed_with == 1013
    assert socket.sent == []  # the close did not wait behind the queue


async def test_one_frame_larger_than_the_bound_goes_to_a_client_that_keeps_up() -> None:
    socket = Socket()
    socket.flowing.set()
    conn = connection(socket, limit_bytes=1000)
    conn.start()
    conn.send("x" * 5000)
    assert not conn.closed
    await conn.aclose()
    assert socket.sent == ["x" * 5000]


async def test_a_replay_waits_for_room_instead_of_overflowing() -> None:
    socket = Socket()
    conn = connection(socket, limit_bytes=1000)
    conn.start()
    sent = 0

    async def replay() -> None:
        nonlocal sent
        for _ in range(20):
            conn.send("r" * 300)
            sent += 1
            if conn.filling:
                await conn.room()

    task = asyncio.create_task(replay())
    await asyncio.sleep(0.05)
    assert sent < 20 and not conn.closed
    socket.flowing.set()
    async with asyncio.timeout(5):
        await task
    await conn.aclose()
    assert len(socket.sent) == 20
    assert socket.closed_with is None
