"""One client WebSocket on a gateway: its outbound queue and its place in the resume handshake."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from prometheus_client import Counter
from starlette.websockets import WebSocket, WebSocketDisconnect

from durachat.protocol import MAIN_BRANCH, encode_json
from durachat.protocol.server_frames import error_frame
from durachat_gateway.telemetry import FRAMES_OUT, SLOW_CONSUMERS
from durachat_infra.eventlog import LogEntry, with_cursor, with_replay_flag

log = logging.getLogger(__name__)

FRAME_ERRORS = Counter("durachat_gateway_frame_errors_total", "Client frames rejected", ["code"])

_draining: set[asyncio.Task[None]] = set()
"""Forwarders of closed connections still delivering their last frames."""

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
        self.replayed: tuple[str | None, tuple[int, int]] | None = None
        """(request id, last entry id) of the last replay: live entries of that request (of
        any request after a cursor replay: None) up to there were already sent as replay and
        are skipped if the log reader delivers them late."""
        self.branch = MAIN_BRANCH
        """The branch this connection views: it gets that branch's frames only."""
        self.cursors = False
        """Stamp every frame from the log with its entry id (`cursor`), for clients that
        resume from a cursor."""
        self._outbox: asyncio.Queue[Callable[[], Awaitable[None]] | None] = asyncio.Queue()
        self._forwarder: asyncio.Task[None] | None = None
        self._in_flight = 0

    def send_entry(self, entry: LogEntry, *, replay: bool = False) -> None:
        """Send the frame of a log entry (marked as replayed, and stamped with its cursor for a
        client that asked for cursors)."""
        frame = with_replay_flag(entry.frame) if replay else entry.frame
        self.send(with_cursor(frame, entry.id) if self.cursors else frame)

    def start(self) -> None:
        """Start the writer."""
        self._writer = asyncio.create_task(self._write_loop(), name=f"ws-writer-{self.id}")

    def forward(self, work: Callable[[], Awaitable[None]]) -> None:
        """Queue work that delivers a client frame to its shard.

        Forwards run one at a time, in arrival order, beside the receive loop: a frame stuck in
        retries (a shard failing over) does not hold up the frames the gateway answers itself,
        such as the resume handshake.
        """
        self._in_flight += 1
        self._outbox.put_nowait(work)
        if self._forwarder is None:
            self._forwarder = asyncio.create_task(self._forward_loop(), name=f"fwd-{self.id}")

    async def _forward_loop(self) -> None:
        while True:
            work = await self._outbox.get()
            if work is None:
                return
            try:
                await work()
            except Exception:
                log.exception("forwarding a frame of %s failed", self.id)
            finally:
                self._in_flight -= 1

    @property
    def forwarding(self) -> bool:
        """Whether frames of this connection are still on their way to a shard."""
        return self._in_flight > 0

    def send(self, text: str) -> None:
        """Queue a frame; never blocks."""
        if self.closed:
            return
        try:
            self._queue.put_nowait(text)
            FRAMES_OUT.inc()
        except asyncio.QueueFull:
            SLOW_CONSUMERS.inc()
            log.warning("client %s is too slow; disconnecting it", self.id)
            self.closed = True
            asyncio.get_running_loop().create_task(self._close(SLOW_CONSUMER_CLOSE))

    def send_json(self, frame: Mapping[str, Any]) -> None:
        """Queue a frame given as an object (built by `durachat.protocol`)."""
        self.send(encode_json(frame))

    def send_error(self, code: str, message: str) -> None:
        """Tell the client a frame of its was rejected (`durachat_error`, a stable `code`)."""
        FRAME_ERRORS.labels(code).inc()
        self.send_json(error_frame(code, message))

    async def aclose(self) -> None:
        """Stop the writer after it drains what is queued; frames still being forwarded are
        delivered (a cancel or a request sent just before closing must not be lost)."""
        self.closed = True
        if self._forwarder is not None:
            # Finish in the background; the task is kept referenced until it ends.
            self._outbox.put_nowait(None)
            _draining.add(self._forwarder)
            self._forwarder.add_done_callback(_draining.discard)
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
