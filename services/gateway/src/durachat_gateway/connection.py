"""One client WebSocket on a gateway: its outbound queue and its place in the resume handshake."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any

from starlette.websockets import WebSocket, WebSocketDisconnect

from durachat_infra.eventlog import LogEntry

log = logging.getLogger(__name__)

SLOW_CONSUMER_CLOSE = 1013
"""Close code for a client that can't keep up; it reconnects and resumes from the log."""


class ClientConnection:
    """A connected client (`_pk` is its id), fed from a bounded queue by one writer task.

    A client that falls `limit` frames behind is disconnected rather than buffered without
    bound; its reconnect resumes from the event log, so it loses nothing.
    """

    def __init__(self, websocket: WebSocket, connection_id: str, *, limit: int) -> None:
        self.websocket = websocket
        self.id = connection_id
        self._queue: asyncio.Queue[str | None] = asyncio.Queue(limit)
        self._writer: asyncio.Task[None] | None = None
        self.closed = False
        self.pending_resume: str | None = None
        """Request id offered with `stream_resuming` and not yet ACKed: excluded from broadcasts."""
        self.parked: str | None = None
        """Request id this connection waits on with `stream_pending`."""
        self.replaying = False
        self.buffer: list[LogEntry] = []
        """Entries that arrived while a replay was being read."""
        self.replayed: tuple[str, tuple[int, int]] | None = None
        """(request id, last entry id) of the last replay: live entries of that request up to
        there were already sent as replay and are skipped if the log reader delivers them late."""
        self.forwarding: asyncio.Lock = asyncio.Lock()

    def start(self) -> None:
        """Start the writer."""
        self._writer = asyncio.create_task(self._write_loop(), name=f"ws-writer-{self.id}")

    def send(self, text: str) -> None:
        """Queue a frame; never blocks."""
        if self.closed:
            return
        try:
            self._queue.put_nowait(text)
        except asyncio.QueueFull:
            log.warning("client %s is too slow; disconnecting it", self.id)
            self.closed = True
            asyncio.get_running_loop().create_task(self._close(SLOW_CONSUMER_CLOSE))

    def send_json(self, frame: dict[str, Any]) -> None:
        """Queue a frame given as an object."""
        self.send(json.dumps(frame, separators=(",", ":"), ensure_ascii=False))

    async def aclose(self) -> None:
        """Stop the writer after it drains what is queued."""
        self.closed = True
        if self._writer is not None:
            try:
                self._queue.put_nowait(None)
            except asyncio.QueueFull:
                self._writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._writer

    async def _close(self, code: int) -> None:
        if self._writer is not None:
            self._writer.cancel()
        with contextlib.suppress(RuntimeError):
            await self.websocket.close(code)

    async def _write_loop(self) -> None:
        queue = self._queue
        send = self.websocket.send_text
        try:
            while True:
                text = await queue.get()
                if text is None:
                    return
                await send(text)
        except (WebSocketDisconnect, RuntimeError, OSError):
            self.closed = True
