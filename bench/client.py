"""A lean WebSocket client for load generation: websockets' sans-I/O protocol on an asyncio
(uvloop) transport. Frames are handed to a callback inside `data_received`, stamped with the
time they were read, with no per-message task switch, so the client adds as little delay and CPU
as possible to what it measures.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import cast

from websockets.client import ClientProtocol
from websockets.exceptions import InvalidStatus
from websockets.extensions.permessage_deflate import enable_client_permessage_deflate
from websockets.frames import Frame, Opcode
from websockets.http11 import Response
from websockets.uri import parse_uri

TextHandler = Callable[[bytes, int], None]
"""Called with each text message (UTF-8 bytes) and its receive time (`time.time_ns()`)."""


class WsConnection(asyncio.Protocol):
    """One client WebSocket."""

    def __init__(self, uri: str, on_text: TextHandler, *, deflate: bool) -> None:
        extensions = enable_client_permessage_deflate(None) if deflate else None
        self.protocol = ClientProtocol(parse_uri(uri), extensions=extensions, max_size=None)
        self.on_text = on_text
        loop = asyncio.get_running_loop()
        self.opened: asyncio.Future[None] = loop.create_future()
        self.closed: asyncio.Future[None] = loop.create_future()
        self.transport: asyncio.Transport | None = None
        self._fragments: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self.transport = cast(asyncio.Transport, transport)
        self.protocol.send_request(self.protocol.connect())
        self._flush()

    def data_received(self, data: bytes) -> None:
        now = time.time_ns()
        protocol = self.protocol
        protocol.receive_data(data)
        for event in protocol.events_received():
            if isinstance(event, Frame):
                opcode = event.opcode
                if opcode is Opcode.TEXT:
                    if event.fin:
                        self.on_text(bytes(event.data), now)
                    else:
                        self._fragments = [bytes(event.data)]
                elif opcode is Opcode.CONT and self._fragments:
                    self._fragments.append(bytes(event.data))
                    if event.fin:
                        whole, self._fragments = b"".join(self._fragments), []
                        self.on_text(whole, now)
            elif isinstance(event, Response) and not self.opened.done():
                if protocol.handshake_exc is not None:
                    self.opened.set_exception(protocol.handshake_exc)
                elif event.status_code != 101:
                    self.opened.set_exception(InvalidStatus(event))
                else:
                    self.opened.set_result(None)
        self._flush()

    def eof_received(self) -> bool | None:
        self.protocol.receive_eof()
        self._flush()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.opened.done():
            self.opened.set_exception(exc or ConnectionError("connection closed during handshake"))
        if not self.closed.done():
            self.closed.set_result(None)

    def _flush(self) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        for chunk in self.protocol.data_to_send():
            if chunk:
                transport.write(chunk)
            elif transport.can_write_eof():
                transport.write_eof()

    def send_text(self, text: str) -> None:
        """Send a text message."""
        self.protocol.send_text(text.encode())
        self._flush()

    async def close(self, timeout: float = 2.0) -> None:
        """Close handshake, then drop the transport if the server has not closed it by `timeout`."""
        if self.transport is None or self.closed.done():
            return
        with contextlib.suppress(Exception):
            self.protocol.send_close(1000)
            self._flush()
        try:
            await asyncio.wait_for(asyncio.shield(self.closed), timeout)
        except TimeoutError:
            self.transport.abort()


async def connect(
    host: str, port: int, path: str, on_text: TextHandler, *, deflate: bool, timeout: float = 30.0
) -> WsConnection:
    """Open a WebSocket to `ws://host:port/path`; returns once the handshake succeeded."""
    loop = asyncio.get_running_loop()
    uri = f"ws://{host}:{port}{path}"
    _, conn = await asyncio.wait_for(
        loop.create_connection(lambda: WsConnection(uri, on_text, deflate=deflate), host, port),
        timeout,
    )
    try:
        await asyncio.wait_for(asyncio.shield(conn.opened), timeout)
    except BaseException:
        if conn.transport is not None:
            conn.transport.abort()
        raise
    return conn
