"""The load of a chaos run: users chatting in many conversations, each turn recorded as its
client saw it.

A user goes round its conversations one turn at a time: it reads the stored history
(`get-messages`, from any gateway that answers), sends a chat request on a WebSocket opened with
a resume cursor, and waits for the terminal frame. When the socket drops (its gateway was
killed), it reconnects through a gateway that answers, with the same connection id and the last
cursor it saw, and goes on. A request none of whose frames was seen yet is sent again on a new
connection, and on the same one after `resend_after` seconds of silence, as a client retries
(requests are idempotent by id): a shard killed after taking a frame, before storing its turn,
loses it. Every chunk frame is kept by `seq`: a `seq` seen twice is a duplicate, a
gap a loss.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from support.wsclient import Frame, WsClient, chat_request, user_message

AGENT = "chat-agent"


@dataclass
class TurnRecord:
    """One chat request as its client saw it."""

    conversation: str
    request_id: str
    slow: bool
    chunks: dict[int, str] = field(default_factory=dict)
    """Chunk bodies by `seq`."""
    cursors: dict[int, str] = field(default_factory=dict)
    """The cursor (log entry id) each chunk came with."""
    duplicates: int = 0
    duplicated: list[str] = field(default_factory=list)
    """What each duplicate was: its `seq`, both cursors, whether the bodies match."""
    terminal: Frame | None = None
    reconnects: int = 0
    resent: int = 0
    recovering: bool = False
    """The client was told the turn is being recovered."""

    @property
    def reloaded(self) -> bool:
        """Whether the client got the terminal frame of a completed turn without its chunks:
        its socket dropped before the first chunk (so it had no cursor to resume from) and its
        request, sent again, was answered as a repeat. A client then reads the reply with
        `get-messages`, as the reference client does after a reconnect."""
        return self.outcome == "completed" and not self.chunks and self.reconnects > 0

    @property
    def outcome(self) -> str:
        """`completed`, the terminal's outcome, or `open` (no terminal frame)."""
        if self.terminal is None:
            return "open"
        return str(self.terminal.get("outcome") or "completed")

    @property
    def text(self) -> str:
        """The reply's text as received: its text deltas in `seq` order."""
        out = []
        for seq in sorted(self.chunks):
            chunk = json.loads(self.chunks[seq])
            if chunk.get("type") == "text-delta":
                out.append(str(chunk.get("delta", "")))
        return "".join(out)

    @property
    def lost(self) -> int:
        """Chunks missing between the first and the last received."""
        if not self.chunks:
            return 0
        return max(self.chunks) + 1 - len(self.chunks)


@dataclass
class LoadConfig:
    """How much load, and how patient the clients are."""

    users: int = 6
    conversations_per_user: int = 3
    slow_share: float = 0.6
    """Share of turns asking for the slow reply (50 deltas, 100 ms apart)."""
    turn_timeout: float = 120.0
    resend_after: float = 15.0
    """Seconds without any frame of a request before it is sent again."""
    prefix: str = "chaos"


async def _history(urls: list[str], name: str, deadline: float) -> list[dict[str, Any]]:
    """The stored history of a conversation, from the first gateway that answers."""
    while True:
        for url in random.sample(urls, len(urls)):
            with contextlib.suppress(httpx.HTTPError, OSError):
                async with httpx.AsyncClient(timeout=10) as http:
                    response = await http.get(f"{url}/agents/{AGENT}/{name}/get-messages")
                if response.status_code == 200:
                    history: list[dict[str, Any]] = response.json()
                    return history
        if time.monotonic() > deadline:
            raise TimeoutError(f"no gateway served the history of {name}")
        await asyncio.sleep(0.3)


class User:
    """One simulated user; `records` collects every turn it sent."""

    def __init__(
        self, index: int, config: LoadConfig, urls: Callable[[], list[str]], seed: int
    ) -> None:
        self.config = config
        self.urls = urls
        self.random = random.Random(seed)
        self.names = [
            f"{config.prefix}-u{index}-c{j}" for j in range(config.conversations_per_user)
        ]
        self.records: list[TurnRecord] = []
        self.failures: list[str] = []

    async def run(self, stop: asyncio.Event) -> None:
        """Chat until `stop` is set (the turn under way is finished)."""
        turn = 0
        while not stop.is_set():
            name = self.names[turn % len(self.names)]
            turn += 1
            try:
                await self._turn(name, turn)
            except Exception as exc:
                self.failures.append(f"{name}: {exc!r}")
                await asyncio.sleep(0.5)

    async def _turn(self, name: str, n: int) -> None:
        deadline = time.monotonic() + self.config.turn_timeout
        history = await _history(self.urls(), name, deadline)
        slow = self.random.random() < self.config.slow_share
        said = f"slow story {n}" if slow else f"hello number {n}"
        request = chat_request([*history, user_message(said)])
        record = TurnRecord(name, str(request["id"]), slow)
        self.records.append(record)
        pk = str(uuid.uuid4())
        cursor = ""
        connections = 0
        while record.terminal is None and time.monotonic() < deadline:
            url = self.random.choice(self.urls())
            try:
                client = await asyncio.wait_for(
                    WsClient.connect(url, AGENT, name, pk=pk, cursor=cursor), 10
                )
            except Exception:
                await asyncio.sleep(0.2)
                continue
            connections += 1
            if connections > 1:
                record.reconnects += 1
            try:
                cursor = await self._follow(client, record, request, cursor, deadline)
            finally:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(client.close(), 5)

    async def _follow(
        self, client: WsClient, record: TurnRecord, request: Frame, cursor: str, deadline: float
    ) -> str:
        """Read the connection until the request's terminal frame or the socket's end; returns
        the last cursor seen."""
        sent = False
        index = 0
        heard = time.monotonic()
        while True:
            while index < len(client.frames):
                frame = client.frames[index]
                index += 1
                cursor = str(frame.get("cursor") or cursor)
                if not sent and frame.get("type") == "cf_agent_mcp_servers":
                    if not record.chunks and record.terminal is None:
                        if record.reconnects:
                            record.resent += 1
                        await client.send(request)
                        heard = time.monotonic()
                    sent = True
                if frame.get("id") == record.request_id:
                    heard = time.monotonic()
                self._take(record, frame)
                if record.terminal is not None:
                    return cursor
            if client.closed.is_set() or time.monotonic() > deadline:
                return cursor
            if sent and time.monotonic() - heard > self.config.resend_after:
                record.resent += 1
                await client.send(request)
                heard = time.monotonic()
            client._new.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(client._new.wait(), 1.0)

    @staticmethod
    def _take(record: TurnRecord, frame: Frame) -> None:
        if frame.get("id") != record.request_id:
            return
        if frame.get("type") == "cf_agent_chat_recovering":
            record.recovering = True
            return
        if frame.get("type") != "cf_agent_use_chat_response":
            return
        if frame.get("done") is True:
            record.terminal = frame
            return
        seq = frame.get("seq")
        if isinstance(seq, int) and frame.get("body") and not frame.get("error"):
            cursor = str(frame.get("cursor") or "")
            if seq in record.chunks:
                record.duplicates += 1
                same = record.chunks[seq] == str(frame["body"])
                record.duplicated.append(
                    f"{record.request_id} seq {seq}: cursor {record.cursors.get(seq)} then "
                    f"{cursor}, {'same' if same else 'other'} body, replay {frame.get('replay')}"
                )
            else:
                record.chunks[seq] = str(frame["body"])
                record.cursors[seq] = cursor
