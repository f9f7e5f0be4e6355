"""A real HTTP server on localhost receiving webhook deliveries, for end-to-end tests."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass(frozen=True)
class Delivery:
    """One request the receiver got."""

    path: str
    headers: dict[str, str]
    body: bytes
    at: float


@dataclass
class Receiver:
    """Records every POST; answers each path with the status set in `statuses` (200 by
    default)."""

    url: str
    deliveries: list[Delivery] = field(default_factory=list)
    statuses: dict[str, int] = field(default_factory=dict)

    def to(self, path: str) -> list[Delivery]:
        """The deliveries to one path, in arrival order."""
        return [d for d in self.deliveries if d.path == path]


@contextmanager
def webhook_receiver() -> Iterator[Receiver]:
    """Serve on a free local port in a thread until the block ends."""
    receiver: Receiver

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length)
            headers = {k.lower(): v for k, v in self.headers.items()}
            receiver.deliveries.append(Delivery(self.path, headers, body, time.monotonic()))
            self.send_response(receiver.statuses.get(self.path, 200))
            self.send_header("content-length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, format: str, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver = Receiver(f"http://127.0.0.1:{server.server_address[1]}")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
