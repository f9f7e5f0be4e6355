"""uvicorn's WebSocket protocol (the sans-I/O `websockets` one), holding less per idle socket.

A gateway holds thousands of chat sockets that wait for a message most of their life
(docs/benchmarks.md#idle-sockets). uvicorn's protocol gives each one an `asyncio.Queue` for
what the app has not received yet and an `asyncio.Event` for write flow control: five deques
of ~760 bytes, empty nearly always. It also keeps the parsed upgrade request and the handshake
response (their headers) for the socket's whole life, though nothing reads them after the
handshake (the app has the request's headers in its scope). `LeanWebSocketProtocol` is the
same protocol with a receive queue and a flag that make their objects only while someone waits
on them, and that lets the handshake go once it is answered. Frames, keepalive pings, size
bounds and close codes are uvicorn's own.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn._types import ASGIReceiveEvent, ASGISendEvent
from uvicorn.config import Config
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from uvicorn.server import ServerState


class Inbox:
    """The messages a socket received that the app has not taken yet (what uvicorn uses of an
    `asyncio.Queue`: `put_nowait`, `get`, `empty`). One reader at a time, as ASGI has it: the
    app's `receive`."""

    __slots__ = ("_items", "_waiter")

    def __init__(self) -> None:
        self._items: list[ASGIReceiveEvent] = []
        self._waiter: asyncio.Future[None] | None = None

    def put_nowait(self, item: ASGIReceiveEvent) -> None:
        """Add a message, waking the reader."""
        self._items.append(item)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def empty(self) -> bool:
        """Whether no message waits."""
        return not self._items

    async def get(self) -> ASGIReceiveEvent:
        """The oldest message, once there is one."""
        while not self._items:
            if self._waiter is not None:
                raise RuntimeError("a WebSocket's messages are received by one reader at a time")
            waiter = self._waiter = asyncio.get_running_loop().create_future()
            try:
                await waiter
            finally:
                self._waiter = None
        return self._items.pop(0)


class Flag:
    """Whether the socket can be written to (what uvicorn uses of an `asyncio.Event`); a
    writer waits while the transport's buffer is over its high-water mark."""

    __slots__ = ("_on", "_waiters")

    def __init__(self) -> None:
        self._on = True
        self._waiters: list[asyncio.Future[None]] | None = None

    def is_set(self) -> bool:
        """Whether writes may go on."""
        return self._on

    def set(self) -> None:
        """Let writes go on, waking every writer waiting."""
        self._on = True
        waiters, self._waiters = self._waiters, None
        for waiter in waiters or ():
            if not waiter.done():
                waiter.set_result(None)

    def clear(self) -> None:
        """Make writers wait."""
        self._on = False

    async def wait(self) -> None:
        """Return once writes may go on."""
        if self._on:
            return
        waiter = asyncio.get_running_loop().create_future()
        if self._waiters is None:
            self._waiters = []
        self._waiters.append(waiter)
        try:
            await waiter
        finally:
            if self._waiters is not None and waiter in self._waiters:
                self._waiters.remove(waiter)


class LeanWebSocketProtocol(WebSocketsSansIOProtocol):
    """uvicorn's sans-I/O WebSocket protocol with a lean receive queue and write flag, which
    drops the upgrade request and response once the handshake is answered."""

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.queue: Any = Inbox()
        self.writable: Any = Flag()

    async def send(self, message: ASGISendEvent) -> None:
        await super().send(message)
        if message["type"] == "websocket.accept" and self.handshake_complete:
            # Read by nothing past the handshake; their headers are a few KiB a socket.
            request = self.request
            del self.request
            del self.response
            # websockets' parser keeps the request object as long as the socket lives (a
            # local of its generator), so what it holds goes.
            request.headers.clear()
