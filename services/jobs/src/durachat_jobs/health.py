"""The jobs worker's small HTTP listener: `/healthz`, `/readyz` and `/metrics`.

The worker is an arq loop, not a web application, so this is a minimal HTTP/1.1 responder on
asyncio streams: it answers one GET per connection and closes it, which is all orchestrators'
probes and Prometheus need (docs/deployment.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

log = logging.getLogger(__name__)

Readiness = Callable[[], Awaitable[tuple[int, dict[str, Any]]]]
"""Returns the readiness status (200 or 503) and its JSON body."""

_REASONS = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 503: "Service Unavailable"}
_READ_TIMEOUT = 5.0


class HealthServer:
    """Serves the worker's health and metrics on `host:port` (port 0 picks a free one)."""

    def __init__(self, host: str, port: int, readiness: Readiness) -> None:
        self._host = host
        self._port = port
        self._readiness = readiness
        self._server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        """The port it listens on (once started)."""
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        """Start listening."""
        self._server = await asyncio.start_server(self._handle, self._host, self._port)
        log.info("jobs health and metrics on http://%s:%s", self._host, self.port)

    async def stop(self) -> None:
        """Stop listening."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(_READ_TIMEOUT):
                request = await reader.readuntil(b"\r\n\r\n")
            method, _, rest = request.decode("latin-1").partition(" ")
            path = rest.partition(" ")[0].partition("?")[0]
            status, content_type, body = await self._answer(method, path)
            head = (
                f"HTTP/1.1 {status} {_REASONS.get(status, '')}\r\n"
                f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
                "Connection: close\r\n\r\n"
            )
            writer.write(head.encode("latin-1") + (b"" if method == "HEAD" else body))
            await writer.drain()
        except (OSError, TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    async def _answer(self, method: str, path: str) -> tuple[int, str, bytes]:
        if method not in ("GET", "HEAD"):
            return 405, "text/plain", b"method not allowed\n"
        if path == "/healthz":
            return 200, "application/json", b'{"ok":true,"process":"jobs"}'
        if path == "/readyz":
            status, body = await self._readiness()
            return status, "application/json", json.dumps(body).encode()
        if path == "/metrics":
            return 200, CONTENT_TYPE_LATEST, generate_latest()
        return 404, "text/plain", b"not found\n"
