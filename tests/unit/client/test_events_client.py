"""`EventsClient` against a real local HTTP server speaking Server-Sent Events: it parses the
records, keeps the last event id (the id-only record the gateway opens with too), reconnects
with `Last-Event-ID` when the connection ends, and reports a refusal."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from durachat.client import ClientError, EventsClient
from durachat.client.events import events_url


def _event(n: int) -> str:
    body = {
        "id": f"{n}-0",
        "type": "chat:turn:started",
        "tenant": "t",
        "agent": "a",
        "name": "c",
        "time": n,
        "data": {"n": n},
        "process": "shard:s",
    }
    return f"id: {n}-0\ndata: {json.dumps(body)}\n\n"


class Feed:
    """Each connection gets the events after its `Last-Event-ID`, two at a time, then the
    connection ends."""

    def __init__(self) -> None:
        self.seen_ids: list[str | None] = []
        self.status = 200


@pytest.fixture
def feed() -> Iterator[tuple[Feed, str]]:
    state = Feed()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            last = self.headers.get("Last-Event-ID")
            state.seen_ids.append(last)
            if state.status != 200:
                body = b'{"code": "insufficient_scope", "message": "no"}'
                self.send_response(state.status)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            after = int(last.split("-")[0]) if last else 0
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.end_headers()
            chunks = [f"retry: 1000\nid: {after}-0\n\n", ": heartbeat\n\n"]
            chunks += [_event(n) for n in (after + 1, after + 2)]
            self.wfile.write("".join(chunks).encode())

        def log_message(self, format: str, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


async def test_it_reconnects_after_the_last_event_it_received(feed: tuple[Feed, str]) -> None:
    state, url = feed
    client = EventsClient(url, reconnect_delay=0.01)
    got = []
    stream = client.events(types=["chat:turn:*"])
    async for event in stream:
        got.append(event)
        if len(got) == 5:
            break
    await stream.aclose()
    assert [e.data["n"] for e in got] == [1, 2, 3, 4, 5]
    assert [e.id for e in got] == ["1-0", "2-0", "3-0", "4-0", "5-0"]
    assert got[0].type == "chat:turn:started" and got[0].process == "shard:s"
    # The first connection had no cursor; each reconnect named the last event received.
    assert state.seen_ids[:3] == [None, "2-0", "4-0"]
    assert client.last_event_id == "5-0"


async def test_without_reconnect_the_iteration_ends_with_the_connection(
    feed: tuple[Feed, str],
) -> None:
    state, url = feed
    client = EventsClient(url)
    got = [e.data["n"] async for e in client.events(last_event_id="7-0", reconnect=False)]
    assert got == [8, 9] and state.seen_ids == ["7-0"]


async def test_a_refusal_is_an_error(feed: tuple[Feed, str]) -> None:
    state, url = feed
    state.status = 403
    with pytest.raises(ClientError) as refused:
        async for _ in EventsClient(url).events():
            pass
    assert refused.value.code == "http_error" and refused.value.status == 403


def test_the_feed_url() -> None:
    assert events_url("http://h:8080") == "http://h:8080/v1/events"
    assert events_url("wss://h/prefix/") == "https://h/prefix/v1/events"
    with pytest.raises(ValueError):
        events_url("ftp://h")
