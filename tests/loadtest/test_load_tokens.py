"""Client tokens minted with a tenant API key (`POST /v1/tokens`), against a real HTTP server
that implements the contract."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from durachat.loadtest.auth import TokenError, TokenSource

API_KEY = "dk_test_123"


class TokenServer(ThreadingHTTPServer):
    requests: list[dict[str, Any]]


class Handler(BaseHTTPRequestHandler):
    server: TokenServer

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append(
            {"path": self.path, "auth": self.headers["Authorization"], **body}
        )
        if self.headers["Authorization"] != f"Bearer {API_KEY}":
            self.send_response(401)
            self.end_headers()
            return
        answer = json.dumps({"token": f"tok-{body['agent']}-{body['name']}"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[TokenServer]:
    httpd = TokenServer(("127.0.0.1", 0), Handler)
    httpd.requests = []
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()
    thread.join(timeout=5)


def base(server: TokenServer) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}/prefix"


def test_a_token_per_conversation_is_minted_once_and_reused(server: TokenServer) -> None:
    tokens = TokenSource(base(server), API_KEY, ttl_s=600)
    assert tokens.enabled
    assert tokens.token("chat-agent", "c1") == "tok-chat-agent-c1"
    assert tokens.token("chat-agent", "c1") == "tok-chat-agent-c1"
    assert tokens.token("chat-agent", "c2") == "tok-chat-agent-c2"
    assert server.requests == [
        {"path": "/prefix/v1/tokens", "auth": f"Bearer {API_KEY}", "agent": "chat-agent",
         "name": name, "ttl_s": 600}
        for name in ("c1", "c2")
    ]  # fmt: skip


def test_a_refused_key_is_a_token_error_with_the_status(server: TokenServer) -> None:
    with pytest.raises(TokenError) as raised:
        TokenSource(base(server), "wrong").token("chat-agent", "c1")
    assert raised.value.code == "token_401"


def test_without_an_api_key_no_token_is_asked_for(server: TokenServer) -> None:
    tokens = TokenSource(base(server), None)
    assert not tokens.enabled and tokens.token("chat-agent", "c1") is None
    assert server.requests == []
