"""Frames a conversation sends, written to its event log."""

from __future__ import annotations

import json
from typing import Any

from durachat.protocol import MessageType
from durachat.types import UIChunk, UIMessage
from durachat_infra.eventlog import ALL, Kind, LogWriter, all_but, only
from durachat_infra.keys import ConversationKeys


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


class Emitter:
    """Writes one conversation's outgoing frames to its event log, in order."""

    def __init__(self, writer: LogWriter, keys: ConversationKeys) -> None:
        self._writer = writer
        self.keys = keys

    def frame(self, frame: dict[str, Any], *, target: str = ALL) -> None:
        """Send any frame."""
        self._writer.append(self.keys, Kind.FRAME, _dumps(frame), target=target)

    def messages(self, messages: list[UIMessage], *, exclude: str | None = None) -> None:
        """Broadcast the transcript (`cf_agent_chat_messages`)."""
        self.frame(
            {"type": MessageType.CHAT_MESSAGES.value, "messages": messages},
            target=all_but(exclude) if exclude else ALL,
        )

    def clear(self, *, exclude: str | None) -> None:
        """Tell other connections the chat was cleared, and reset the stream state."""
        self._writer.append(
            self.keys,
            Kind.FRAME,
            _dumps({"type": MessageType.CHAT_CLEAR.value}),
            target=all_but(exclude) if exclude else ALL,
            state={"status": "idle", "req": "", "start": "", "cont": "0"},
        )

    def pending(self, request_id: str) -> None:
        """A turn is accepted and will stream later."""
        self._writer.append(
            self.keys,
            Kind.CONTROL,
            _dumps({"op": "pending", "req": request_id}),
            request=request_id,
            state={"status": "pending", "req": request_id, "start": "", "cont": "0"},
        )

    def idle(self, request_id: str) -> None:
        """No turn is accepted any more (the last one ended without streaming)."""
        self._writer.append(
            self.keys,
            Kind.CONTROL,
            _dumps({"op": "idle", "req": request_id}),
            request=request_id,
            state={"status": "idle"},
        )

    def stream_start(self, request_id: str, *, continuation: bool) -> None:
        """A request's stream begins; its chunks follow."""
        self._writer.append(
            self.keys,
            Kind.CONTROL,
            _dumps({"op": "start", "req": request_id, "cont": continuation}),
            request=request_id,
            state={
                "status": "streaming",
                "req": request_id,
                "start": "$id",
                "cont": "1" if continuation else "0",
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
        self._writer.append(self.keys, Kind.CHUNK, _dumps(frame), request=request_id)

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
        self._writer.append(self.keys, Kind.CHUNK, _dumps(frame), request=request_id)

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
        self._writer.append(
            self.keys,
            Kind.TERMINAL,
            _dumps(frame),
            request=request_id,
            target=target,
            state=({"status": "done" if streamed else "idle"} if change_state else None),
        )

    def to(self, connection_id: str, frame: dict[str, Any]) -> None:
        """Send a frame to one connection."""
        self.frame(frame, target=only(connection_id))
