"""The client's link to the server: one WebSocket at a time, reopened with the same connection
id when it drops, the HTTP client, and the background tasks that end with them."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
import websockets
from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import InvalidHandshake, InvalidStatus

from durachat.client.errors import ClientError
from durachat.client.urls import HTTP_TIMEOUT, fetch_history, socket_url
from durachat.types import UIMessage

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SocketEvents:
    """What the client does as its socket lives.

    Attributes:
        receive: Handles one text frame received on a socket.
        opened: A socket became the current one (the first, or one reopened): what the client
            kept about the previous socket no longer holds.
        dropped: The socket dropped (a reconnect follows, unless the client gives up): what
            waits for an answer on it fails with the error.
        recover: Runs after a reconnect (cancelled by the next one, or by `close`).
        shut_down: The client is done (closed, or it gave up reconnecting): everything still
            running ends with the error.
    """

    receive: Callable[[ClientConnection, str], Awaitable[None]]
    opened: Callable[[], None]
    dropped: Callable[[ClientError], None]
    recover: Callable[[], Coroutine[Any, Any, None]]
    shut_down: Callable[[ClientError], None]


class Connection:
    """One chat's socket and HTTP client.

    A reader task receives every frame of the current socket. When the socket drops, it
    reconnects with the same connection id (`_pk`) and bounded, jittered exponential backoff;
    a close code of 1008 or 4000-4999, a 4xx answer to the handshake, or running out of
    attempts ends the client. Frames sent while reconnecting wait for the new socket.

    Attributes:
        http: The HTTP client (the same extra headers as the socket).
        started: Set once the client has connected (its first socket, branch lookup and
            history): from then on a lost view reloads the transcript.
    """

    def __init__(
        self,
        *,
        base_url: str,
        agent: str,
        name: str,
        connection_id: str,
        branch: Callable[[], str],
        headers: Mapping[str, str],
        open_timeout: float,
        reconnect_attempts: int,
        reconnect_max_delay: float,
    ) -> None:
        """Prepare the link; `start` opens it.

        Args:
            base_url: The server's base URL.
            agent: The agent namespace.
            name: The chat instance name.
            connection_id: The `_pk` of every socket.
            branch: The viewed branch, which every socket's URL names.
            headers: Extra headers for the WebSocket handshake and the HTTP requests.
            open_timeout: Timeout of each WebSocket handshake, in seconds.
            reconnect_attempts: Reconnect attempts after the socket drops before giving up.
            reconnect_max_delay: Upper bound of the backoff between attempts, in seconds.
        """
        self._base_url = base_url
        self._agent = agent
        self._name = name
        self._connection_id = connection_id
        self._branch = branch
        self._headers = dict(headers)
        self._open_timeout = open_timeout
        self._reconnect_attempts = reconnect_attempts
        self._reconnect_max_delay = reconnect_max_delay
        self.http = httpx.AsyncClient(headers=self._headers, timeout=HTTP_TIMEOUT)
        self.started = False
        self._events: SocketEvents | None = None
        self._ws: ClientConnection | None = None
        self._sends = 0
        self._connected = asyncio.Event()
        self._closing = False
        self._close_done = asyncio.Event()
        self._closed: ClientError | None = None
        self._reader: asyncio.Task[None] | None = None
        self._recovery: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def connected(self) -> bool:
        """Whether a socket is open right now (False while reconnecting and after `close`)."""
        return self._connected.is_set() and self._closed is None

    @property
    def websocket(self) -> ClientConnection | None:
        """The current socket; None while reconnecting."""
        return self._ws if self.connected else None

    @property
    def closing(self) -> bool:
        """Whether `close` has been called."""
        return self._closing

    @property
    def sends(self) -> int:
        """How many frames were sent on the current socket so far."""
        return self._sends

    async def start(self, events: SocketEvents) -> None:
        """Open the first socket and start receiving.

        Raises:
            ClientError: `connect_failed` if the socket cannot be opened (the HTTP client is
                then closed too).
        """
        self._events = events
        try:
            ws = await self._open_socket()
        except BaseException:
            await self.http.aclose()
            raise
        self._use(ws)
        self._reader = asyncio.create_task(self._read(ws), name=f"durachat-reader-{self._name}")

    async def fetch_history(self, branch: str) -> list[UIMessage]:
        """Read a branch's stored transcript over HTTP (see `durachat.client.fetch_history`)."""
        return await fetch_history(
            self._base_url, self._agent, self._name, branch=branch, http=self.http
        )

    async def send(
        self, frame: Mapping[str, Any], *, stamp: Callable[[int], object] | None = None
    ) -> None:
        """Send on the current socket, waiting through a reconnect.

        Args:
            frame: The frame.
            stamp: Gets the frame's position among the frames sent on the socket it goes out
                on.

        Raises:
            ClientError: `closed` (or the error the client ended with) once the client is
                done.
        """
        text = json.dumps(frame)
        while True:
            if self._closed is not None:
                raise ClientError(self._closed.code, self._closed.message)
            if self._closing:
                raise ClientError("closed", "the client was closed")
            ws = self._ws
            if ws is not None and self._connected.is_set():
                try:
                    position = self._position(ws)
                    if stamp is not None:
                        stamp(position)
                    await ws.send(text)
                    return
                except websockets.ConnectionClosed:
                    if self._ws is ws:
                        self._connected.clear()
            await self._connected.wait()

    async def send_on(
        self,
        ws: ClientConnection,
        frame: Mapping[str, Any],
        *,
        stamp: Callable[[int], object] | None = None,
    ) -> None:
        """Send a frame that only makes sense on the socket `ws` (nothing if it has dropped).

        Args: as for `send`.
        """
        position = self._position(ws)
        if stamp is not None:
            stamp(position)
        with contextlib.suppress(websockets.ConnectionClosed):
            await ws.send(json.dumps(frame))

    def spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        """Run a background task that `close` cancels."""
        task = asyncio.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        """Close the socket and the HTTP client; the client is shut down with `closed`."""
        if self._closing:
            await self._close_done.wait()
            return
        self._closing = True
        for task in [self._recovery, *self._tasks]:
            if task is not None:
                task.cancel()
        ws = self._ws
        if ws is not None:
            await ws.close()
        if self._reader is not None:
            # It may be between sockets, in a backoff sleep or a handshake.
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        self._shutdown(ClientError("closed", "the client was closed"))
        await self.http.aclose()
        self._close_done.set()

    def _position(self, ws: ClientConnection) -> int:
        # The server handles a socket's frames in order, so positions order our frames as the
        # server saw them (numbered before the send: the answer may arrive before it returns).
        if ws is not self._ws:
            return -1
        self._sends += 1
        return self._sends

    async def _open_socket(self) -> ClientConnection:
        url = socket_url(
            self._base_url, self._agent, self._name, self._connection_id, self._branch()
        )
        try:
            return await ws_connect(
                url,
                additional_headers=self._headers or None,
                max_size=None,
                open_timeout=self._open_timeout,
            )
        except InvalidStatus as exc:
            status = exc.response.status_code
            text = exc.response.body.decode(errors="replace").strip() if exc.response.body else ""
            raise ClientError(
                "connect_failed",
                f"{url.split('?', 1)[0]} refused the connection: HTTP {status} {text}".rstrip(),
                status=status,
            ) from exc
        except (OSError, TimeoutError, InvalidHandshake) as exc:
            where = url.split("?", 1)[0]
            raise ClientError("connect_failed", f"cannot connect to {where}: {exc}") from exc

    def _use(self, ws: ClientConnection) -> None:
        self._ws = ws
        self._sends = 0
        if self._events is not None:
            self._events.opened()
        self._connected.set()

    async def _read(self, ws: ClientConnection) -> None:
        events = self._events
        if events is None:  # pragma: no cover - started by `start`, which sets them
            return
        while True:
            try:
                async for raw in ws:
                    if isinstance(raw, str):
                        await events.receive(ws, raw)
            except websockets.ConnectionClosed:
                pass
            self._connected.clear()
            if self._closing:
                return
            events.dropped(ClientError("disconnected", "the socket dropped"))
            code = ws.close_code
            if code is not None and (code == 1008 or 4000 <= code <= 4999):
                self._shutdown(ClientError("closed", f"the server closed the connection ({code})"))
                return
            log.info("chat %s: socket dropped (%s); reconnecting", self._name, code)
            reconnected = await self._reconnect()
            if reconnected is None:
                # None also when close() interrupted the attempts; close() shuts down then.
                if not self._closing_now():
                    self._shutdown(ClientError("disconnected", "the connection was lost"))
                return
            ws = reconnected
            self._use(ws)
            if self._recovery is not None:
                self._recovery.cancel()
            self._recovery = asyncio.create_task(events.recover())

    async def _reconnect(self) -> ClientConnection | None:
        delay = 0.1
        for attempt in range(1, self._reconnect_attempts + 1):
            # Jittered so that clients dropped together do not come back together.
            await asyncio.sleep(delay * (0.5 + random.random() / 2))
            if self._closing:
                return None
            try:
                return await self._open_socket()
            except ClientError as exc:
                log.info("chat %s: reconnect attempt %d failed: %s", self._name, attempt, exc)
                if exc.status is not None and 400 <= exc.status < 500:
                    return None
            delay = min(delay * 2, self._reconnect_max_delay)
        return None

    def _closing_now(self) -> bool:
        # Read through a call: close() may run during an await, which a type checker that
        # narrowed `self._closing` before that await cannot see.
        return self._closing

    def _shutdown(self, error: ClientError) -> None:
        if self._closed is None:
            self._closed = error
        self._connected.set()  # wakes senders, which then see `_closed`
        if self._events is not None:
            self._events.shut_down(error)
