"""Signed calls to a shard's internal API: what `ClusterAuth` signs, `RequireClusterSignature`
accepts, and everything else it refuses with 401 before the app sees it."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest

from durachat_infra.cluster.signing import (
    MAX_CLOCK_SKEW,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    ClusterAuth,
    RequireClusterSignature,
    cluster_auth,
    sign,
    verify,
)

SECRET = "s3cret"


class Echo:
    """An ASGI app answering with the body and path it received."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.calls += 1
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        answer = json.dumps({"path": scope["path"], "body": body.decode()}).encode()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": answer})


def client(app: Echo, *, secret: str | None, accepted: str = SECRET) -> httpx.AsyncClient:
    guarded = RequireClusterSignature(
        app, secret=accepted, open_paths=frozenset({"/internal/v1/health"})
    )
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=guarded),
        base_url="http://shard",
        auth=ClusterAuth(secret) if secret else None,
    )


async def test_a_signed_call_reaches_the_app_with_its_body() -> None:
    app = Echo()
    async with client(app, secret=SECRET) as http:
        response = await http.post("/internal/v1/frames?x=1", json={"tenant": "acme"})

    assert response.status_code == 200
    assert response.json() == {"path": "/internal/v1/frames", "body": '{"tenant":"acme"}'}


@pytest.mark.parametrize("secret", [None, "another secret"])
async def test_unsigned_or_wrongly_signed_calls_get_401(secret: str | None) -> None:
    app = Echo()
    async with client(app, secret=secret) as http:
        response = await http.post("/internal/v1/frames", json={"tenant": "acme"})

    assert response.status_code == 401
    assert response.json()["code"] == "unauthorized"
    assert app.calls == 0


async def test_a_changed_body_or_path_breaks_the_signature() -> None:
    app = Echo()
    headers = sign(SECRET, "POST", b"/internal/v1/frames", b'{"tenant":"acme"}')
    async with client(app, secret=None) as http:
        other_body = await http.post(
            "/internal/v1/frames", content=b'{"tenant":"evil"}', headers=headers
        )
        other_path = await http.post(
            "/internal/v1/branches", content=b'{"tenant":"acme"}', headers=headers
        )
        same = await http.post("/internal/v1/frames", content=b'{"tenant":"acme"}', headers=headers)

    assert (other_body.status_code, other_path.status_code, same.status_code) == (401, 401, 200)


async def test_health_and_paths_outside_the_internal_api_stay_open() -> None:
    app = Echo()
    async with client(app, secret=None) as http:
        health = await http.get("/internal/v1/health")
        metrics = await http.get("/metrics")

    assert (health.status_code, metrics.status_code) == (200, 200)


def test_signatures_expire() -> None:
    now = time.time()
    headers = sign(SECRET, "POST", b"/p", b"x", now=now - MAX_CLOCK_SKEW - 1)

    problem = verify(
        SECRET,
        timestamp=headers[TIMESTAMP_HEADER],
        signature=headers[SIGNATURE_HEADER],
        method="POST",
        target=b"/p",
        body=b"x",
        now=now,
    )
    assert problem == "stale"
    assert (
        verify(SECRET, timestamp=None, signature=None, method="POST", target=b"/p", body=b"")
        == "unsigned"
    )


async def test_a_listed_secret_signs_with_the_first_and_accepts_any() -> None:
    app = Echo()
    rotating = f"new-secret, {SECRET}"
    signer = cluster_auth(rotating)
    assert signer is not None
    guarded = RequireClusterSignature(app, secret=rotating)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=guarded), base_url="http://shard"
    ) as http:
        old = await http.post("/internal/x", content=b"{}", auth=ClusterAuth(SECRET))
        new = await http.post("/internal/x", content=b"{}", auth=signer)
        other = await http.post("/internal/x", content=b"{}", auth=ClusterAuth("other"))
    assert (old.status_code, new.status_code, other.status_code) == (200, 200, 401)
    async with client(app, secret="new-secret", accepted=SECRET) as http:
        assert (await http.post("/internal/x", content=b"{}")).status_code == 401
    assert cluster_auth(None) is None and cluster_auth(" , ") is None
