"""Forwarding client frames to the conversation's owner shard, following redirects."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Final

import httpx

from durachat.protocol import MessageType
from durachat_gateway.telemetry import trace_headers
from durachat_infra.cluster import ClusterView

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
    """

    def __init__(
        self, view: ClusterView, *, timeout: float, auth: httpx.Auth | None = None
    ) -> None:
        """`auth` signs the calls (the cluster secret, docs/security.md#inside-the-cluster)."""
        self._view = view
        self._timeout = timeout
        self._http = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout, connect=1.0),
            limits=httpx.Limits(max_connections=512, max_keepalive_connections=128),
            auth=auth,
        )

    async def aclose(self) -> None:
        """Close the HTTP pool."""
        await self._http.aclose()

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
                    response = await self._http.post(
                        f"http://{owner.address}{path}", json=payload, headers=headers
                    )
                except httpx.HTTPError as exc:
                    last_error = f"shard {owner.id} unreachable: {exc!r}"
                else:
                    body = _json(response)
                    if response.status_code == 200:
                        return body
                    code = str(body.get("code", "shard_error"))
                    if response.status_code == 409 and isinstance(body.get("owner"), str):
                        hint = body["owner"]
                        # Follow one redirect at once; a second one waits for the backoff.
                        if hint != owner.id and not followed:
                            followed = True
                            continue
                    if response.status_code == 404:
                        raise ForwardError(code, str(body.get("message") or "unknown agent"))
                    if response.status_code == 422:
                        # The shard refused the call itself: retrying would not change that.
                        raise ForwardError(code, str(body.get("message") or "invalid frame"))
                    last_error = f"shard {owner.id} answered {response.status_code} {code}"
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


def _json(response: httpx.Response) -> dict[str, Any]:
    try:
        data = response.json()
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}
