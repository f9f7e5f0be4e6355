"""The gateway's lean WebSocket protocol in a real uvicorn server (docs/benchmarks.md#idle-sockets):
messages both ways in order, close codes, keepalive pings, the close of a client that stops
answering them, and a handshake that is let go once answered."""

from __future__ import annotations

import asyncio
import base64
import os
import struct
from collections.abc import AsyncIterator

import pytest
import uvicorn
import websockets
from starlette.applications import Starlette
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from durachat_gateway.ws_protocol import LeanWebSocketProtocol
from durachat_infra.local.ports import free_port
from support.waiting import eventually

KEEPALIVE = 0.3


async def echo(websocket: WebSocket) -> None:
    await websocket.accept()
    try:
        while True:
            text = await websocket.receive_text()
            if text == "bye":
                await websocket.close(4001, "asked to")
                return
            await websocket.send_text(text.upper())
    except WebSocketDisconnect:
        pass


@pytest.fixture
async def server() -> AsyncIterator[uvicorn.Server]:
    app = Starlette(routes=[WebSocketRoute("/echo", echo)])
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=free_port(),
        ws=LeanWebSocketProtocol,
        ws_ping_interval=KEEPALIVE,
        ws_ping_timeout=KEEPALIVE,
        ws_per_message_deflate=False,
        log_level="warning",
        lifespan="off",
    )
    running = uvicorn.Server(config)
    task = asyncio.create_task(running.serve())
    await eventually(lambda: _true(running.started))
    yield running
    running.should_exit = True
    async with asyncio.timeout(10):
        await task


async def _true(value: bool) -> bool:
    return value


def _url(server: uvicorn.Server) -> str:
    return f"ws://127.0.0.1:{server.config.port}/echo"


async def test_messages_go_both_ways_in_order_and_the_app_close_code_arrives(
    server: uvicorn.Server,
) -> None:
    async with websockets.connect(_url(server), compression=None) as ws:
        for i in range(50):
            await ws.send(f"m{i}")
        assert [await ws.recv() for _ in range(50)] == [f"M{i}" for i in range(50)]
        await ws.send("bye")
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await ws.recv()
    assert closed.value.rcvd is not None
    assert (closed.value.rcvd.code, closed.value.rcvd.reason) == (4001, "asked to")


async def test_the_handshake_is_let_go_once_answered(server: uvicorn.Server) -> None:
    async with websockets.connect(_url(server), compression=None) as ws:
        await ws.send("x")
        assert await ws.recv() == "X"
        protocols = [
            p for p in server.server_state.connections if isinstance(p, LeanWebSocketProtocol)
        ]
        assert len(protocols) == 1
        assert not hasattr(protocols[0], "request")
        assert not hasattr(protocols[0], "response")


async def test_an_idle_client_that_answers_pings_stays(server: uvicorn.Server) -> None:
    async with websockets.connect(_url(server), compression=None, ping_interval=None) as ws:
        await asyncio.sleep(KEEPALIVE * 5)  # several keepalive rounds, answered by the client
        await ws.send("still")
        async with asyncio.timeout(5):
            assert await ws.recv() == "STILL"


async def test_a_client_that_stops_answering_pings_is_closed_with_1011(
    server: uvicorn.Server,
) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.config.port)
    key = base64.b64encode(os.urandom(16)).decode()
    writer.write(
        (
            "GET /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
            "Sec-WebSocket-Version: 13\r\n\r\n"
        ).encode()
    )
    async with asyncio.timeout(5):
        head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 101")
    async with asyncio.timeout(KEEPALIVE * 10):
        first, length = await reader.readexactly(2)
        assert first == 0x89  # a ping, unanswered
        await reader.readexactly(length)
        first, length = await reader.readexactly(2)
        assert first == 0x88  # then the close
        (code,) = struct.unpack("!H", (await reader.readexactly(length))[:2])
    assert code == 1011
    writer.close()
