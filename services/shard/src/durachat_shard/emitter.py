"""Frames a conversation sends, written to its event log.

The frames are built by `durachat.protocol` (docs/protocol.md) and the stream-state changes by
`StreamState` (docs/architecture.md#the-event-log); this module decides which entry carries
them, for whom, and on which branch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from durachat.protocol import (
    MAIN_BRANCH,
    MessageType,
    chat_clear_frame,
    chat_messages_frame,
    encode_json,
)
from durachat.protocol.server_frames import (
    chat_recovering_frame,
    chunk_frame,
    done_frame,
    gave_up_frame,
    reply_error_frame,
)
from durachat.types import UIChunk, UIMessage
from durachat_infra.eventlog import (
    ALL,
    EVERY_BRANCH,
    Kind,
    LogEntry,
    LogWriter,
    StateChange,
    StreamState,
    all_but,
    branch_tag,
    only,
    read_range,
    read_state,
    state_fields,
)
from durachat_infra.keys import ConversationKeys
from durachat_infra.redis_client import RedisClient


class Emitter:
    """Writes one conversation's outgoing frames to its event log, in order."""

    def __init__(
        self,
        writer: LogWriter,
        keys: ConversationKeys,
        redis: RedisClient,
        *,
        branch: str = MAIN_BRANCH,
    ) -> None:
        self._writer = writer
        self.keys = keys
        self._redis = redis
        self.branch = branch
        """The branch this emitter writes for (`main` or a branch id): its entries are tagged
        with it, so only connections viewing that branch get them."""
        self._tag = branch_tag(branch)

    def _append(
        self,
        kind: Kind,
        frame: str,
        *,
        target: str = ALL,
        request: str = "",
        state: StateChange | None = None,
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

    def frame(self, frame: Mapping[str, Any], *, target: str = ALL) -> None:
        """Send any frame. A transcript (`cf_agent_chat_messages`) goes in an entry of its own
        kind, which gateways look for when they replay a stream."""
        kind = Kind.TRANSCRIPT if frame.get("type") == MessageType.CHAT_MESSAGES else Kind.FRAME
        self._append(kind, encode_json(frame), target=target)

    def messages(self, messages: list[UIMessage], *, exclude: str | None = None) -> None:
        """Broadcast the transcript (`cf_agent_chat_messages`)."""
        self._append(
            Kind.TRANSCRIPT,
            encode_json(chat_messages_frame(messages)),
            target=all_but(exclude) if exclude else ALL,
        )

    def clear(self, *, exclude: str | None) -> None:
        """Tell other connections the chat was cleared, and reset the stream state. Clearing
        `main` clears the whole conversation, so connections on every branch are told."""
        self._append(
            Kind.FRAME,
            encode_json(chat_clear_frame()),
            target=all_but(exclude) if exclude else ALL,
            branch=EVERY_BRANCH if self.branch == MAIN_BRANCH else None,
            state=StreamState.change_cleared(),
        )

    def pending(self, request_id: str) -> None:
        """A turn is accepted and will stream later."""
        self._append(
            Kind.CONTROL,
            encode_json({"op": "pending", "req": request_id}),
            request=request_id,
            state=StreamState.change_pending(request_id),
        )

    def idle(self, request_id: str) -> None:
        """No turn is accepted any more (the last one ended without streaming)."""
        self._append(
            Kind.CONTROL,
            encode_json({"op": "idle", "req": request_id}),
            request=request_id,
            state=StreamState.change_idle(),
        )

    def stream_start(
        self,
        request_id: str,
        *,
        continuation: bool,
        base: tuple[str, int] | None = None,
        traceparent: str | None = None,
    ) -> None:
        """A request's stream begins; its chunks follow. `base` is, for a continuation, the
        id of the message it extends and that message's part count (for recovery);
        `traceparent` is the turn's span, for gateways' delivery spans and for recovery."""
        control: dict[str, Any] = {"op": "start", "req": request_id, "cont": continuation}
        if base is not None:
            control["base"], control["baseParts"] = base
        if traceparent is not None:
            control["tp"] = traceparent
        self._append(
            Kind.CONTROL,
            encode_json(control),
            request=request_id,
            state=StreamState.change_streaming(request_id, continuation=continuation),
        )

    def recovering(self, root_request_id: str, *, active: bool) -> None:
        """Tell every tab a turn is (or no longer is) being recovered
        (`cf_agent_chat_recovering`); remembered for tabs that connect meanwhile."""
        self._append(
            Kind.FRAME,
            encode_json(chat_recovering_frame(root_request_id, active=active)),
            state=StreamState.change_recovering(root_request_id, active=active),
        )

    def terminal_error(self, request_id: str, text: str, *, continuation: bool) -> None:
        """End a request that recovery gave up on with `text`, and record it so a client that
        reconnects later is told too."""
        self._append(
            Kind.TERMINAL,
            encode_json(gave_up_frame(request_id, text, continuation=continuation)),
            request=request_id,
            state=StreamState.change_gave_up(request_id, text),
        )

    def chunk(self, request_id: str, seq: int, chunk: UIChunk, *, continuation: bool) -> None:
        """One chunk of a request's stream."""
        frame = chunk_frame(request_id, seq, encode_json(chunk), continuation=continuation)
        self._append(Kind.CHUNK, encode_json(frame), request=request_id)

    def error(
        self, request_id: str, text: str, *, message_ids: list[str] | None, continuation: bool
    ) -> None:
        """The error frame of a failed request (before its terminal frame)."""
        frame = reply_error_frame(
            request_id, text, message_ids=message_ids, continuation=continuation
        )
        self._append(Kind.CHUNK, encode_json(frame), request=request_id)

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
        frame = done_frame(
            request_id,
            outcome=outcome,
            message_ids=message_ids,
            continuation=continuation,
        )
        self._append(
            Kind.TERMINAL,
            encode_json(frame),
            request=request_id,
            target=target,
            state=StreamState.change_ended(streamed=streamed) if change_state else None,
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
            encode_json({"branch": branch, "reason": reason}),
            target=ALL if connection_id is None else only(connection_id),
            branch=None if of is None else branch_tag(of),
        )

    def to(self, connection_id: str, frame: Mapping[str, Any]) -> None:
        """Send a frame to one connection."""
        self.frame(frame, target=only(connection_id))
