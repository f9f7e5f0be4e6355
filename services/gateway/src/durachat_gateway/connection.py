"""One client WebSocket on a gateway: its outbound queue and its place in the resume handshake."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

from prometheus_client import Counter
from starlette.websockets import WebSocket, WebSocketDisconnect

from durachat.protocol import MAIN_BRANCH, encode_json
from durachat.protocol.server_frames import error_frame
from durachat_gateway.telemetry import FRAMES_OUT, SLOW_CONSUMERS
from durachat_infra.eventlog import LogEntry, with_cursor, with_replay_flag

log = logging.getLogger(__name__)

FRAME_ERRORS = Counter("durachat_gateway_frame_errors_total", "Client frames rejected", ["code"])

_draining: set[asyncio.Task[None]] = set()
"""Forwarders of closed connections still delivering their last frames, and the closes of
slow consumers still under way."""

SLOW_CONSUMER_CLOSE = 1013
"""Close code for a client that can't keep up; it reconnects and resumes from the log."""

DEFAULT_BUFFER_BYTES: Final = 16 * 1024 * 1024
"""Bytes of frames queued for one client before it counts as too slow (the default of
`DURACHAT_SEND_BUFFER_BYTES`)."""

DEFAULT_FORWARD_BYTES: Final = 16 * 1024 * 1024
"""Bytes of client frames waiting to reach their shard, per connection (the default of
`DURACHAT_FORWARD_QUEUE_BYTES`)."""


class ForwardQueueFullError(Exception):
    """A connection's frames waiting for their shard passed the bound."""


class ClientConnection:
    """A connected client, fed from a bounded queue by a writer task. `id` is made by the
    server, unique to this socket (frames are targeted by it); `client_id` is the `_pk` the
    client chose, for logs.

    A client that falls `limit` frames behind is disconnected rather than buffered without
    bound; its reconnect resumes from the event log, so it loses nothing.

    Most sockets sit idle most of the time, and a gateway holds thousands of them, so an idle
    connection keeps as little as it can (docs/benchmarks.md#idle-sockets): no writer task, no
    queue, no event; the writer runs while frames wait and ends when they are written.
    """

    __slots__ = (
        "_drained",
        "_forward_bytes",
        "_forward_limit",
        "_forward_room",
        "_forwarder",
        "_in_flight",
        "_limit",
        "_limit_bytes",
        "_outbox",
        "_queue",
        "_queued_bytes",
        "_started",
        "_writer",
        "branch",
        "buffer",
        "client_id",
        "closed",
        "cursors",
        "id",
        "parked",
        "pending_resume",
        "replayed",
        "replaying",
        "websocket",
    )

    def __init__(
        self,
        websocket: WebSocket,
        connection_id: str,
        *,
        limit: int,
        limit_bytes: int = DEFAULT_BUFFER_BYTES,
        forward_bytes: int = DEFAULT_FORWARD_BYTES,
    ) -> None:
        self.websocket = websocket
        self.id = connection_id
        self.client_id = connection_id
        self._limit = limit
        self._limit_bytes = limit_bytes
        self._queue: deque[str | None] | None = None
        """Frames waiting for the client (None: the end of the writer); made when a frame
        is queued, dropped when the writer has written them all."""
        self._queued_bytes = 0
        """Length of the queued frames and of the one being written (characters of JSON
        text: bytes for ASCII)."""
        self._drained: asyncio.Event | None = None
        """Made by the first `room` that has to wait."""
        self._writer: asyncio.Task[None] | None = None
        """The writer, while frames wait for it."""
        self._started = False
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
        self._outbox: deque[tuple[Callable[[], Awaitable[None]], int]] | None = None
        """Work delivering client frames to their shard, in order; made by a forward, dropped
        once done, like the forwarder that runs it (docs/benchmarks.md#idle-sockets)."""
        self._forwarder: asyncio.Task[None] | None = None
        self._in_flight = 0
        self._forward_limit = forward_bytes
        self._forward_bytes = 0
        self._forward_room: asyncio.Event | None = None
        """Made by the first `forward_room` that has to wait."""

    def send_entry(self, entry: LogEntry, *, replay: bool = False) -> None:
        """Send the frame of a log entry (marked as replayed, and stamped with its cursor for a
        client that asked for cursors)."""
        frame = with_replay_flag(entry.frame) if replay else entry.frame
        self.send(with_cursor(frame, entry.id) if self.cursors else frame)

    def start(self) -> None:
        """Start writing to the socket: frames queued so far go out now, later ones as they
        come."""
        self._started = True
        if self._queue:
            self._write()

    def _write(self) -> None:
        """Start a writer for the queued frames, unless one runs."""
        if self._writer is None and self._started and self._queue is not None:
            self._writer = asyncio.get_running_loop().create_task(
                self._write_loop(self._queue), name=f"ws-writer-{self.id}"
            )

    def forward(self, work: Callable[[], Awaitable[None]], size: int = 0) -> None:
        """Queue work that delivers a client frame (of `size` bytes) to its shard.

        Forwards run one at a time, in arrival order, beside the receive loop: a frame stuck in
        retries (a shard failing over) does not hold up the frames the gateway answers itself,
        such as the resume handshake. See `forward_room` for the bound on what waits.
        """
        self._in_flight += 1
        self._forward_bytes += size
        outbox = self._outbox
        if outbox is None:
            outbox = self._outbox = deque()
        outbox.append((work, size))
        if self._forwarder is None:
            self._forwarder = asyncio.get_running_loop().create_task(
                self._forward_loop(outbox), name=f"fwd-{self.id}"
            )

    async def forward_room(self, size: int, timeout: float) -> None:
        """Wait until a frame of `size` bytes fits among those waiting for their shard
        (back-pressure: the receive loop stops reading meanwhile); raises
        `ForwardQueueFullError` after `timeout` seconds (docs/operations.md#buffers)."""
        fits = self._forward_bytes + size <= self._forward_limit
        if self._forward_bytes == 0 or fits:
            return
        room = self._forward_room
        if room is None:
            room = self._forward_room = asyncio.Event()
        room.clear()
        try:
            await asyncio.wait_for(room.wait(), timeout)
        except TimeoutError:
            raise ForwardQueueFullError from None

    async def _forward_loop(self, outbox: deque[tuple[Callable[[], Awaitable[None]], int]]) -> None:
        try:
            while outbox:
                work, size = outbox.popleft()
                try:
                    await work()
                except Exception:
                    log.exception("forwarding a frame of %s failed", self.id)
                finally:
                    self._in_flight -= 1
                    self._forward_bytes -= size
                    room = self._forward_room
                    if room is not None and (
                        self._forward_bytes <= self._forward_limit // 2 or self._in_flight == 0
                    ):
                        room.set()
        finally:
            # As with the writer: a forward after the last look at the outbox starts another.
            self._forwarder = None
            if not outbox and self._outbox is outbox:
                self._outbox = None

    @property
    def forwarding(self) -> bool:
        """Whether frames of this connection are still on their way to a shard."""
        return self._in_flight > 0

    @property
    def filling(self) -> bool:
        """Whether more than half the send buffer is taken (see `room`)."""
        return self._queued_bytes > self._limit_bytes // 2

    async def room(self) -> None:
        """Wait until at most half the send buffer is taken (or the connection closed): a
        replay paces itself by it, so a long one is not taken for a slow client."""
        while self.filling and not self.closed:
            if self._drained is None:
                self._drained = asyncio.Event()
            self._drained.clear()
            await self._drained.wait()

    @property
    def buffered_bytes(self) -> int:
        """Length of the frames queued for the client and not yet written to its socket."""
        return self._queued_bytes

    def send(self, text: str) -> None:
        """Queue a frame; never blocks. A client whose queue would pass `limit` frames or
        `limit_bytes` is disconnected with 1013 (a single frame larger than the bound still
        goes to a client that is keeping up: its queue is empty)."""
        if self.closed:
            return
        size = len(text)
        queue = self._queue
        if queue is None:
            queue = self._queue = deque()
        elif queue and (len(queue) >= self._limit or self._queued_bytes + size > self._limit_bytes):
            self._too_slow()
            return
        queue.append(text)
        self._queued_bytes += size
        FRAMES_OUT.inc()
        if self._writer is None:
            self._write()

    def _too_slow(self) -> None:
        """Disconnect a client that fell too far behind: what is queued for it is dropped at
        once (it resumes from the event log), and the close goes out ahead of it."""
        SLOW_CONSUMERS.inc()
        log.warning(
            "client %s is too slow (%d frames, %d bytes queued); disconnecting it",
            self.client_id,
            len(self._queue or ()),
            self._queued_bytes,
        )
        self.closed = True
        if self._queue is not None:
            self._queue.clear()
        self._queued_bytes = 0
        self._wake()
        closing = asyncio.get_running_loop().create_task(self._close(SLOW_CONSUMER_CLOSE))
        _draining.add(closing)
        closing.add_done_callback(_draining.discard)

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
            # It finishes in the background (it ends once its outbox is empty); the task is
            # kept referenced until then.
            _draining.add(self._forwarder)
            self._forwarder.add_done_callback(_draining.discard)
        writer = self._writer
        if writer is not None and self._queue is not None:
            self._queue.append(None)
            with contextlib.suppress(asyncio.CancelledError):
                await writer

    async def _close(self, code: int) -> None:
        """Close with `code`. The writer is stopped first, so the close frame is the next
        thing the socket sends: behind at most the frame being written, not the queue."""
        writer = self._writer
        if writer is not None:
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await writer
        # Whatever the socket's state, closing it is the end: nothing to report.
        with contextlib.suppress(Exception):
            await self.websocket.close(code)

    def _wake(self) -> None:
        """Wake a replay waiting for room."""
        if self._drained is not None:
            self._drained.set()

    async def _write_loop(self, queue: deque[str | None]) -> None:
        send = self.websocket.send_text
        try:
            while queue:
                text = queue.popleft()
                if text is None:
                    return
                await send(text)
                self._queued_bytes -= len(text)
                if not self.filling:
                    self._wake()
        except (WebSocketDisconnect, RuntimeError, OSError):
            self.closed = True
        except Exception:
            # A socket that went away mid-write (uvicorn's ClientDisconnected).
            self.closed = True
        finally:
            # Nothing awaits between the last look at the queue and here: a frame queued
            # after it starts the next writer.
            self._writer = None
            if not queue and self._queue is queue:
                self._queue = None
            self._wake()
