"""Signed calls inside the cluster: gateways and the jobs worker sign what they send to a
shard's internal API with the cluster secret, and shards refuse what is not signed
(docs/security.md#inside-the-cluster).

A signature is an HMAC-SHA256, keyed by the secret, over the time of the call, the method,
the path with its query and the body. It proves the call comes from a process that holds the
secret and that nothing in it (the tenant a frame is for, say) was changed on the way; the time
bounds how long a recorded call could be replayed. The secret itself never travels.

`DURACHAT_CLUSTER_SECRET` may list several secrets, comma-separated: calls are signed with the
first and accepted with any, so the secret can be rotated without stopping the cluster
(docs/security.md#rotation).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Awaitable, Callable, Generator, MutableMapping
from typing import Any, Final

import httpx

__all__ = [
    "MAX_CLOCK_SKEW",
    "SIGNATURE_HEADER",
    "TIMESTAMP_HEADER",
    "ClusterAuth",
    "RequireClusterSignature",
    "cluster_auth",
    "sign",
    "verify",
]

SIGNATURE_HEADER: Final = "x-durachat-signature"
TIMESTAMP_HEADER: Final = "x-durachat-timestamp"
MAX_CLOCK_SKEW: Final = 60.0
"""Seconds a signed call stays valid either side of its timestamp (clocks of the cluster's
machines may differ by that much)."""

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def secrets_of(setting: str | None) -> list[str]:
    """The secrets a `DURACHAT_CLUSTER_SECRET` value lists (the first signs)."""
    return [part.strip() for part in (setting or "").split(",") if part.strip()]


def _mac(secret: str, timestamp: str, method: str, target: bytes, body: bytes) -> str:
    mac = hmac.new(secret.encode(), digestmod=hashlib.sha256)
    mac.update(f"{timestamp}\n{method.upper()}\n".encode())
    mac.update(target)
    mac.update(b"\n")
    mac.update(body)
    return mac.hexdigest()


def sign(
    secret: str, method: str, target: bytes, body: bytes, *, now: float | None = None
) -> dict[str, str]:
    """The headers that sign a call: `target` is the raw path with its query (`/a?b=c`)."""
    timestamp = f"{time.time() if now is None else now:.3f}"
    return {
        TIMESTAMP_HEADER: timestamp,
        SIGNATURE_HEADER: _mac(secret, timestamp, method, target, body),
    }


def verify(
    secret: str,
    *,
    timestamp: str | None,
    signature: str | None,
    method: str,
    target: bytes,
    body: bytes,
    now: float | None = None,
) -> str | None:
    """Check a call's signature; None if it is good, else why not (`unsigned`, `stale`,
    `bad_signature`)."""
    if not timestamp or not signature:
        return "unsigned"
    try:
        moment = float(timestamp)
    except ValueError:
        return "bad_signature"
    if abs((time.time() if now is None else now) - moment) > MAX_CLOCK_SKEW:
        return "stale"
    expected = _mac(secret, timestamp, method, target, body)
    if not hmac.compare_digest(expected, signature):
        return "bad_signature"
    return None


class ClusterAuth(httpx.Auth):
    """Signs every request of an httpx client with the cluster secret."""

    requires_request_body = True

    def __init__(self, secret: str) -> None:
        self._secret = secret

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers.update(
            sign(self._secret, request.method, request.url.raw_path, request.content)
        )
        yield request


def cluster_auth(setting: str | None) -> ClusterAuth | None:
    """The signer for an httpx client (`httpx.AsyncClient(auth=...)`) from the
    `DURACHAT_CLUSTER_SECRET` setting; None without a secret."""
    listed = secrets_of(setting)
    return ClusterAuth(listed[0]) if listed else None


class RequireClusterSignature:
    """ASGI middleware of a shard's internal API: every HTTP call under `protected` must be
    signed with the cluster secret, or it is answered 401 `{"code": "unauthorized"}` before it
    reaches a route. Paths in `open_paths` (health checks) stay unsigned. `secret` is the
    `DURACHAT_CLUSTER_SECRET` setting: a signature by any secret it lists is accepted."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        secret: str,
        protected: str = "/internal/",
        open_paths: frozenset[str] = frozenset(),
    ) -> None:
        self.app = app
        self._secrets = secrets_of(secret)
        if not self._secrets:
            raise ValueError("no cluster secret")
        self._protected = protected
        self._open = open_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = str(scope.get("path", ""))
        if scope["type"] != "http" or not path.startswith(self._protected) or path in self._open:
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] != "http.request":
                # The client went away before sending its body.
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        headers = {
            name.decode("latin-1").lower(): value.decode("latin-1")
            for name, value in scope.get("headers", ())
        }
        target = bytes(scope.get("raw_path") or path.encode())
        if scope.get("query_string"):
            target += b"?" + bytes(scope["query_string"])
        for secret in self._secrets:
            problem = verify(
                secret,
                timestamp=headers.get(TIMESTAMP_HEADER),
                signature=headers.get(SIGNATURE_HEADER),
                method=str(scope["method"]),
                target=target,
                body=body,
            )
            if problem != "bad_signature":
                break
        if problem is not None:
            await _unauthorized(send, problem)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


async def _unauthorized(send: Send, problem: str) -> None:
    body = json.dumps(
        {"code": "unauthorized", "message": f"calls to the internal API must be signed ({problem})"}
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
