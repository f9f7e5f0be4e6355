"""A scripted in-process chat server for the client's unit tests: it plays a script for every
frame a `ChatClient` sends, over a real WebSocket."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import parse_qs, urlsplit

from websockets.asyncio.server import ServerConnection, serve

from durachat.client import ChatClient

Frame = dict[str, Any]
Script = Callable[[ServerConnection, Frame], Awaitable[None]]
"""Answers one received frame (it may send any frames on the connection)."""


class ScriptedServer:
    """Plays a script for every frame it receives, and keeps the frames and the query of every
    connection."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.received: list[Frame] = []
        self.queries: list[dict[str, list[str]]] = []
        self.sockets: list[ServerConnection] = []

    async def handle(self, ws: ServerConnection) -> None:
        self.sockets.append(ws)
        self.queries.append(parse_qs(urlsplit(ws.request.path if ws.request else "").query))
        async for raw in ws:
            frame = json.loads(raw)
            self.received.append(frame)
            await self.script(ws, frame)

    def sent(self, kind: str) -> list[Frame]:
        """The frames of one type the client sent."""
        return [f for f in self.received if f.get("type") == kind]


@asynccontextmanager
async def scripted_chat(
    script: Script, *, messages: list[Frame] | None = None, **options: Any
) -> AsyncIterator[tuple[ChatClient, ScriptedServer]]:
    """A client connected to a `ScriptedServer` (no history load); `messages` seeds its
    transcript."""
    server = ScriptedServer(script)
    async with serve(server.handle, "127.0.0.1", 0) as running:
        port = running.sockets[0].getsockname()[1]
        async with ChatClient.connect(
            f"http://127.0.0.1:{port}", "chat-agent", "c", load_history=False, **options
        ) as client:
            if messages is not None:
                client.messages = messages
            yield client, server
