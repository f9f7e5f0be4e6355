"""Webhooks with real processes (docs/observability.md#webhooks): a tenant registers a URL, the
jobs worker delivers the events it asked for to a real local HTTP server, signed; a receiver
that answers 500 is tried again with growing delays, and after the last try the delivery is in
the webhook's dead-letter list."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from durachat.webhooks import verify_delivery
from durachat_infra.local.cluster import LocalCluster
from support.cluster import running_cluster
from support.waiting import eventually
from support.webhook_receiver import Receiver, webhook_receiver
from support.wsclient import WsClient, chat_request, user_message

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

AGENT = "chat-agent"
ATTEMPTS = 3
RETRY_BASE = 0.3


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, redis_url: str) -> Iterator[LocalCluster]:
    env = {
        "DURACHAT_WEBHOOK_MAX_ATTEMPTS": str(ATTEMPTS),
        "DURACHAT_WEBHOOK_RETRY_BASE": str(RETRY_BASE),
    }
    with running_cluster(
        tmp_path_factory.mktemp("webhooks"), redis_url, gateways=1, shards=1, env=env
    ) as running:
        yield running


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with webhook_receiver() as running:
        yield running


@pytest.fixture
async def http(cluster: LocalCluster) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=cluster.urls[0], timeout=20) as client:
        yield client


async def _chat(base_url: str, name: str, text: str) -> str:
    client = await WsClient.connect(base_url, AGENT, name)
    try:
        request = chat_request([user_message(text)])
        await client.send(request)
        await client.wait_done(str(request["id"]), timeout=30)
        return str(request["id"])
    finally:
        await client.close()


async def _register(http: httpx.AsyncClient, url: str, types: list[str]) -> dict[str, str]:
    response = await http.post("/v1/webhooks", json={"url": url, "types": types})
    assert response.status_code == 201, response.text
    made: dict[str, str] = response.json()
    return made


async def test_deliveries_are_signed_and_carry_the_event(
    cluster: LocalCluster, http: httpx.AsyncClient, receiver: Receiver
) -> None:
    made = await _register(http, f"{receiver.url}/ok", ["chat:turn:finished"])
    secret = made["secret"]
    assert made["id"].startswith("wh_") and secret.startswith("whsec_")
    name = f"hook-{time.time_ns()}"

    async def delivered() -> bool:
        # Chatted until the worker knows the new webhook (it reads them every 2 s).
        await _chat(cluster.urls[0], name, "hello webhook")
        return bool(receiver.to("/ok"))

    await eventually(delivered, timeout=30, interval=0.5)
    delivery = receiver.to("/ok")[0]
    assert delivery.headers["content-type"] == "application/json"
    assert verify_delivery(
        secret,
        timestamp=delivery.headers.get("durachat-timestamp"),
        signature=delivery.headers.get("durachat-signature"),
        body=delivery.body,
    )
    assert not verify_delivery(
        "another-secret",
        timestamp=delivery.headers.get("durachat-timestamp"),
        signature=delivery.headers.get("durachat-signature"),
        body=delivery.body,
    )
    assert delivery.headers["durachat-webhook-id"] == made["id"]
    event = json.loads(delivery.body)
    assert (event["type"], event["tenant"], event["agent"], event["name"]) == (
        "chat:turn:finished",
        "default",
        AGENT,
        name,
    )
    assert event["data"]["outcome"] == "completed" and event["id"]
    # Only the types asked for.
    for other in receiver.to("/ok"):
        assert json.loads(other.body)["type"] == "chat:turn:finished"
    assert (await http.delete(f"/v1/webhooks/{made['id']}")).status_code == 200


async def test_failed_deliveries_are_retried_then_dead_lettered(
    cluster: LocalCluster, http: httpx.AsyncClient, receiver: Receiver
) -> None:
    receiver.statuses["/fail"] = 500
    made = await _register(http, f"{receiver.url}/fail", ["chat:turn:started"])
    name = f"fail-{time.time_ns()}"

    async def tried() -> bool:
        if not receiver.to("/fail"):
            await _chat(cluster.urls[0], name, "hello failing receiver")
        return bool(receiver.to("/fail"))

    await eventually(tried, timeout=30, interval=0.5)
    first = json.loads(receiver.to("/fail")[0].body)

    async def dead() -> list[dict[str, object]]:
        response = await http.get(f"/v1/webhooks/{made['id']}/dead-letters")
        assert response.status_code == 200
        letters: list[dict[str, object]] = response.json()["dead_letters"]
        return [d for d in letters if d["event"]["id"] == first["id"]]  # type: ignore[index]

    letters = await eventually(dead, timeout=30)
    assert letters[0]["attempts"] == ATTEMPTS and letters[0]["status"] == 500
    tries = [d for d in receiver.to("/fail") if json.loads(d.body)["id"] == first["id"]]
    assert [d.headers["durachat-delivery-attempt"] for d in tries] == ["1", "2", "3"]
    # Exponential backoff: each wait about twice the one before (arq polls every 0.1 s).
    waits = [b.at - a.at for a, b in itertools.pairwise(tries)]
    assert waits[0] >= RETRY_BASE * 0.9 and waits[1] >= 2 * RETRY_BASE * 0.9, waits
    assert (await http.delete(f"/v1/webhooks/{made['id']}")).status_code == 200
    gone = await http.get(f"/v1/webhooks/{made['id']}/dead-letters")
    assert gone.status_code == 404


async def test_the_webhook_api(http: httpx.AsyncClient) -> None:
    for url in ("ftp://example.com/x", "file:///etc/passwd", "gopher://x", "not a url"):
        response = await http.post("/v1/webhooks", json={"url": url})
        assert response.status_code == 422, url
        assert response.json()["code"] == "invalid_url"
    assert (await http.post("/v1/webhooks", json={"url": "https://u:p@example.com"})).json()[
        "code"
    ] == "invalid_url"
    made = (await http.post("/v1/webhooks", json={"url": "https://example.com/in"})).json()
    shown = (await http.get(f"/v1/webhooks/{made['id']}")).json()
    assert shown == {k: made[k] for k in ("id", "url", "types", "created_at")}
    assert "secret" not in shown
    listed = (await http.get("/v1/webhooks")).json()["webhooks"]
    assert made["id"] in {w["id"] for w in listed}
    assert (await http.delete(f"/v1/webhooks/{made['id']}")).json() == {
        "id": made["id"],
        "deleted": True,
    }
    missing = await http.delete(f"/v1/webhooks/{made['id']}")
    assert (missing.status_code, missing.json()["code"]) == (404, "unknown_webhook")
