"""The gateway's HTTP and WebSocket edges (docs/security.md#bad-input): names in paths, request
bodies, origins of browser sockets, and oversized request heads.

* `EdgeChecks`, an ASGI middleware in front of every route: a conversation or agent name in a
  path that is not valid UTF-8, holds a control character or is longer than the store allows
  gets 400 `{"code": "invalid_name"}` (a WebSocket: the upgrade is refused with 400); a
  request body larger than `max_body_bytes` gets 413 `{"code": "body_too_large"}`.
* `origin_allowed`: whether a browser's `Origin` may open a socket.
* `bounded_http_protocol`: uvicorn's HTTP protocol with a bound on the request line and
  headers, answered 431 as soon as it is passed (instead of buffering a head without end).
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Iterable
from typing import Any, Final
from urllib.parse import unquote_to_bytes

from durachat_gateway.auth.middleware import ASGIApp, Message, Receive, Scope, Send, deny_websocket
from durachat_gateway.mistakes import client_mistake

MAX_NAME_CHARS: Final = 512
"""Longest agent or conversation name: what the store keeps (`ConversationKey`)."""

LINGER_SECONDS: Final = 2.0
"""How long a connection whose head was refused is kept open, reading and dropping, after
its 431 (so the client reads the answer before the connection goes)."""

_NAMED_PREFIXES: Final = ("/agents/", "/v1/agents/")


def name_problem(name: str) -> str | None:
    """Why `name` cannot name an agent or a conversation, or None if it can."""
    if not name:
        return "a name cannot be empty"
    if len(name) > MAX_NAME_CHARS:
        return f"a name is at most {MAX_NAME_CHARS} characters"
    for char in name:
        if unicodedata.category(char) in ("Cc", "Cs"):
            return "a name cannot hold control characters"
    return None


def _path_problem(raw_path: bytes) -> str | None:
    """The first problem of a path's segments under `/agents/` (or `/v1/agents/`)."""
    for segment in raw_path.split(b"/"):
        if not segment:
            continue
        try:
            text = unquote_to_bytes(segment).decode("utf-8")
        except UnicodeDecodeError:
            return "a name must be valid UTF-8"
        problem = name_problem(text)
        if problem is not None:
            return problem
    return None


class BodyTooLargeError(Exception):
    """A request body over the bound, found while it was read."""


class EdgeChecks:
    """Refuses bad names in paths and oversized request bodies before any route runs."""

    def __init__(self, app: ASGIApp, *, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        path: str = scope.get("path", "")
        if path.startswith(_NAMED_PREFIXES):
            raw = scope.get("raw_path") or path.encode("utf-8", "surrogateescape")
            problem = _path_problem(raw.split(b"?", 1)[0])
            if problem is not None:
                client_mistake("invalid_name", problem)
                await _answer(scope, receive, send, 400, code="invalid_name", message=problem)
                return
        if scope["type"] == "websocket":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_body_bytes:
            client_mistake("body_too_large", f"{declared} bytes declared")
            await _answer(
                scope, receive, send, 413, code="body_too_large", message=self._too_large()
            )
            return
        await self._bounded(scope, receive, send)

    def _too_large(self) -> str:
        return f"request bodies are limited to {self.max_body_bytes} bytes"

    async def _bounded(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Run the app, counting the body as it is read (a body without a length, chunked)."""
        seen = 0
        started = False

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_body_bytes:
                    raise BodyTooLargeError
            return message

        async def tracked(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counted, tracked)
        except BodyTooLargeError:
            client_mistake("body_too_large", f"more than {self.max_body_bytes} bytes sent")
            if not started:
                await _answer(
                    scope, receive, send, 413, code="body_too_large", message=self._too_large()
                )


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _answer(
    scope: Scope, receive: Receive, send: Send, status: int, *, code: str, message: str
) -> None:
    body = json.dumps({"code": code, "message": message}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    if scope["type"] == "http":
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
        return
    await deny_websocket(scope, receive, send, status=status, body=body, headers=headers)


def parse_origins(value: Any) -> frozenset[str] | None:
    """Allowed origins from a setting: a comma-separated string or a list of strings; None
    (any origin) when empty or unset. Origins compare without a trailing `/`, case-blind."""
    if value is None:
        return None
    items: Iterable[Any] = value.split(",") if isinstance(value, str) else value
    origins = frozenset(
        str(item).strip().rstrip("/").lower() for item in items if str(item).strip()
    )
    return origins or None


def origin_allowed(origin: str | None, allowed: frozenset[str] | None) -> bool:
    """Whether a WebSocket from `origin` may open: always without an `Origin` header (not a
    browser) or without a list; else when the list holds it, or `*`."""
    if origin is None or allowed is None:
        return True
    return "*" in allowed or origin.strip().rstrip("/").lower() in allowed


def bounded_http_protocol(max_head_bytes: int) -> type[Any]:
    """uvicorn's HTTP protocol (httptools, else h11) answering 431 to a request whose line and
    headers pass `max_head_bytes` before they end; the connection is closed."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:  # pragma: no cover - httptools comes with uvicorn[standard]
        # h11 bounds the head itself (`h11_max_incomplete_event_size`), answering 400.
        from uvicorn.protocols.http.h11_impl import H11Protocol

        return H11Protocol

    class BoundedHttpProtocol(HttpToolsProtocol):
        _head_open = True
        """The bytes coming next belong to a request head."""
        _head_bytes = 0
        _tail = b""
        _refused = False

        def on_headers_complete(self) -> None:
            self._head_open = False
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            super().on_message_complete()
            self._head_open, self._head_bytes, self._tail = True, 0, b""

        def data_received(self, data: bytes) -> None:
            if self._refused:
                return  # the rest of a refused head: read and dropped until the close
            if self._head_open:
                # Measured before the parser sees it (it would buffer a head without end):
                # up to the blank line that ends the head, across reads.
                window = self._tail + data
                end = window.find(b"\r\n\r\n")
                grown = len(data) if end < 0 else max(0, end + 4 - len(self._tail))
                if self._head_bytes + grown > max_head_bytes:
                    self._refuse_head()
                    return
                self._head_bytes += grown
                self._tail = window[-3:]
            super().data_received(data)

        def _refuse_head(self) -> None:
            client_mistake("headers_too_large", f"request head over {max_head_bytes} bytes")
            self._refused = True
            message = f"the request line and headers are limited to {max_head_bytes} bytes"
            body = json.dumps({"code": "headers_too_large", "message": message}).encode()
            self.transport.write(
                b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
                b"content-type: application/json\r\n"
                b"content-length: " + str(len(body)).encode() + b"\r\n"
                b"connection: close\r\n\r\n" + body
            )
            # Half-close after the answer and keep reading (and dropping) a moment: closing
            # with unread bytes would reset the connection, and the client could lose the 431.
            if self.transport.can_write_eof():
                self.transport.write_eof()
            self.loop.call_later(LINGER_SECONDS, self.transport.close)

    return BoundedHttpProtocol
