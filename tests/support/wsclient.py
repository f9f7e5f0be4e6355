"""A raw protocol client for end-to-end tests: frames in, frames out, nothing hidden."""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import time
import uuid
from collections.abc import Callable
from typing import Any

import websockets
from websockets.asyncio.client import ClientConnection

Frame = dict[str, Any]


def user_message(text: str, message_id: str | None = None) -> Frame:
    """A user UIMessage as the AI SDK builds it."""
    return {
        "id": message_id or secrets.token_hex(8),
        "role": "user",
        "parts": [{"type": "text", "text": text}],
    }


def chat_request(
    messages: list[Frame],
    *,
    trigger: str = "submit-message",
    request_id: str | None = None,
    **extra: Any,
) -> Frame:
    """A `cf_agent_use_chat_request` frame."""
    body = {"messages": messages, "trigger": trigger, **extra}
    return {
        "id": request_id or secrets.token_hex(4),
        "init": {"method": "POST", "body": json.dumps(body)},
        "type": "cf_agent_use_chat_request",
    }


class WsClient:
    """One WebSocket to a gateway; every received frame is kept in `frames`."""

    def __init__(self, ws: ClientConnection, pk: str) -> None:
        self.ws = ws
        self.pk = pk
        self.frames: list[Frame] = []
        self._new = asyncio.Event()
        self._reader = asyncio.create_task(self._read())
        self.closed = asyncio.Event()

    @classmethod
    async def connect(
        cls,
        base_url: str,
        agent: str,
        name: str,
        *,
        pk: str | None = None,
        cursor: str | None = None,
        branch: str | None = None,
        token: str | None = None,
        headers: dict[str, str] | None = None,
        ping_interval: float | None = 20,
    ) -> WsClient:
        """Connect as `_pk` (a fresh id unless given); with `cursor` ("" to start), frames carry
        their log cursor and the connection resumes after the given one; `branch` is the branch
        the connection views; `token` goes in the query, `headers` with the upgrade;
        `ping_interval` None sends no keepalive pings."""
        pk = pk or str(uuid.uuid4())
        url = base_url.replace("http", "ws", 1) + f"/agents/{agent}/{name}?_pk={pk}"
        if cursor is not None:
            url += f"&cursor={cursor}"
        if branch is not None:
            url += f"&branch={branch}"
        if token is not None:
            url += f"&token={token}"
        ws = await websockets.connect(
            url, max_size=None, additional_headers=headers, ping_interval=ping_interval
        )
        return cls(ws, pk)

    async def _read(self) -> None:
        try:
            async for raw in self.ws:
                self.frames.append(json.loads(raw))
                self._new.set()
        except websockets.ConnectionClosed:
            pass
        finally:
            self.closed.set()
            self._new.set()

    async def send(self, frame: Frame | str) -> None:
        """Send a frame (objects are JSON-encoded)."""
        await self.ws.send(frame if isinstance(frame, str) else json.dumps(frame))

    async def wait_for(
        self, predicate: Callable[[Frame], bool], *, timeout: float = 15.0, after: int = 0
    ) -> Frame:
        """The first frame (from index `after`) matching `predicate`, waiting up to `timeout`."""
        deadline = time.monotonic() + timeout
        index = after
        while True:
            while index < len(self.frames):
                frame = self.frames[index]
                index += 1
                if predicate(frame):
                    return frame
            if self.closed.is_set():
                raise AssertionError("socket closed while waiting")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"no matching frame within {timeout}s; got {self.frames[-5:]}")
            self._new.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._new.wait(), remaining)

    async def wait_done(self, request_id: str, *, timeout: float = 20.0, after: int = 0) -> Frame:
        """The terminal frame of a request."""
        return await self.wait_for(
            lambda f: (
                f.get("type") == "cf_agent_use_chat_response"
                and f.get("id") == request_id
                and f.get("done") is True
            ),
            timeout=timeout,
            after=after,
        )

    def chunks(self, request_id: str, *, replay: bool | None = None) -> list[Frame]:
        """Decoded chunk bodies received for a request (optionally only replayed / live ones)."""
        out = []
        for f in self.frames:
            if (
                f.get("type") == "cf_agent_use_chat_response"
                and f.get("id") == request_id
                and f.get("body")
                and not f.get("error")
                and (replay is None or bool(f.get("replay")) == replay)
            ):
                out.append(json.loads(f["body"]))
        return out

    def text(self, request_id: str) -> str:
        """Concatenated text deltas received for a request."""
        return "".join(c["delta"] for c in self.chunks(request_id) if c["type"] == "text-delta")

    def of_type(self, frame_type: str) -> list[Frame]:
        """Every received frame of a type."""
        return [f for f in self.frames if f.get("type") == frame_type]

    async def close(self) -> None:
        """Close the socket."""
        await self.ws.close()
        await self._reader


async def get_messages(
    base_url: str, agent: str, name: str, *, headers: dict[str, str] | None = None, **params: str
) -> Any:
    """HTTP `get-messages`."""
    import httpx

    async with httpx.AsyncClient(headers=headers) as client:
        response = await client.get(f"{base_url}/agents/{agent}/{name}/get-messages", params=params)
        response.raise_for_status()
        return response.json()
