"""Frames a conversation sends, written to its event log."""

from __future__ import annotations

import json
import time
from typing import Any

from redis.asyncio import Redis

from durachat.protocol import MessageType
from durachat.types import UIChunk, UIMessage
from durachat_infra.eventlog import (
    ALL,
    EVERY_BRANCH,
    MAIN,
    Kind,
    LogEntry,
    LogWriter,
    StreamState,
    all_but,
    only,
    read_range,
    read_state,
    state_fields,
)
from durachat_infra.keys import ConversationKeys


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


class Emitter:
    """Writes one conversation's outgoing frames to its event log, in order."""

    def __init__(
        self, writer: LogWriter, keys: ConversationKeys, redis: Redis, *, branch: str = MAIN
    ) -> None:
        self._writer = writer
        self.keys = keys
        self._redis = redis
        self.branch = branch
        """The branch this emitter writes for (`main` or a branch id): its entries are tagged
        with it, so only connections viewing that branch get them."""
        self._tag = "" if branch == MAIN else branch

    def _append(
        self,
        kind: Kind,
        frame: str,
        *,
        target: str = ALL,
        request: str = "",
        state: dict[str, str] | None = None,
        branch: str | None = None,
    ) -> None:
        self._writer.append(
            self.keys,
            kind,
            frame,
            target=target,
            request=request,
            state=None if state is None else state_fields(self.branch, state),
            branch=self._tag if branch is None else branch,
        )

    async def flush(self) -> None:
        """Wait until everything emitted so far is in the log."""
        await self._writer.flush()

    async def history(self) -> list[LogEntry]:
        """Every entry of the conversation's log (what recovery rebuilds a turn from)."""
        return await read_range(self._redis, self.keys)

    async def state(self) -> StreamState:
        """The conversation's stream state as stored."""
        return await read_state(self._redis, self.keys, self.branch)

    def frame(self, frame: dict[str, Any], *, target: str = ALL) -> None:
        """Send any frame."""
        self._append(Kind.FRAME, _dumps(frame), target=target)

    def messages(self, messages: list[UIMessage], *, exclude: str | None = None) -> None:
        """Broadcast the transcript (`cf_agent_chat_messages`)."""
        self.frame(
            {"type": MessageType.CHAT_MESSAGES.value, "messages": messages},
            target=all_but(exclude) if exclude else ALL,
        )

    def clear(self, *, exclude: str | None) -> None:
        """Tell other connections the chat was cleared, and reset the stream state. Clearing
        `main` clears the whole conversation, so connections on every branch are told."""
        self._append(
            Kind.FRAME,
            _dumps({"type": MessageType.CHAT_CLEAR.value}),
            target=all_but(exclude) if exclude else ALL,
            branch=EVERY_BRANCH if self.branch == MAIN else None,
            state={
                "status": "idle",
                "req": "",
                "start": "",
                "cont": "0",
                "terminal": "",
                "recovering": "",
            },
        )

    def pending(self, request_id: str) -> None:
        """A turn is accepted and will stream later."""
        self._append(
            Kind.CONTROL,
            _dumps({"op": "pending", "req": request_id}),
            request=request_id,
            # A new request clears the record of the last one recovery gave up on.
            state={
                "status": "pending",
                "req": request_id,
                "start": "",
                "cont": "0",
                "terminal": "",
            },
        )

    def idle(self, request_id: str) -> None:
        """No turn is accepted any more (the last one ended without streaming)."""
        self._append(
            Kind.CONTROL,
            _dumps({"op": "idle", "req": request_id}),
            request=request_id,
            state={"status": "idle"},
        )

    def stream_start(
        self, request_id: str, *, continuation: bool, base: tuple[str, int] | None = None
    ) -> None:
        """A request's stream begins; its chunks follow. `base` is, for a continuation, the
        id of the message it extends and that message's part count (for recovery)."""
        control: dict[str, Any] = {"op": "start", "req": request_id, "cont": continuation}
        if base is not None:
            control["base"], control["baseParts"] = base
        self._append(
            Kind.CONTROL,
            _dumps(control),
            request=request_id,
            state={
                "status": "streaming",
                "req": request_id,
                "start": "$id",
                "cont": "1" if continuation else "0",
                "terminal": "",
            },
        )

    def recovering(self, root_request_id: str, *, active: bool) -> None:
        """Tell every tab a turn is (or no longer is) being recovered
        (`cf_agent_chat_recovering`); remembered for tabs that connect meanwhile."""
        self._append(
            Kind.FRAME,
            _dumps(
                {
                    "type": MessageType.CHAT_RECOVERING.value,
                    "recovering": active,
                    "id": root_request_id,
                }
            ),
            state={
                "recovering": root_request_id if active else "",
                "recovering_at": str(int(time.time() * 1000)),
            },
        )

    def terminal_error(self, request_id: str, text: str, *, continuation: bool) -> None:
        """End a request that recovery gave up on with `text`, and record it so a client that
        reconnects later is told too."""
        frame: dict[str, Any] = {
            "body": text,
            "done": True,
            "error": True,
            "id": request_id,
            "type": MessageType.USE_CHAT_RESPONSE.value,
        }
        if continuation:
            frame["continuation"] = True
        self._append(
            Kind.TERMINAL,
            _dumps(frame),
            request=request_id,
            state={
                "status": "done",
                "terminal": _dumps({"req": request_id, "body": text}),
                "recovering": "",
            },
        )

    def chunk(self, request_id: str, seq: int, chunk: UIChunk, *, continuation: bool) -> None:
        """One chunk of a request's stream."""
        frame: dict[str, Any] = {
            "body": _dumps(chunk),
            "done": False,
            "id": request_id,
            "type": MessageType.USE_CHAT_RESPONSE.value,
            "seq": seq,
        }
        if continuation:
            frame["continuation"] = True
        self._append(Kind.CHUNK, _dumps(frame), request=request_id)

    def error(
        self, request_id: str, text: str, *, message_ids: list[str] | None, continuation: bool
    ) -> None:
        """The error frame of a failed request (before its terminal frame)."""
        frame: dict[str, Any] = {
            "body": text,
            "done": False,
            "error": True,
            "id": request_id,
            "type": MessageType.USE_CHAT_RESPONSE.value,
        }
        if message_ids is not None:
            frame["messageIds"] = message_ids
        if continuation:
            frame["continuation"] = True
        self._append(Kind.CHUNK, _dumps(frame), request=request_id)

    def terminal(
        self,
        request_id: str,
        *,
        outcome: str | None,
        message_ids: list[str] | None,
        continuation: bool,
        streamed: bool,
        target: str = ALL,
        change_state: bool = True,
    ) -> None:
        """The terminal `done` frame of a request; ends its stream (unless `change_state` is
        False: a frame that only settles one client)."""
        frame: dict[str, Any] = {
            "body": "",
            "done": True,
            "id": request_id,
            "type": MessageType.USE_CHAT_RESPONSE.value,
        }
        if message_ids is not None:
            frame["messageIds"] = message_ids
        if outcome is not None:
            frame["outcome"] = outcome
        if continuation:
            frame["continuation"] = True
        self._append(
            Kind.TERMINAL,
            _dumps(frame),
            request=request_id,
            target=target,
            state=({"status": "done" if streamed else "idle"} if change_state else None),
        )

    def view(
        self, branch: str, *, reason: str, connection_id: str | None = None, of: str | None = None
    ) -> None:
        """Move connections to another branch of the conversation (`main` or a branch id):
        `connection_id` alone (its request goes on there), or every connection viewing the
        branch `of` (this emitter's by default). Gateways apply it and tell each client
        (`durachat_branch_switched`)."""
        self._append(
            Kind.VIEW,
            _dumps({"branch": branch, "reason": reason}),
            target=ALL if connection_id is None else only(connection_id),
            branch=None if of is None else ("" if of == MAIN else of),
        )

    def to(self, connection_id: str, frame: dict[str, Any]) -> None:
        """Send a frame to one connection."""
        self.frame(frame, target=only(connection_id))
