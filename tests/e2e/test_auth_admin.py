"""The admin API and `durachat admin` against a cluster that requires credentials: tenants and
keys, deleting a tenant with all its data, revocation on every gateway within a second, the
cluster routes, and a shard's internal API refusing unsigned calls."""

from __future__ import annotations

import asyncio
import json
import os
import time

import httpx
import pytest
import websockets
from redis.asyncio import Redis

from durachat_infra.keys import ConversationKeys, conversation_tag
from durachat_infra.local.cluster import LocalCluster
from support.cli import run_cli
from support.tenancy import ADMIN, ADMIN_KEY, bearer, create_tenant, tenant_id
from support.waiting import eventually
from support.wsclient import WsClient, chat_request, user_message

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

AGENT = "chat-agent"


async def test_admin_and_cluster_routes_need_the_admin_key(auth_http: httpx.AsyncClient) -> None:
    tenant = await create_tenant(auth_http)
    routes = ["/v1/admin/tenants", "/v1/cluster", "/v1/cluster/owner?agent=a&name=b", "/metrics"]

    for route in routes:
        missing = await auth_http.get(route)
        assert missing.status_code == 401, route
        assert missing.json()["code"] == "missing_credentials"
        assert missing.headers["www-authenticate"] == "Bearer"
        wrong = await auth_http.get(route, headers=bearer("not-the-key"))
        assert wrong.status_code == 401, route
        as_tenant = await auth_http.get(route, headers=tenant.headers)
        assert as_tenant.status_code == 403, route
        assert as_tenant.json()["code"] == "admin_key_required"
        assert (await auth_http.get(route, headers=ADMIN)).status_code == 200, route
    assert (await auth_http.get("/healthz")).status_code == 200


async def test_a_tenants_life(auth_http: httpx.AsyncClient) -> None:
    name = tenant_id("life")
    created = await auth_http.post(
        "/v1/admin/tenants", json={"id": name, "quotas": {"connections": 7}}, headers=ADMIN
    )
    assert created.status_code == 201
    body = created.json()
    assert body["id"] == name and body["api_key"].startswith("dck_")
    assert body["quotas"]["connections"] == 7 and body["overrides"] == {"connections": 7}
    assert set(body["quotas"]) == {
        "connections",
        "concurrent_turns",
        "turns_per_minute",
        "conversations",
        "tokens_per_day",
        "max_message_bytes",
        "max_messages_per_request",
    }

    again = await auth_http.post("/v1/admin/tenants", json={"id": name}, headers=ADMIN)
    assert (again.status_code, again.json()["code"]) == (409, "tenant_exists")
    for bad in ["Acme", "a_b", "-a", "x" * 64, "", "a b"]:
        refused = await auth_http.post("/v1/admin/tenants", json={"id": bad}, headers=ADMIN)
        assert refused.status_code == 422, bad
    unknown_quota = await auth_http.post(
        "/v1/admin/tenants", json={"id": tenant_id(), "quotas": {"cpu": 1}}, headers=ADMIN
    )
    assert unknown_quota.status_code == 422

    listed = (await auth_http.get("/v1/admin/tenants", headers=ADMIN)).json()["tenants"]
    assert name in [t["id"] for t in listed] and "default" in [t["id"] for t in listed]

    patched = await auth_http.patch(
        f"/v1/admin/tenants/{name}",
        json={"quotas": {"connections": None, "turns_per_minute": 5}, "settings": {"plan": "pro"}},
        headers=ADMIN,
    )
    assert patched.status_code == 200
    assert patched.json()["overrides"] == {"turns_per_minute": 5}
    assert patched.json()["settings"] == {"plan": "pro"}

    shown = await auth_http.get(f"/v1/admin/tenants/{name}", headers=ADMIN)
    assert shown.status_code == 200
    text = shown.text
    assert body["api_key"].split("_", 2)[2] not in text
    assert [k["key_id"] for k in shown.json()["api_keys"]] == [body["key_id"]]
    assert shown.json()["usage"]["conversations"] == 0
    usage = await auth_http.get(f"/v1/admin/tenants/{name}/usage", headers=ADMIN)
    assert usage.json()["quotas"]["turns_per_minute"] == 5

    assert (await auth_http.get("/v1/admin/tenants/nobody", headers=ADMIN)).status_code == 404
    protected = await auth_http.delete("/v1/admin/tenants/default", headers=ADMIN)
    assert (protected.status_code, protected.json()["code"]) == (409, "protected_tenant")
    deleted = await auth_http.delete(f"/v1/admin/tenants/{name}", headers=ADMIN)
    assert deleted.status_code == 200
    assert (await auth_http.delete(f"/v1/admin/tenants/{name}", headers=ADMIN)).status_code == 404


async def test_deleting_a_tenant_removes_its_conversations_and_event_logs(
    auth_cluster: LocalCluster, auth_http: httpx.AsyncClient, redis: Redis
) -> None:
    tenant = await create_tenant(auth_http)
    other = await create_tenant(auth_http)
    names = ["one", "two"]
    for who, name in [(tenant, "one"), (tenant, "two"), (other, "one")]:
        ws = await WsClient.connect(auth_cluster.urls[0], AGENT, name, headers=who.headers)
        request = chat_request([user_message("hello")])
        await ws.send(request)
        await ws.wait_done(request["id"])
        await ws.close()
    prefix = auth_cluster.env["DURACHAT_KEY_PREFIX"]
    logs = [
        ConversationKeys(prefix, conversation_tag(tenant.id, AGENT, name)).log for name in names
    ]
    assert await redis.exists(*logs) == 2

    deleted = await auth_http.delete(f"/v1/admin/tenants/{tenant.id}", headers=ADMIN)

    assert deleted.status_code == 200
    assert deleted.json()["deleted"] == {
        "conversations": 2,
        "messages": 4,
        "branches": 2,
        "turns": 2,
        "api_keys": 1,
        "event_logs": 2,
    }
    assert await redis.exists(*logs) == 0
    gone = await auth_http.get(f"/agents/{AGENT}/one/get-messages", headers=tenant.headers)
    assert gone.status_code == 401
    kept = await auth_http.get(f"/agents/{AGENT}/one/get-messages", headers=other.headers)
    assert [m["role"] for m in kept.json()] == ["user", "assistant"]
    again = await create_tenant(auth_http, tenant.id)
    empty = await auth_http.get(f"/agents/{AGENT}/one/get-messages", headers=again.headers)
    assert empty.json() == []


async def test_a_revoked_key_stops_working_on_every_gateway_within_a_second(
    auth_cluster: LocalCluster, auth_http: httpx.AsyncClient
) -> None:
    tenant = await create_tenant(auth_http)
    added = await auth_http.post(
        f"/v1/admin/tenants/{tenant.id}/keys", json={"label": "rotation"}, headers=ADMIN
    )
    assert added.status_code == 201
    second = added.json()
    other_gateway = auth_cluster.urls[1]
    path = f"/agents/{AGENT}/c/get-messages"
    async with httpx.AsyncClient(base_url=other_gateway, timeout=10) as far:

        async def accepted() -> bool:
            answer = await far.get(path, headers=bearer(second["api_key"]))
            return answer.status_code == 200

        # A new key reaches the other gateway within its refresh interval too.
        await eventually(accepted, timeout=2.0)
        socket = await WsClient.connect(
            other_gateway, AGENT, "c", headers=bearer(second["api_key"])
        )
        await socket.wait_for(lambda f: f.get("type") == "cf_agent_identity")

        revoked = await auth_http.delete(
            f"/v1/admin/tenants/{tenant.id}/keys/{second['key_id']}", headers=ADMIN
        )
        assert revoked.status_code == 200
        started = time.monotonic()
        while (await far.get(path, headers=bearer(second["api_key"]))).status_code != 401:
            assert time.monotonic() - started < 1.0, "the revoked key still works"
            await asyncio.sleep(0.02)
        async with asyncio.timeout(2):
            await socket.closed.wait()
        assert socket.ws.close_code == 1008
        # The tenant's first key is untouched.
        assert (await far.get(path, headers=tenant.headers)).status_code == 200
    unknown = await auth_http.delete(
        f"/v1/admin/tenants/{tenant.id}/keys/{second['key_id']}x", headers=ADMIN
    )
    assert unknown.status_code == 404


async def test_a_shards_internal_api_refuses_unsigned_calls(auth_http: httpx.AsyncClient) -> None:
    shards = (await auth_http.get("/v1/cluster", headers=ADMIN)).json()["shards"]
    forged = {
        "tenant": "default",
        "agent": AGENT,
        "name": "forged",
        "connection": "x",
        "frame": chat_request([user_message("hi")]),
    }
    async with httpx.AsyncClient(timeout=10) as direct:
        for shard in shards:
            base = f"http://{shard['address']}"
            for path, body in [
                ("/internal/v1/frames", forged),
                ("/internal/v1/recover", {"tenant": "default", "agent": AGENT, "name": "x"}),
                ("/internal/v1/branches", {**forged, "op": "delete", "branch": "main"}),
            ]:
                answer = await direct.post(base + path, json=body)
                assert answer.status_code == 401, (shard["id"], path)
                assert answer.json()["code"] == "unauthorized"
            signed_wrong = await direct.post(
                base + "/internal/v1/frames",
                json=forged,
                headers={
                    "x-durachat-timestamp": str(time.time()),
                    "x-durachat-signature": "0" * 64,
                },
            )
            assert signed_wrong.status_code == 401
            assert (await direct.get(base + "/internal/v1/health")).status_code == 200
    default = await auth_http.get(f"/agents/{AGENT}/forged/get-messages", headers=ADMIN)
    assert default.status_code == 403


async def test_durachat_admin_commands(auth_cluster: LocalCluster) -> None:
    url = auth_cluster.urls[0]
    name = tenant_id("cli")
    os.environ["DURACHAT_ADMIN_KEY"] = ADMIN_KEY
    try:
        code, out, err = await run_cli(
            "admin", "tenants", "create", name, "--quota", "connections=5", "--url", url
        )
        assert code == 0, err
        created = json.loads(out)
        assert created["quotas"]["connections"] == 5 and created["api_key"].startswith("dck_")

        code, out, _ = await run_cli("admin", "keys", "create", name, "--label", "ci", "--url", url)
        key = json.loads(out)
        assert code == 0 and key["label"] == "ci"
        code, out, _ = await run_cli("admin", "keys", "revoke", name, key["key_id"], "--url", url)
        assert code == 0 and json.loads(out)["revoked_at"]

        code, out, _ = await run_cli(
            "admin",
            "tenants",
            "update",
            name,
            "--quota",
            "connections=default",
            "--setting",
            "plan=pro",
            "--url",
            url,
        )
        assert code == 0 and json.loads(out)["overrides"] == {}
        code, out, _ = await run_cli("admin", "tenants", "show", name, "--url", url)
        shown = json.loads(out)
        assert shown["settings"] == {"plan": "pro"} and len(shown["api_keys"]) == 2
        code, out, _ = await run_cli("admin", "tenants", "list", "--url", url)
        assert name in [t["id"] for t in json.loads(out)["tenants"]]
        code, _, err = await run_cli("admin", "tenants", "delete", name, "--url", url)
        assert code == 1 and "--yes" in err
        code, out, _ = await run_cli("admin", "tenants", "delete", name, "--yes", "--url", url)
        assert code == 0 and json.loads(out)["deleted"]["conversations"] == 0
        code, _, err = await run_cli("admin", "tenants", "show", name, "--url", url)
        assert code == 1 and "unknown_tenant" in err
        code, _, err = await run_cli(
            "admin", "tenants", "list", "--url", url, "--admin-key", "wrong"
        )
        assert code == 1 and "401" in err
    finally:
        del os.environ["DURACHAT_ADMIN_KEY"]


async def test_websocket_upgrade_is_refused_before_any_frame(auth_cluster: LocalCluster) -> None:
    url = auth_cluster.urls[0].replace("http", "ws", 1) + f"/agents/{AGENT}/c"
    with pytest.raises(websockets.InvalidStatus) as refused:
        await websockets.connect(url)
    assert refused.value.response.status_code == 401
    assert json.loads(refused.value.response.body or b"{}")["code"] == "missing_credentials"
