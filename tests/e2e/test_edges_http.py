"""The HTTP and WebSocket edges of a gateway (docs/security.md#bad-input): oversized request
heads answered 431 at once, names checked, oversized bodies refused, origins allowed per
deployment and per tenant, and connection ids made by the server."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import websockets

from durachat_infra.local.cluster import LocalCluster
from support.cluster import running_cluster
from support.tenancy import ADMIN, create_tenant
from support.wsclient import WsClient, chat_request, user_message

AGENT = "chat-agent"
GOOD_ORIGIN = "https://app.example.com"


@pytest.fixture(scope="module")
def edge_cluster(
    tmp_path_factory: pytest.TempPathFactory, redis_url: str
) -> Iterator[LocalCluster]:
    """One gateway and one shard, with an origin list and a small head bound."""
    env = {
        "DURACHAT_ALLOWED_ORIGINS": f"{GOOD_ORIGIN}, https://other.example.com",
        "DURACHAT_MAX_HEADER_BYTES": "16384",
        "DURACHAT_MAX_BODY_BYTES": "100000",
    }
    tmp: Path = tmp_path_factory.mktemp("edges")
    with running_cluster(tmp, redis_url, gateways=1, shards=1, env=env) as cluster:
        yield cluster


async def _raw(url: str, chunks: list[bytes], *, pause: float = 0.0) -> tuple[bytes, float]:
    """Send `chunks` on a fresh TCP connection and read the answer; returns it and how long
    it took to come after the first chunk."""
    parts = urlsplit(url)
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    started = time.monotonic()
    answer = b""
    try:
        for chunk in chunks:
            try:
                writer.write(chunk)
                await writer.drain()
            except (ConnectionError, RuntimeError):
                break
            if pause:
                await asyncio.sleep(pause)
            if reader.at_eof():
                break
        async with asyncio.timeout(5):
            answer = await reader.read(4096)
    finally:
        writer.close()
    return answer, time.monotonic() - started


async def test_an_oversized_request_head_is_answered_431_at_once(
    edge_cluster: LocalCluster,
) -> None:
    url = edge_cluster.urls[0]
    # One long header, sent in 1 kB pieces that never end the head: no hang, 431.
    head = [b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: "] + [b"a" * 1024] * 64
    answer, took = await _raw(url, head, pause=0.001)
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]
    assert b'"headers_too_large"' in answer
    assert took < 2.0, took
    # Many headers at once, and a long request line.
    many = b"".join(b"X-H%d: %s\r\n" % (i, b"v" * 100) for i in range(300))
    answer, _ = await _raw(url, [b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + many + b"\r\n"])
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]
    answer, _ = await _raw(url, [b"GET /healthz?" + b"q" * 20_000 + b" HTTP/1.1\r\n\r\n"])
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]
    # A head within the bound is served, and so is a body larger than the head bound.
    async with httpx.AsyncClient(base_url=url) as http:
        assert (await http.get("/healthz", headers={"X-Ok": "v" * 8000})).status_code == 200
        posted = await http.post(f"/agents/{AGENT}/n/get-messages", content=b"x" * 50_000)
        assert posted.status_code == 200


@pytest.mark.parametrize(
    "name",
    ["%FF%FE", "bad%01name", "tab%09", "del%7F", "x" * 513],
    ids=["not-utf8", "control", "tab", "delete", "too-long"],
)
async def test_a_bad_name_is_refused_with_400(edge_cluster: LocalCluster, name: str) -> None:
    url = edge_cluster.urls[0]
    async with httpx.AsyncClient(base_url=url) as http:
        for path in (
            f"/agents/{AGENT}/{name}/get-messages",
            f"/agents/{AGENT}/{name}/branches",
            f"/agents/{name}/x/get-messages",
        ):
            answer = await http.get(path)
            assert answer.status_code == 400, (path, answer.text)
            assert answer.json()["code"] == "invalid_name", answer.text
        chat = await http.post(
            f"/v1/agents/{AGENT}/chat",
            json={"id": "bad\u0001name", "messages": [user_message("hi")]},
        )
        assert (chat.status_code, chat.json()["code"]) == (400, "invalid_name"), chat.text
    ws_url = url.replace("http", "ws", 1) + f"/agents/{AGENT}/{name}"
    with pytest.raises(websockets.InvalidStatus) as refused:
        await websockets.connect(ws_url)
    assert refused.value.response.status_code == 400


async def test_a_name_of_512_characters_and_any_script_is_served(
    edge_cluster: LocalCluster,
) -> None:
    url = edge_cluster.urls[0]
    name = "名前-" + "n" * 509
    client = await WsClient.connect(url, AGENT, name)
    try:
        request = chat_request([user_message("sure")])
        await client.send(request)
        await client.wait_done(request["id"])
    finally:
        await client.close()


async def test_an_oversized_body_gets_413(edge_cluster: LocalCluster) -> None:
    async with httpx.AsyncClient(base_url=edge_cluster.urls[0]) as http:
        big = {"id": "n", "messages": [user_message("x" * 200_000)]}
        answer = await http.post(f"/v1/agents/{AGENT}/chat", json=big)
        assert (answer.status_code, answer.json()["code"]) == (413, "body_too_large")

        async def chunks() -> Any:
            for _ in range(30):
                yield b"y" * 10_000

        streamed = await http.post(f"/v1/agents/{AGENT}/chat", content=chunks())
        assert (streamed.status_code, streamed.json()["code"]) == (413, "body_too_large")


async def _upgrade(url: str, name: str, **kwargs: Any) -> int:
    try:
        socket = await WsClient.connect(url, AGENT, name, **kwargs)
    except websockets.InvalidStatus as refused:
        return refused.response.status_code
    await socket.close()
    return 101


async def test_only_allowed_origins_open_sockets(edge_cluster: LocalCluster) -> None:
    url = edge_cluster.urls[0]
    name = f"o-{uuid.uuid4().hex[:8]}"
    assert await _upgrade(url, name, headers={"Origin": GOOD_ORIGIN}) == 101
    assert await _upgrade(url, name, headers={"Origin": GOOD_ORIGIN.upper() + "/"}) == 101
    assert await _upgrade(url, name, headers={"Origin": "https://evil.example.com"}) == 403
    assert await _upgrade(url, name, headers={"Origin": "null"}) == 403
    # No Origin header: not a browser.
    assert await _upgrade(url, name) == 101


async def test_a_tenant_sets_its_own_origins(
    auth_cluster: LocalCluster, auth_http: httpx.AsyncClient
) -> None:
    url = auth_cluster.urls[0]
    tenant = await create_tenant(auth_http, known_at=auth_cluster.urls)
    name = f"o-{uuid.uuid4().hex[:8]}"
    credential = {"headers": {**tenant.headers, "Origin": "https://shop.example.com"}}
    # Without a list, any origin.
    assert await _upgrade(url, name, **credential) == 101
    changed = await auth_http.patch(
        f"/v1/admin/tenants/{tenant.id}",
        json={"settings": {"allowed_origins": ["https://app.example.com"]}},
        headers=ADMIN,
    )
    assert changed.status_code == 200, changed.text

    async def refused() -> bool:
        return await _upgrade(url, name, **credential) == 403

    deadline = time.monotonic() + 5
    while not await refused():
        assert time.monotonic() < deadline, "the tenant's origins never applied"
        await asyncio.sleep(0.1)
    allowed = {"headers": {**tenant.headers, "Origin": "https://app.example.com"}}
    assert await _upgrade(url, name, **allowed) == 101
    assert await _upgrade(url, name, headers=tenant.headers) == 101
    bad = await auth_http.patch(
        f"/v1/admin/tenants/{tenant.id}",
        json={"settings": {"allowed_origins": 5}},
        headers=ADMIN,
    )
    assert (bad.status_code, bad.json()["code"]) == (422, "invalid_settings"), bad.text


async def test_a_reused_pk_does_not_receive_the_other_sockets_frames(
    edge_cluster: LocalCluster,
) -> None:
    url = edge_cluster.urls[0]
    name = f"pk-{uuid.uuid4().hex[:8]}"
    pk = "shared-pk"
    first = await WsClient.connect(url, AGENT, name, pk=pk)
    intruder = await WsClient.connect(url, AGENT, name, pk=pk)
    try:
        # A refusal addressed to the first socket (by the shard, through the log).
        bad = chat_request([{"id": "u1", "role": "user", "parts": [{"type": "nope"}]}])
        await first.send(bad)
        await first.wait_done(bad["id"])
        # The first socket's own request: the intruder is another connection, so it gets
        # the broadcast of the incoming transcript, which the sender does not.
        request = chat_request([user_message("sure")])
        await first.send(request)
        await first.wait_done(request["id"])
        await intruder.wait_done(request["id"])
        assert not [f for f in intruder.frames if f.get("id") == bad["id"]], intruder.frames
        assert not intruder.of_type("durachat_error"), intruder.frames
        assert intruder.of_type("cf_agent_chat_messages"), intruder.frames
        sent = [m["id"] for m in json.loads(request["init"]["body"])["messages"]]
        echoes = [
            f for f in first.of_type("cf_agent_chat_messages") if f["messages"][-1]["id"] in sent
        ]
        assert not echoes, first.frames
    finally:
        await first.close()
        await intruder.close()
