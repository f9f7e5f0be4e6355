"""Forwarding client frames to the conversation's owner shard, following redirects."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any, Final

import aiohttp

from durachat.protocol import MessageType
from durachat_gateway.telemetry import trace_headers
from durachat_infra.cluster import ClusterView
from durachat_infra.cluster.signing import secrets_of, sign

FORWARDED: Final = frozenset(
    {
        MessageType.USE_CHAT_REQUEST.value,
        MessageType.CHAT_MESSAGES.value,
        MessageType.CHAT_CLEAR.value,
        MessageType.CHAT_REQUEST_CANCEL.value,
        MessageType.TOOL_RESULT.value,
        MessageType.TOOL_APPROVAL.value,
    }
)
"""Client frames that change a conversation: the gateway forwards them to its owner shard
(and a token needs the `chat` scope to send them)."""

log = logging.getLogger(__name__)


RETRY_LATER = frozenset({"unavailable", "overloaded"})
"""The `ForwardError` codes of a cluster that cannot take the frame now (HTTP 503), rather
than of a frame naming something that does not exist."""


class ForwardError(Exception):
    """A frame could not be delivered; `code` is stable."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class Forwarder:
    """Delivers frames to owner shards over their internal HTTP API.

    The owner is found by rendezvous hashing over the live shards. A shard that is not the owner
    answers 409; a shard that is down refuses the connection. Either way the gateway refreshes
    its view and retries until `timeout`. Requests carry their own id, so a retry after a shard
    crash is harmless: the new owner runs each request once.

    Calls go through aiohttp's connection pool: every client frame that changes a conversation
    is one call, and under a burst httpx's pool spent most of the gateway's time choosing a
    connection (it checks every pooled connection for each waiting request;
    docs/benchmarks.md#the-gateways-forwarding).
    """

    def __init__(
        self, view: ClusterView, *, timeout: float, cluster_secret: str | None = None
    ) -> None:
        """`cluster_secret` (`DURACHAT_CLUSTER_SECRET`) signs the calls
        (docs/security.md#inside-the-cluster). Call from the running event loop."""
        self._view = view
        self._timeout = timeout
        secrets = secrets_of(cluster_secret)
        self._secret = secrets[0] if secrets else None
        self._http = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=512, limit_per_host=0, keepalive_timeout=30.0),
            timeout=aiohttp.ClientTimeout(total=timeout, sock_connect=1.0),
            skip_auto_headers=("User-Agent",),
        )

    async def aclose(self) -> None:
        """Close the HTTP pool."""
        await self._http.close()

    async def _post(
        self, url: str, path: str, payload: dict[str, Any], trace: dict[str, str] | None
    ) -> tuple[int, dict[str, Any]]:
        """POST `payload` as JSON, signed; the status and the JSON object answered."""
        body = json.dumps(payload, separators=(",", ":")).encode()
        headers = {"Content-Type": "application/json", **(trace or {})}
        if self._secret is not None:
            headers.update(sign(self._secret, "POST", path.encode(), body))
        async with self._http.post(url, data=body, headers=headers) as response:
            return response.status, _json(await response.read())

    async def forward(self, routing_key: str, payload: dict[str, Any]) -> None:
        """Deliver a client frame to the owner of `routing_key`; raises `ForwardError`.

        The frame carries the moment this gateway gives up on it, so a shard that gets it
        later (its database was slow, say) does not run a request the client was told failed.
        """
        deadline = time.time() + self._timeout
        await self.call(routing_key, "/internal/v1/frames", {**payload, "deadline": deadline})

    async def call(self, routing_key: str, path: str, payload: dict[str, Any]) -> dict[str, Any]:
        """POST `payload` to `path` of the owner of `routing_key` and return its JSON answer;
        raises `ForwardError`."""
        deadline = time.monotonic() + self._timeout
        delay = 0.02
        # The current span (a chat request's `chat.receive`) goes on at the shard.
        headers = trace_headers()
        last_error = "no live shard"
        hint: str | None = None
        followed = False
        while True:
            # A shard that is not the owner names the shard holding the conversation, if any.
            owner = self._view.shards.get(hint) if hint else None
            if owner is None or owner.draining:
                owner = self._view.owner(routing_key)
            hint = None
            if owner is not None:
                try:
                    status, body = await self._post(
                        f"http://{owner.address}{path}", path, payload, headers
                    )
                except (aiohttp.ClientError, TimeoutError) as exc:
                    last_error = f"shard {owner.id} unreachable: {exc!r}"
                else:
                    if status == 200:
                        return body
                    code = str(body.get("code", "shard_error"))
                    if status == 409 and isinstance(body.get("owner"), str):
                        hint = body["owner"]
                        # Follow one redirect at once; a second one waits for the backoff.
                        if hint != owner.id and not followed:
                            followed = True
                            continue
                    if status == 404:
                        raise ForwardError(code, str(body.get("message") or "unknown agent"))
                    if status == 422:
                        # The shard refused the call itself: retrying would not change that.
                        raise ForwardError(code, str(body.get("message") or "invalid frame"))
                    if code == "overloaded":
                        # The owner sheds load; retrying at once would add to it. The client
                        # hears it and may retry later (docs/protocol.md#errors).
                        raise ForwardError(code, str(body.get("message") or "overloaded"))
                    last_error = f"shard {owner.id} answered {status} {code}"
            if time.monotonic() + delay > deadline:
                raise ForwardError("unavailable", last_error)
            log.debug("retrying forward: %s", last_error)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)
            followed = False
            try:
                await self._view.refresh()
            except Exception:
                log.debug("view refresh failed", exc_info=True)


def _json(raw: bytes) -> dict[str, Any]:
    try:
        data = json.loads(raw)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}
