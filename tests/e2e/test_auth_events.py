"""The event feed of a cluster that requires credentials: a tenant's API key sees its tenant's
events and never another's, a client token with the `events` scope only the conversations it
covers, the admin key every tenant (or one with `?tenant=`); the feed refuses the rest."""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx
import pytest
import websockets

from durachat.observability.feed import FeedEvent
from durachat_infra.local.cluster import LocalCluster
from support.feed import Collector
from support.tenancy import ADMIN, Tenant, bearer, create_tenant, mint
from support.wsclient import WsClient, chat_request, user_message

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

AGENT = "chat-agent"


async def _chat(base_url: str, tenant: Tenant, name: str, text: str) -> str:
    client = await WsClient.connect(base_url, AGENT, name, headers=tenant.headers)
    try:
        request = chat_request([user_message(text)])
        await client.send(request)
        done = await client.wait_done(str(request["id"]), timeout=30)
        assert "outcome" not in done, done
        return str(request["id"])
    finally:
        await client.close()


def _finished(*request_ids: str) -> Callable[[list[FeedEvent]], bool]:
    def found(events: list[FeedEvent]) -> bool:
        done = {e.data.get("requestId") for e in events if e.type == "chat:turn:finished"}
        return set(request_ids) <= done

    return found


async def test_a_tenant_never_sees_another_tenants_events(
    auth_cluster: LocalCluster, auth_http: httpx.AsyncClient
) -> None:
    urls = auth_cluster.urls
    a = await create_tenant(auth_http, known_at=urls)
    b = await create_tenant(auth_http, known_at=urls)
    name = f"shared-{time.time_ns()}"
    types = ["chat:turn:*", "chat:connection:*"]
    feed_a = await Collector.start(urls[0], headers=a.headers, types=types)
    feed_b = await Collector.start(urls[1], headers=b.headers, types=types)
    admin_all = await Collector.start(urls[0], headers=ADMIN, types=types, name=name)
    admin_a = await Collector.start(urls[1], headers=ADMIN, types=types, tenant=a.id)
    try:
        # The same conversation name in both tenants: two conversations.
        ra = await _chat(urls[0], a, name, "from a")
        rb = await _chat(urls[1], b, name, "from b")
        await feed_a.wait_for(_finished(ra))
        await feed_b.wait_for(_finished(rb))
        await admin_all.wait_for(_finished(ra, rb))
        await admin_a.wait_for(_finished(ra))
        assert {e.tenant for e in feed_a.events} == {a.id}
        assert {e.tenant for e in feed_b.events} == {b.id}
        assert rb not in {e.data.get("requestId") for e in feed_a.events}
        assert ra not in {e.data.get("requestId") for e in feed_b.events}
        assert {e.tenant for e in admin_all.events} == {a.id, b.id}
        assert {e.tenant for e in admin_a.events} == {a.id}
    finally:
        for feed in (feed_a, feed_b, admin_all, admin_a):
            await feed.stop()


async def test_a_token_sees_only_the_conversations_it_covers(
    auth_cluster: LocalCluster, auth_http: httpx.AsyncClient
) -> None:
    urls = auth_cluster.urls
    tenant = await create_tenant(auth_http, known_at=urls)
    mine, other = f"mine-{time.time_ns()}", f"other-{time.time_ns()}"
    token = await mint(auth_http, tenant, AGENT, mine, scopes=["events"])
    feed = await Collector.start(urls[0], headers=bearer(token), types=["chat:turn:finished"])
    try:
        r_other = await _chat(urls[1], tenant, other, "not covered")
        r_mine = await _chat(urls[1], tenant, mine, "covered")
        await feed.wait_for(_finished(r_mine))
        assert {e.name for e in feed.events} == {mine}
        assert r_other not in {e.data.get("requestId") for e in feed.events}
    finally:
        await feed.stop()

    # A token in the URL works for the WebSocket feed, as for a browser.
    url = urls[0].replace("http", "ws", 1) + f"/v1/events/ws?token={token}&types=chat:turn:*"
    async with websockets.connect(url):
        pass


async def test_quota_refusals_reach_the_feed(
    auth_cluster: LocalCluster, auth_http: httpx.AsyncClient
) -> None:
    urls = auth_cluster.urls
    tenant = await create_tenant(auth_http, quotas={"max_messages_per_request": 1}, known_at=urls)
    name = f"quota-{time.time_ns()}"
    feed = await Collector.start(urls[0], headers=tenant.headers, types=["chat:quota:*"])
    client = await WsClient.connect(urls[1], AGENT, name, headers=tenant.headers)
    try:
        request = chat_request([user_message("one"), user_message("two")])
        await client.send(request)
        await client.wait_done(str(request["id"]), timeout=20)

        def refused(events: list[FeedEvent]) -> bool:
            return bool(events)

        events = await feed.wait_for(refused)
        assert events[0].type == "chat:quota:refused"
        assert events[0].data["quota"] == "max_messages_per_request"
        assert events[0].data["refused"] == "request"
        assert events[0].data["requestId"] == request["id"]
        assert (events[0].tenant, events[0].name) == (tenant.id, name)
    finally:
        await client.close()
        await feed.stop()


async def test_the_feed_refuses_what_a_credential_may_not_see(
    auth_cluster: LocalCluster, auth_http: httpx.AsyncClient
) -> None:
    urls = auth_cluster.urls
    tenant = await create_tenant(auth_http, known_at=urls)
    name = f"c-{time.time_ns()}"
    chat_only = await mint(auth_http, tenant, AGENT, name, scopes=["chat", "read"])
    events = await mint(auth_http, tenant, AGENT, name, scopes=["events"])
    cases = [
        ({}, {}, 401, "missing_credentials"),
        (bearer(chat_only), {}, 403, "insufficient_scope"),
        (bearer(events), {"name": "another"}, 404, "not_found"),
        (bearer(events), {"agent": "another-agent"}, 404, "not_found"),
    ]
    for headers, params, status, code in cases:
        response = await auth_http.get("/v1/events", headers=headers, params=params)
        assert (response.status_code, response.json()["code"]) == (status, code), params
    # An API key in the URL is refused, as everywhere.
    response = await auth_http.get("/v1/events", params={"token": tenant.key})
    assert response.status_code == 401 and response.json()["code"] == "credential_in_url"
    with pytest.raises(websockets.InvalidStatus) as refused:
        url = urls[0].replace("http", "ws", 1) + f"/v1/events/ws?token={chat_only}"
        async with websockets.connect(url):
            pass
    assert refused.value.response.status_code == 403


async def test_webhooks_need_the_tenants_api_key(
    auth_cluster: LocalCluster, auth_http: httpx.AsyncClient
) -> None:
    urls = auth_cluster.urls
    a = await create_tenant(auth_http, known_at=urls)
    b = await create_tenant(auth_http, known_at=urls)
    token = await mint(auth_http, a, AGENT, "c1")
    body = {"url": "https://example.com/hook", "types": ["chat:turn:*"]}
    for headers, code in ((bearer(token), "api_key_required"), (ADMIN, "api_key_required")):
        response = await auth_http.post("/v1/webhooks", json=body, headers=headers)
        assert (response.status_code, response.json()["code"]) == (403, code)
    assert (await auth_http.get("/v1/webhooks")).status_code == 401
    made = await auth_http.post("/v1/webhooks", json=body, headers=a.headers)
    assert made.status_code == 201
    hook = made.json()["id"]
    # Another tenant's key finds nothing of it.
    for method, path in (
        ("GET", f"/v1/webhooks/{hook}"),
        ("DELETE", f"/v1/webhooks/{hook}"),
        ("GET", f"/v1/webhooks/{hook}/dead-letters"),
    ):
        response = await auth_http.request(method, path, headers=b.headers)
        assert (response.status_code, response.json()["code"]) == (404, "unknown_webhook")
    assert (await auth_http.get("/v1/webhooks", headers=b.headers)).json() == {"webhooks": []}
    assert (await auth_http.get(f"/v1/webhooks/{hook}", headers=a.headers)).status_code == 200
