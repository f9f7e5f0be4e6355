"""One simulated browser tab: a WebSocket on a conversation, read by a greenlet of its own.

Frames are routed by request id to the `ReplyStream`s the user follows (docs/protocol.md
lists the frames). The socket speaks the plain protocol with websocket-client; under Locust,
gevent's monkey patching makes its blocking reads cooperative.
"""

from __future__ import annotations

import contextlib
import json
import struct
import time
from collections.abc import Callable
from typing import Final

import gevent
import gevent.event
import websocket

from durachat.loadtest.stream import ReplyStream
from durachat.protocol import MessageType
from durachat.types import JSONDict

NO_STATUS: Final = 1005
"""The close code when the peer's close frame carried none (or there was no close frame)."""

Adopter = Callable[[str, JSONDict], ReplyStream | None]
"""Given a response frame of an unknown request id, returns the stream to follow it with (or
None to ignore it)."""


class ChatSocket:
    """A WebSocket on one conversation and what arrived on it."""

    def __init__(self, url: str, *, on_error: Callable[[str], None]) -> None:
        """Prepare a socket to `url`; `on_error` gets the code of each error the server
        reports outside a reply (`durachat_error` frames, unreadable frames)."""
        self.url = url
        self._on_error = on_error
        self._ws: websocket.WebSocket | None = None
        self._reader: gevent.Greenlet[[websocket.WebSocket], None] | None = None
        self._tick = gevent.event.Event()
        self.streams: dict[str, ReplyStream] = {}
        self.adopt: Adopter | None = None
        self.offers: list[str] = []
        self.pending: list[str] = []
        self.resume_none = 0
        self.identity = False
        self.frames = 0
        self.stray = 0
        self.closed = False
        self.close_code: int | None = None
        self.dropped = False

    def open(self, timeout: float) -> None:
        """Connect (the upgrade must complete within `timeout` seconds).

        Raises:
            websocket.WebSocketException, OSError: the connection failed.
        """
        ws = websocket.create_connection(self.url, timeout=timeout, enable_multithread=True)
        # Idle tabs wait for minutes: reads must not time out once connected.
        ws.settimeout(None)
        self._ws = ws
        self._reader = gevent.spawn(self._read, ws)

    def send(self, frame: JSONDict) -> None:
        """Send one frame.

        Raises:
            websocket.WebSocketException, OSError: the socket is closed.
        """
        if self._ws is None:
            raise websocket.WebSocketConnectionClosedException("not connected")
        self._ws.send(json.dumps(frame))

    def track(self, stream: ReplyStream) -> None:
        """Route the frames of `stream.request_id` to `stream`."""
        self.streams[stream.request_id] = stream

    def wait_until(self, condition: Callable[[], bool], timeout: float) -> bool:
        """Wait until `condition()` holds (checked after every frame); False on timeout."""
        deadline = time.monotonic() + timeout
        while True:
            # Only the user's greenlet waits, and greenlets switch only at a wait: clearing
            # before checking loses no frame.
            self._tick.clear()
            if condition():
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self._tick.wait(remaining)

    def close(self) -> None:
        """Close normally (best effort) and stop reading."""
        ws = self._ws
        if ws is not None and ws.connected:
            with contextlib.suppress(websocket.WebSocketException, OSError):
                ws.send_close()
        self._stop()

    def drop(self) -> None:
        """Lose the connection without a close frame, as a network failure does."""
        self.dropped = True
        self._stop()

    def _stop(self) -> None:
        ws, reader = self._ws, self._reader
        if ws is not None:
            # websocket-client leaves these two unannotated.
            ws.abort()  # type: ignore[no-untyped-call]
            ws.shutdown()  # type: ignore[no-untyped-call]
        if reader is not None and reader is not gevent.getcurrent():
            reader.join(timeout=2)
        self.closed = True

    def _read(self, ws: websocket.WebSocket) -> None:
        try:
            while True:
                opcode, data = ws.recv_data()
                if opcode == websocket.ABNF.OPCODE_CLOSE:
                    self.close_code = struct.unpack("!H", data[:2])[0] if len(data) >= 2 else None
                    break
                if opcode != websocket.ABNF.OPCODE_TEXT:
                    continue
                now, wall_ns = time.perf_counter(), time.time_ns()
                self.frames += 1
                try:
                    frame = json.loads(data)
                except ValueError:
                    self._on_error("invalid_json")
                    continue
                if isinstance(frame, dict):
                    self._dispatch(frame, now, wall_ns)
                self._tick.set()
        except (websocket.WebSocketException, OSError, struct.error):
            pass
        finally:
            if self.close_code is None:
                self.close_code = NO_STATUS
            self.closed = True
            self._tick.set()

    def _dispatch(self, frame: JSONDict, now: float, wall_ns: int) -> None:
        kind = frame.get("type")
        request_id = frame.get("id")
        if kind == MessageType.USE_CHAT_RESPONSE:
            stream = self.streams.get(request_id) if isinstance(request_id, str) else None
            if stream is None and self.adopt is not None and isinstance(request_id, str):
                stream = self.adopt(request_id, frame)
                if stream is not None:
                    self.streams[request_id] = stream
            if stream is None:
                self.stray += 1
            else:
                stream.on_frame(frame, now, wall_ns)
        elif kind == MessageType.STREAM_RESUMING and isinstance(request_id, str):
            self.offers.append(request_id)
        elif kind == MessageType.STREAM_PENDING and isinstance(request_id, str):
            self.pending.append(request_id)
        elif kind == MessageType.STREAM_RESUME_NONE:
            self.resume_none += 1
        elif kind == MessageType.IDENTITY:
            self.identity = True
        elif kind == MessageType.ERROR:
            self._on_error(str(frame.get("code") or "unknown"))
