"""An idle connection holds no task (docs/benchmarks.md#idle-sockets): its writer and its
forwarder run while frames wait, in order, and end once they are through; the next frame
starts another."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from starlette.websockets import WebSocket

from durachat_gateway.connection import ClientConnection
from support.waiting import eventually


class Socket:
    def __init__(self) -> None:
        self.sent: list[str] = []

    async def send_text(self, text: str) -> None:
        await asyncio.sleep(0)
        self.sent.append(text)


def tasks_of(conn: ClientConnection) -> list[str]:
    names = (f"ws-writer-{conn.id}", f"fwd-{conn.id}")
    return [t.get_name() for t in asyncio.all_tasks() if t.get_name() in names]


async def test_the_writer_runs_while_frames_wait_and_keeps_their_order() -> None:
    socket = Socket()
    conn = ClientConnection(cast(WebSocket, socket), "c1", limit=100)
    conn.send("before start")
    conn.start()
    for i in range(5):
        conn.send(f"a{i}")
    await eventually(lambda: _done(lambda: len(socket.sent) == 6 and not tasks_of(conn)))
    assert conn.buffered_bytes == 0
    conn.send("b")  # a later frame starts another writer
    await eventually(lambda: _done(lambda: socket.sent[-1] == "b" and not tasks_of(conn)))
    assert socket.sent == ["before start", *(f"a{i}" for i in range(5)), "b"]
    await conn.aclose()


async def test_the_forwarder_runs_while_frames_wait_and_keeps_their_order() -> None:
    conn = ClientConnection(cast(WebSocket, Socket()), "c2", limit=100)
    delivered: list[int] = []

    def work(n: int) -> Any:
        async def run() -> None:
            await asyncio.sleep(0)
            delivered.append(n)

        return run

    for i in range(3):
        conn.forward(work(i), 10)
    assert conn.forwarding
    await eventually(lambda: _done(lambda: not conn.forwarding and not tasks_of(conn)))
    conn.forward(work(3), 10)
    await conn.aclose()  # what was forwarded before the close still goes
    await eventually(lambda: _done(lambda: not conn.forwarding and not tasks_of(conn)))
    assert delivered == [0, 1, 2, 3]


async def _done(check: Any) -> bool:
    return bool(check())
