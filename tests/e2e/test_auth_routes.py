"""Every public route of a cluster that requires credentials: refused without a valid one
(401, a WebSocket before any frame), a token outside its conversation or scopes (404 as if the
conversation did not exist, 403), and tenant A's credential against tenant B's data (the same
names, B's branch and message ids) finds nothing."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import websockets

from durachat_infra.local.cluster import LocalCluster
from support.tenancy import ADMIN, Tenant, bearer, create_tenant, mint
from support.waiting import eventually
from support.wsclient import WsClient, chat_request, user_message

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

AGENT = "chat-agent"
NAME = "shared"


def http_routes(agent: str, name: str) -> list[tuple[str, str, dict[str, Any] | None]]:
    """`(method, path, json body)` of every public HTTP route of a conversation."""
    base = f"/agents/{agent}/{name}"
    return [
        ("GET", f"{base}/get-messages", None),
        ("POST", f"{base}/get-messages", None),
        ("GET", f"{base}/get-messages?branch=side", None),
        ("GET", f"{base}/branches", None),
        ("POST", f"{base}/branches", {"name": "new-one"}),
        ("PATCH", f"{base}/branches/side", {"name": "renamed"}),
        ("DELETE", f"{base}/branches/side", None),
        ("POST", f"{base}/branches/side/fork", {"name": f"{name}-fork"}),
        ("GET", f"{base}/messages/m1/siblings", None),
        ("GET", f"{base}/something-else", None),
        # The AI SDK's HTTP transport (the conversation's name is in the body of a chat).
        ("POST", f"/v1/agents/{agent}/chat", {"id": name, "messages": []}),
        ("GET", f"/v1/agents/{agent}/chat/{name}/stream", None),
        ("POST", f"/v1/agents/{agent}/chat/{name}/stop", None),
    ]


OTHER_ROUTES = [
    ("GET", "/openapi.json", None),
    ("GET", "/docs", None),
    ("GET", "/redoc", None),
    ("GET", "/v1/usage", None),
    ("POST", "/v1/tokens", {"agent": AGENT, "name": NAME}),
    ("GET", "/v1/webhooks", None),
    ("POST", "/v1/webhooks", {"url": "https://example.com/hook"}),
    ("GET", "/v1/webhooks/wh_1/dead-letters", None),
    ("DELETE", "/v1/webhooks/wh_1", None),
]
FEED_ROUTES = [("GET", "/v1/events", None)]
"""The event feed: refused without a credential (with one it streams; see test_auth_events)."""


async def call(
    http: httpx.AsyncClient,
    route: tuple[str, str, dict[str, Any] | None],
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    method, path, body = route
    return await http.request(method, path, json=body, headers=headers)


async def upgrade_status(base_url: str, name: str, **credential: Any) -> int:
    """The HTTP status a WebSocket upgrade is refused with (101 if it is accepted)."""
    try:
        socket = await WsClient.connect(base_url, AGENT, name, **credential)
    except websockets.InvalidStatus as refused:
        return refused.response.status_code
    await socket.close()
    return 101


@pytest.mark.parametrize(
    "credential",
    [None, "garbage", "dck_0123456789abcdef_not-a-real-secret", "eyJhbGciOiJIUzI1NiJ9.e30.x"],
)
async def test_every_route_refuses_missing_or_bad_credentials(
    auth_cluster: LocalCluster, auth_http: httpx.AsyncClient, credential: str | None
) -> None:
    headers = None if credential is None else bearer(credential)
    for route in [*http_routes(AGENT, NAME), *OTHER_ROUTES, *FEED_ROUTES]:
        answer = await call(auth_http, route, headers)
        assert answer.status_code == 401, route
        assert answer.json()["code"] in (
            "missing_credentials",
            "invalid_credentials",
            "invalid_token",
        )
    socket_credential = {} if credential is None else {"headers": headers}
    assert await upgrade_status(auth_cluster.urls[0], NAME, **socket_credential) == 401
    if credential is not None:
        assert await upgrade_status(auth_cluster.urls[0], NAME, token=credential) == 401


async def test_expired_and_revoked_credentials_are_refused(
    auth_cluster: LocalCluster, auth_http: httpx.AsyncClient
) -> None:
    tenant = await create_tenant(auth_http)
    short = await mint(auth_http, tenant, AGENT, NAME, ttl_s=1)
    route = ("GET", f"/agents/{AGENT}/{NAME}/get-messages", None)
    assert (await call(auth_http, route, bearer(short))).status_code == 200

    async def expired() -> bool:
        answer = await call(auth_http, route, bearer(short))
        return answer.status_code == 401 and answer.json()["code"] == "expired_token"

    await eventually(expired, timeout=10.0)
    assert await upgrade_status(auth_cluster.urls[0], NAME, token=short) == 401

    token = await mint(auth_http, tenant, AGENT, NAME)
    revoked = await auth_http.delete(
        f"/v1/admin/tenants/{tenant.id}/keys/{tenant.key_id}", headers=ADMIN
    )
    assert revoked.status_code == 200
    for credential in (tenant.key, token):
        answer = await call(auth_http, route, bearer(credential))
        assert answer.status_code == 401
        assert answer.json()["code"] in ("invalid_credentials", "revoked_token")
        assert await upgrade_status(auth_cluster.urls[0], NAME, token=credential) == 401


async def test_api_keys_are_refused_in_urls(
    auth_cluster: LocalCluster, auth_http: httpx.AsyncClient
) -> None:
    tenant = await create_tenant(auth_http)
    answer = await auth_http.get(f"/agents/{AGENT}/{NAME}/get-messages?token={tenant.key}")
    assert (answer.status_code, answer.json()["code"]) == (401, "credential_in_url")
    assert await upgrade_status(auth_cluster.urls[0], NAME, token=tenant.key) == 401
    assert (
        await auth_http.get(f"/v1/cluster?token={ADMIN['Authorization'][7:]}")
    ).status_code == 401


async def test_a_token_sees_only_its_conversation_and_scopes(
    auth_cluster: LocalCluster, auth_http: httpx.AsyncClient
) -> None:
    tenant = await create_tenant(auth_http)
    url = auth_cluster.urls[0]
    token = await mint(auth_http, tenant, AGENT, "mine")
    for route in http_routes(AGENT, "theirs") + http_routes("other-agent", "mine"):
        answer = await call(auth_http, route, bearer(token))
        assert (answer.status_code, answer.json()["code"]) == (404, "not_found"), route
    assert await upgrade_status(url, "theirs", token=token) == 404
    fork = await auth_http.post(
        f"/agents/{AGENT}/mine/branches/main/fork", json={"name": "theirs"}, headers=bearer(token)
    )
    assert (fork.status_code, fork.json()["code"]) == (404, "not_found")
    for route in OTHER_ROUTES[3:]:
        assert (await call(auth_http, route, bearer(token))).status_code == 403

    prefixed = bearer(await mint(auth_http, tenant, AGENT, name_prefix="user-7-"))
    covered = await auth_http.get(f"/agents/{AGENT}/user-7-a/get-messages", headers=prefixed)
    assert covered.status_code == 200
    outside = await auth_http.get(f"/agents/{AGENT}/user-8-a/get-messages", headers=prefixed)
    assert outside.status_code == 404

    reader = await mint(auth_http, tenant, AGENT, "mine", scopes=["read"])
    assert await upgrade_status(url, "mine", token=reader) == 403
    listed = await auth_http.get(f"/agents/{AGENT}/mine/branches", headers=bearer(reader))
    assert listed.status_code == 200
    refused = await auth_http.post(
        f"/agents/{AGENT}/mine/branches", json={"name": "x"}, headers=bearer(reader)
    )
    assert (refused.status_code, refused.json()["code"]) == (403, "insufficient_scope")

    watcher = await mint(auth_http, tenant, AGENT, "mine", scopes=["events", "read"])
    socket = await WsClient.connect(url, AGENT, "mine", token=watcher)
    request = chat_request([user_message("hello")])
    await socket.send(request)
    done = await socket.wait_done(request["id"])
    assert done.get("outcome") == "error"
    error = await socket.wait_for(lambda f: f.get("type") == "durachat_error")
    assert error["code"] == "insufficient_scope"
    await socket.close()
    stored = await auth_http.get(f"/agents/{AGENT}/mine/get-messages", headers=tenant.headers)
    assert stored.json() == []


async def seed(url: str, tenant: Tenant, text: str) -> list[dict[str, Any]]:
    """One exchange in `NAME` of the tenant; returns its transcript."""
    socket = await WsClient.connect(url, AGENT, NAME, headers=tenant.headers)
    request = chat_request([user_message(text)])
    await socket.send(request)
    await socket.wait_done(request["id"])
    await socket.close()
    async with httpx.AsyncClient(base_url=url, headers=tenant.headers) as http:
        messages: list[dict[str, Any]] = (
            await http.get(f"/agents/{AGENT}/{NAME}/get-messages")
        ).json()
        return messages


async def test_tenant_a_finds_nothing_of_tenant_b_on_any_route(
    auth_cluster: LocalCluster, auth_http: httpx.AsyncClient
) -> None:
    url = auth_cluster.urls[0]
    a = await create_tenant(auth_http)
    b = await create_tenant(auth_http)
    b_messages = await seed(url, b, "secret of b")
    side = await auth_http.post(
        f"/agents/{AGENT}/{NAME}/branches", json={"name": "side"}, headers=b.headers
    )
    assert side.status_code == 201
    b_branch = str(side.json()["id"])
    b_message = b_messages[-1]["id"]
    base = f"/agents/{AGENT}/{NAME}"

    async def as_a(method: str, path: str, body: Any = None) -> httpx.Response:
        return await auth_http.request(method, path, json=body, headers=a.headers)

    # The same name in tenant A is another, empty conversation.
    assert (await as_a("GET", f"{base}/get-messages")).json() == []
    assert (await as_a("GET", f"{base}/branches")).json() == {"branches": []}
    for branch in (b_branch, "side"):
        unknown = await as_a("GET", f"{base}/get-messages?branch={branch}")
        assert (unknown.status_code, unknown.json()["code"]) == (404, "unknown_branch")
        siblings = await as_a("GET", f"{base}/messages/{b_message}/siblings?branch={branch}")
        assert siblings.status_code == 404
    siblings = await as_a("GET", f"{base}/messages/{b_message}/siblings")
    assert (siblings.status_code, siblings.json()["code"]) == (404, "unknown_message")
    assert (await as_a("PATCH", f"{base}/branches/{b_branch}", {"name": "x"})).status_code == 404
    assert (await as_a("DELETE", f"{base}/branches/{b_branch}")).status_code == 404
    assert (
        await as_a("POST", f"{base}/branches/{b_branch}/fork", {"name": "f"})
    ).status_code == 404
    # Nothing of B's streams over the AI SDK transport either.
    assert (await as_a("GET", f"/v1/agents/{AGENT}/chat/{NAME}/stream")).status_code == 204
    usage = (await as_a("GET", "/v1/usage")).json()
    assert usage["tenant"] == a.id and usage["usage"]["conversations"] <= 1

    socket = await WsClient.connect(url, AGENT, NAME, headers=a.headers, branch=b_branch)
    error = await socket.wait_for(lambda f: f.get("type") == "durachat_error")
    assert error["code"] == "unknown_branch"
    await socket.send({"type": "durachat_branches", "id": "q"})
    listed = await socket.wait_for(lambda f: f.get("type") == "durachat_branches")
    # The writes above made A's own (empty) conversation; none of B's branches shows.
    assert [x["name"] for x in listed["branches"]] in ([], ["main"])
    assert b_branch not in [str(x["id"]) for x in listed["branches"]]
    await socket.send({"type": "cf_agent_stream_resume_request"})
    await socket.wait_for(lambda f: f.get("type") == "cf_agent_stream_resume_none")
    await socket.close()

    # B's data is where it was, unchanged.
    async with httpx.AsyncClient(base_url=url, headers=b.headers) as http:
        assert (await http.get(f"{base}/get-messages")).json() == b_messages
        names = [x["name"] for x in (await http.get(f"{base}/branches")).json()["branches"]]
        assert names == ["main", "side"]


async def test_openapi_docs_need_a_credential_and_pass_a_token_on(
    auth_http: httpx.AsyncClient,
) -> None:
    tenant = await create_tenant(auth_http)
    token = await mint(auth_http, tenant, AGENT, NAME)

    spec = await auth_http.get("/openapi.json", headers=tenant.headers)
    assert spec.status_code == 200 and "/v1/tokens" in spec.json()["paths"]
    page = await auth_http.get(f"/docs?token={token}")
    assert page.status_code == 200
    assert f"/openapi.json?token={token}" in page.text
    assert (await auth_http.get(f"/openapi.json?token={token}")).status_code == 200
    assert (await auth_http.get("/openapi.json", headers=ADMIN)).status_code == 200
    refused = json.loads((await auth_http.get("/redoc")).text)
    assert refused["code"] == "missing_credentials"
