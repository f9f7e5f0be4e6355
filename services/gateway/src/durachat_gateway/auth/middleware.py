"""The gateway's authentication: an ASGI middleware in front of every route, HTTP and
WebSocket alike (docs/security.md#what-each-credential-can-do).

Every request is refused unless its route allows the credential it carries, so a route added
later is closed until it is listed here. What passes gets its `Principal` in the ASGI scope
(`principal_of`). A WebSocket is refused at the upgrade, before any frame.

| route | needs |
| --- | --- |
| health checks | nothing |
| `/v1/admin/…`, `/v1/cluster…`, `/metrics` | the admin key |
| `/v1/tokens`, `/v1/usage`, `/v1/webhooks…` | a tenant's API key |
| `/v1/events`, `/v1/events/ws` | the admin key, an API key, or a token with the `events` scope |
| `/agents/{agent}/{name}…` | an API key, or a token covering the conversation and the scope |
| OpenAPI docs, anything else | any valid credential |

Without an admin key configured the gateway is open: every request acts as the configured
tenant with every scope, as before tenants existed, except the admin API, `/v1/tokens` and
`/v1/usage`, which are refused (403 `auth_disabled`).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Final
from urllib.parse import parse_qs

from prometheus_client import Counter

from durachat_gateway.auth.directory import AuthDirectory, AuthError, bearer
from durachat_gateway.auth.principal import PRINCIPAL_SCOPE_KEY, Principal

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

AUTH_FAILURES = Counter(
    "durachat_gateway_auth_failures_total", "Requests refused for their credential", ["code"]
)

HEALTH_PATHS: Final = frozenset({"/healthz", "/readyz", "/livez", "/health"})
"""Routes open to anyone (probes of an orchestrator)."""
ADMIN_PREFIXES: Final = ("/v1/admin", "/v1/cluster", "/metrics")
TENANT_KEY_PATHS: Final = frozenset({"/v1/tokens", "/v1/usage"})
WEBHOOKS_PREFIX: Final = "/v1/webhooks"
"""A tenant's webhooks (API key; open mode: the open tenant's)."""
EVENTS_PATHS: Final = frozenset({"/v1/events", "/v1/events/ws"})
"""The event feed: what each credential sees of it is decided by the route
(`durachat_gateway.events_api`)."""
AGENTS_PREFIX: Final = "/agents/"


def route_scope(method: str, rest: list[str], *, websocket: bool) -> str:
    """The token scope a route under `/agents/{agent}/{name}/` needs (`rest`: the path parts
    after the name)."""
    if websocket:
        return "events"
    if rest and rest[0] == "branches" and method not in ("GET", "HEAD"):
        return "branches"
    return "read"


class Authenticate:
    """Checks the credential of every request against the directory (auth mode, `required`),
    or marks every request as the open tenant's."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        directory: Callable[[], AuthDirectory | None],
        open_tenant: str,
        required: bool,
    ) -> None:
        self.app = app
        self._directory = directory
        self._required = required
        self._open = Principal(kind="open", tenant=open_tenant)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        path = str(scope.get("path", ""))
        directory = self._directory()
        try:
            if directory is None and self._required:
                raise AuthError("starting", "the gateway is starting", status=503)
            if directory is None:
                principal = self._open_principal(path)
            elif path in HEALTH_PATHS:
                principal = self._open
            else:
                credential, in_url = _credential(scope)
                principal = directory.authenticate(credential)
                if in_url and principal.kind != "token":
                    # URLs end up in logs and browser histories: only short-lived tokens go there.
                    raise AuthError(
                        "credential_in_url",
                        "API keys and the admin key go in the Authorization header, not the URL",
                    )
                principal = _authorize(principal, scope, path)
        except AuthError as exc:
            AUTH_FAILURES.labels(exc.code).inc()
            await _refuse(scope, receive, send, exc)
            return
        scope[PRINCIPAL_SCOPE_KEY] = principal
        await self.app(scope, receive, send)

    def _open_principal(self, path: str) -> Principal:
        if path.startswith("/v1/admin") or path in TENANT_KEY_PATHS:
            raise AuthError(
                "auth_disabled",
                "the gateway runs without DURACHAT_ADMIN_KEY: set it to manage tenants and keys",
                status=403,
            )
        return self._open


def _authorize(principal: Principal, scope: Scope, path: str) -> Principal:
    """Check that `principal` may use the route at `path`; returns it."""
    if path.startswith(ADMIN_PREFIXES):
        if principal.kind != "admin":
            raise AuthError("admin_key_required", "this route needs the admin key", status=403)
        return principal
    if path in EVENTS_PATHS:
        if principal.kind == "token" and not principal.allows("events"):
            raise AuthError("insufficient_scope", "the token lacks the 'events' scope", status=403)
        return principal
    if path in TENANT_KEY_PATHS or _is_webhooks(path):
        if principal.kind != "key":
            raise AuthError("api_key_required", "this route needs a tenant's API key", status=403)
        return principal
    if path.startswith(AGENTS_PREFIX):
        parts = path[len(AGENTS_PREFIX) :].split("/")
        if principal.tenant is None:
            raise AuthError(
                "tenant_credential_required", "the admin key acts for no tenant", status=403
            )
        if len(parts) >= 2 and parts[0] and parts[1]:
            if not principal.covers(parts[0], parts[1]):
                # As if the conversation did not exist: a credential learns nothing of others.
                raise AuthError("not_found", "no such conversation", status=404)
            websocket = scope["type"] == "websocket"
            needed = route_scope(str(scope.get("method", "GET")), parts[2:], websocket=websocket)
            if not principal.allows(needed):
                raise AuthError(
                    "insufficient_scope", f"the token lacks the {needed!r} scope", status=403
                )
    return principal


def _is_webhooks(path: str) -> bool:
    return path == WEBHOOKS_PREFIX or path.startswith(WEBHOOKS_PREFIX + "/")


def _credential(scope: Scope) -> tuple[str | None, bool]:
    """The bearer credential of the `Authorization` header, else the `token` query parameter
    (what a browser's WebSocket can carry), and whether it came in the URL."""
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            found = bearer(value.decode("latin-1"))
            if found:
                return found, False
    query = scope.get("query_string", b"")
    if b"token=" in query:
        tokens = parse_qs(query.decode("latin-1")).get("token")
        if tokens:
            return str(tokens[-1]), True
    return None, False


async def _refuse(scope: Scope, receive: Receive, send: Send, error: AuthError) -> None:
    body = json.dumps({"code": error.code, "message": error.message}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    if error.status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    if scope["type"] == "http":
        await send({"type": "http.response.start", "status": error.status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
        return
    await deny_websocket(scope, receive, send, status=error.status, body=body, headers=headers)


async def deny_websocket(
    scope: Scope,
    receive: Receive,
    send: Send,
    *,
    status: int,
    body: bytes,
    headers: list[tuple[bytes, bytes]],
) -> None:
    """Refuse a WebSocket upgrade with an HTTP answer (where the server supports it; else the
    handshake is closed, which clients see as 403)."""
    message = await receive()
    if message["type"] != "websocket.connect":
        return
    if "websocket.http.response" in scope.get("extensions", {}):
        await send({"type": "websocket.http.response.start", "status": status, "headers": headers})
        await send({"type": "websocket.http.response.body", "body": body})
        return
    await send({"type": "websocket.close", "code": 1008})
