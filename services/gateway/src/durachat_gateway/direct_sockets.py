"""WebSocket routes served straight from the server, behind the same checks as every route.

FastAPI runs a request through a chain of ASGI layers (its error middleware, exception
handlers, an exit stack, telemetry and body-limit wrappers, the router, the route's own
exception wrapper), each one a coroutine suspended for as long as the request runs. For a chat
WebSocket that is the socket's whole life: about 8 KiB of a gateway's memory for every idle
socket (docs/benchmarks.md#idle-sockets). None of those layers does anything for these
sockets: the gateway's handlers answer every refusal themselves and raise none of the
exceptions the layers translate. A direct route skips them and runs its endpoint behind the
checks every route has (`guard`: the gateway's edge checks and authentication, in the same
order as its middleware).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI
from starlette.routing import Match, WebSocketRoute
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocket


class DirectSocketApp(FastAPI):
    """FastAPI, with WebSocket routes of its own served ahead of its middleware stack."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._direct: list[tuple[WebSocketRoute, ASGIApp]] = []

    def add_direct_websocket(
        self,
        path: str,
        endpoint: Callable[[WebSocket], Awaitable[None]],
        guard: Callable[[ASGIApp], ASGIApp],
    ) -> None:
        """Serve WebSockets at `path` (a Starlette path, `{param}`s in `path_params`) with
        `endpoint`, behind `guard`."""

        async def session(scope: Scope, receive: Receive, send: Send) -> None:
            await endpoint(WebSocket(scope, receive=receive, send=send))

        self._direct.append((WebSocketRoute(path, endpoint), guard(session)))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            for route, app in self._direct:
                match, child_scope = route.matches(scope)
                if match is Match.FULL:
                    scope["app"] = self
                    scope.update(child_scope)
                    await app(scope, receive, send)
                    return
        await super().__call__(scope, receive, send)
