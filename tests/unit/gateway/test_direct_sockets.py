"""Direct WebSocket routes (docs/benchmarks.md#idle-sockets): a socket whose path matches runs
its endpoint behind the guard, with its path parameters; everything else, HTTP and other
sockets, goes through the app as before."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocket, WebSocketDisconnect

from durachat_gateway.direct_sockets import DirectSocketApp


def guard(inner: ASGIApp) -> ASGIApp:
    """Refuses a socket whose name is `x`; marks the scope of the others."""

    async def checked(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["path_params"]["name"] == "x":
            await receive()
            await send({"type": "websocket.close", "code": 1008})
            return
        scope["guarded"] = True
        await inner(scope, receive, send)

    return checked


def make_app() -> DirectSocketApp:
    app = DirectSocketApp()

    async def chat(websocket: WebSocket) -> None:
        await websocket.accept()
        params = websocket.path_params
        guarded = websocket.scope.get("guarded", False)
        await websocket.send_json({"params": params, "guarded": guarded})
        text = await websocket.receive_text()
        await websocket.close(4000, text)

    @app.websocket("/agents/{agent}/{name}/other")
    async def other(websocket: WebSocket) -> None:
        await websocket.accept()
        await websocket.send_text("through the app")
        await websocket.close()

    @app.get("/agents/{agent}/{name}")
    async def page(agent: str, name: str) -> dict[str, str]:
        return {"http": f"{agent}/{name}"}

    app.add_direct_websocket("/agents/{agent}/{name}", chat, guard)
    return app


def test_a_matching_socket_runs_its_endpoint_behind_the_guard() -> None:
    with TestClient(make_app()) as client, client.websocket_connect("/agents/a1/n1") as ws:
        assert ws.receive_json() == {"params": {"agent": "a1", "name": "n1"}, "guarded": True}
        ws.send_text("done")
        with pytest.raises(WebSocketDisconnect) as closed:
            ws.receive_text()
    assert (closed.value.code, closed.value.reason) == (4000, "done")


def test_the_guard_can_refuse_a_socket() -> None:
    client = TestClient(make_app())
    with pytest.raises(WebSocketDisconnect) as refused, client.websocket_connect("/agents/a1/x"):
        pass
    assert refused.value.code == 1008


def test_other_sockets_and_http_go_through_the_app() -> None:
    with TestClient(make_app()) as client:
        with client.websocket_connect("/agents/a1/n1/other") as ws:
            assert ws.receive_text() == "through the app"
        assert client.get("/agents/a1/n1").json() == {"http": "a1/n1"}
        with pytest.raises(WebSocketDisconnect), client.websocket_connect("/nowhere"):
            pass
