"""Per-tenant quotas across a cluster of two gateways: connections and conversations refused at
the upgrade (429), chat requests refused with the reference's error and terminal frames, and
nothing stored for a refused request."""

from __future__ import annotations

import json
import math
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
import websockets

from durachat_infra.local.cluster import LocalCluster
from support.tenancy import ADMIN, Tenant, create_tenant
from support.waiting import eventually
from support.wsclient import Frame, WsClient, chat_request, user_message

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

AGENT = "chat-agent"


async def refused_upgrade(url: str, name: str, tenant: Tenant) -> websockets.InvalidStatus:
    with pytest.raises(websockets.InvalidStatus) as refused:
        await WsClient.connect(url, AGENT, name, headers=tenant.headers)
    return refused.value


def quota_of(refusal: websockets.InvalidStatus) -> str:
    assert refusal.response.status_code == 429
    assert int(refusal.response.headers["Retry-After"]) >= 1
    body = json.loads(refusal.response.body or b"{}")
    assert body["code"] == "quota_exceeded"
    return str(body["quota"])


async def send(socket: WsClient, text: str, **extra: Any) -> tuple[Frame, list[Frame]]:
    """Send one message; returns the request's terminal frame and every frame of it."""
    request = chat_request([user_message(text)], **extra)
    start = len(socket.frames)
    await socket.send(request)
    done = await socket.wait_done(request["id"], after=start)
    return done, [f for f in socket.frames[start:] if f.get("id") == request["id"]]


def refused_turn_quota(frames: list[Frame]) -> str:
    """The quota named by a refused turn's frames: an error frame, then the terminal one."""
    error, terminal = frames
    assert error["error"] is True and error["done"] is False
    assert terminal["done"] is True and terminal["outcome"] == "error"
    assert error["quota"] in error["body"]
    return str(error["quota"])


async def transcript(http: httpx.AsyncClient, tenant: Tenant, name: str) -> list[dict[str, Any]]:
    answer = await http.get(f"/agents/{AGENT}/{name}/get-messages", headers=tenant.headers)
    messages: list[dict[str, Any]] = answer.json()
    return messages


async def test_connections_are_limited_across_gateways(
    auth_cluster: LocalCluster, auth_http: httpx.AsyncClient
) -> None:
    tenant = await create_tenant(auth_http, quotas={"connections": 2}, known_at=auth_cluster.urls)
    first, second = auth_cluster.urls
    a = await WsClient.connect(first, AGENT, "c", headers=tenant.headers)
    b = await WsClient.connect(second, AGENT, "c", headers=tenant.headers)

    assert quota_of(await refused_upgrade(first, "c", tenant)) == "connections"
    assert quota_of(await refused_upgrade(second, "other", tenant)) == "connections"
    other = await create_tenant(auth_http, quotas={"connections": 1})
    await (await WsClient.connect(first, AGENT, "c", headers=other.headers)).close()
    usage = (await auth_http.get("/v1/usage", headers=tenant.headers)).json()
    assert usage["usage"]["connections"] == 2

    await a.close()

    async def reopened() -> WsClient | None:
        try:
            return await WsClient.connect(first, AGENT, "c", headers=tenant.headers)
        except websockets.InvalidStatus:
            return None

    third = await eventually(reopened, timeout=5.0)
    await third.close()
    await b.close()


async def test_turns_per_minute_refuse_with_error_and_terminal_frames(
    auth_cluster: LocalCluster, auth_http: httpx.AsyncClient
) -> None:
    tenant = await create_tenant(auth_http, quotas={"turns_per_minute": 2})
    socket = await WsClient.connect(auth_cluster.urls[0], AGENT, "c", headers=tenant.headers)
    for text in ("one", "two"):
        done, _ = await send(socket, text)
        assert "outcome" not in done
    stored = await transcript(auth_http, tenant, "c")

    done, frames = await send(socket, "three")

    assert refused_turn_quota(frames) == "turns_per_minute"
    assert frames[0]["retryAfter"] >= 1
    assert await transcript(auth_http, tenant, "c") == stored
    assert len(stored) == 4
    await socket.close()


async def test_concurrent_turns_free_up_when_turns_end(
    auth_cluster: LocalCluster, auth_http: httpx.AsyncClient
) -> None:
    tenant = await create_tenant(
        auth_http, quotas={"concurrent_turns": 1}, known_at=auth_cluster.urls
    )
    first, second = auth_cluster.urls
    a = await WsClient.connect(first, AGENT, "a", headers=tenant.headers)
    b = await WsClient.connect(second, AGENT, "b", headers=tenant.headers)
    slow = chat_request([user_message("slow please")])
    await a.send(slow)
    await a.wait_for(lambda f: f.get("id") == slow["id"] and bool(f.get("body")))

    _, frames = await send(b, "hello")
    assert refused_turn_quota(frames) == "concurrent_turns"

    await a.send({"type": "cf_agent_chat_request_cancel", "id": slow["id"]})
    await a.wait_done(slow["id"])

    async def admitted() -> bool:
        done, _ = await send(b, "hello again")
        return "outcome" not in done

    await eventually(admitted, timeout=10.0, interval=0.2)
    await a.close()
    await b.close()


async def test_a_turn_whose_requester_left_frees_its_place_once_it_ended(
    auth_cluster: LocalCluster, auth_http: httpx.AsyncClient
) -> None:
    tenant = await create_tenant(auth_http, quotas={"concurrent_turns": 1})
    url = auth_cluster.urls[0]
    leaving = await WsClient.connect(url, AGENT, "a", headers=tenant.headers)
    request = chat_request([user_message("hello")])
    await leaving.send(request)
    await leaving.close()
    stayer = await WsClient.connect(url, AGENT, "b", headers=tenant.headers)

    async def admitted() -> bool:
        done, _ = await send(stayer, "next")
        return "outcome" not in done

    # Whether this gateway saw the end of the first turn or not, its place is given back.
    await eventually(admitted, timeout=15.0, interval=0.3)
    await stayer.close()


async def test_message_size_and_count_quotas(
    auth_cluster: LocalCluster, auth_http: httpx.AsyncClient
) -> None:
    tenant = await create_tenant(
        auth_http, quotas={"max_message_bytes": 1000, "max_messages_per_request": 3}
    )
    socket = await WsClient.connect(auth_cluster.urls[0], AGENT, "c", headers=tenant.headers)

    _, frames = await send(socket, "x" * 2000)
    assert refused_turn_quota(frames) == "max_message_bytes"
    many = chat_request([user_message(f"m{i}") for i in range(4)])
    await socket.send(many)
    await socket.wait_done(many["id"])
    refused = [f for f in socket.frames if f.get("id") == many["id"]]
    assert refused_turn_quota(refused) == "max_messages_per_request"
    assert await transcript(auth_http, tenant, "c") == []
    done, _ = await send(socket, "fits")
    assert "outcome" not in done
    await socket.close()


async def test_conversations_are_limited_at_the_upgrade_and_for_forks(
    auth_cluster: LocalCluster, auth_http: httpx.AsyncClient
) -> None:
    tenant = await create_tenant(auth_http, quotas={"conversations": 1})
    url = auth_cluster.urls[0]
    socket = await WsClient.connect(url, AGENT, "first", headers=tenant.headers)
    await send(socket, "hello")
    await socket.close()

    assert quota_of(await refused_upgrade(url, "second", tenant)) == "conversations"
    again = await WsClient.connect(url, AGENT, "first", headers=tenant.headers)
    await again.close()
    fork = await auth_http.post(
        f"/agents/{AGENT}/first/branches/main/fork", json={"name": "copy"}, headers=tenant.headers
    )
    assert fork.status_code == 429
    assert fork.json() == {
        "code": "quota_exceeded",
        "quota": "conversations",
        "message": "quota exceeded: conversations",
    }
    assert int(fork.headers["Retry-After"]) >= 1
    raised = await auth_http.patch(
        f"/v1/admin/tenants/{tenant.id}", json={"quotas": {"conversations": 2}}, headers=ADMIN
    )
    assert raised.status_code == 200

    async def forked() -> bool:
        answer = await auth_http.post(
            f"/agents/{AGENT}/first/branches/main/fork",
            json={"name": "copy"},
            headers=tenant.headers,
        )
        return answer.status_code == 201

    await eventually(forked, timeout=5.0)


async def test_tokens_per_day_stop_new_turns(
    auth_cluster: LocalCluster, auth_http: httpx.AsyncClient
) -> None:
    tenant = await create_tenant(auth_http, quotas={"tokens_per_day": 100})
    socket = await WsClient.connect(auth_cluster.urls[0], AGENT, "c", headers=tenant.headers)

    done, _ = await send(socket, "word " * 100)
    assert "outcome" not in done
    _, frames = await send(socket, "more")

    assert refused_turn_quota(frames) == "tokens_per_day"
    assert frames[0]["retryAfter"] > 0
    usage = (await auth_http.get("/v1/usage", headers=tenant.headers)).json()["usage"]
    assert usage["tokens_today"] >= 100
    assert usage["conversations"] == 1
    await socket.close()


async def test_a_reply_counts_its_tokens(
    auth_cluster: LocalCluster, auth_http: httpx.AsyncClient
) -> None:
    tenant = await create_tenant(auth_http)
    socket = await WsClient.connect(auth_cluster.urls[0], AGENT, "c", headers=tenant.headers)
    request = chat_request([user_message("slow")])
    # The request counts a token per four characters of the frame as sent.
    asked = math.ceil(len(json.dumps(request)) / 4)
    await socket.send(request)
    await socket.wait_done(request["id"], timeout=30)

    async def used() -> int:
        usage = (await auth_http.get("/v1/usage", headers=tenant.headers)).json()["usage"]
        return int(usage["tokens_today"])

    # The slow reply streams 200 characters of text: 50 tokens.
    await eventually(lambda: _at_least(used, asked + 50), timeout=10.0)
    assert await used() <= asked + 60
    await socket.close()


async def _at_least(read: Callable[[], Awaitable[int]], value: int) -> bool:
    return await read() >= value


async def test_the_ai_sdk_transport_counts_turns_and_answers_429(
    auth_cluster: LocalCluster, auth_http: httpx.AsyncClient
) -> None:
    tenant = await create_tenant(auth_http, quotas={"turns_per_minute": 1})
    body = {"id": "sdk", "messages": [user_message("one")], "trigger": "submit-message"}
    async with auth_http.stream(
        "POST", f"/v1/agents/{AGENT}/chat", json=body, headers=tenant.headers
    ) as first:
        assert first.status_code == 200
        assert "[DONE]" in "".join([line async for line in first.aiter_lines()])
    stored = await transcript(auth_http, tenant, "sdk")

    body["messages"] = [*stored, user_message("two")]
    second = await auth_http.post(f"/v1/agents/{AGENT}/chat", json=body, headers=tenant.headers)

    assert second.status_code == 429
    assert int(second.headers["Retry-After"]) >= 1
    assert second.json()["code"] == "quota_exceeded"
    assert second.json()["quota"] == "turns_per_minute"
    assert await transcript(auth_http, tenant, "sdk") == stored
