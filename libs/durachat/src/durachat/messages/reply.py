"""The server's per-chunk handling of a model reply before it is stored and sent
(docs/protocol.md#what-the-server-does-to-a-replys-chunks).

For every chunk the model produces, `ReplyAssembler.process` decides what goes on the wire
(possibly rewritten, possibly nothing) and updates the server's copy of the assistant message,
which is persisted when the turn ends.
"""

from __future__ import annotations

from durachat.messages.accumulator import chunk_error_text, merged_metadata
from durachat.messages.builder import (
    OpenBlocks,
    apply_chunk_to_parts,
    find_tool_part,
    is_replay_chunk,
)
from durachat.types import UIChunk, UIMessage, UIPart


class ReplyAssembler:
    """Turns a model's chunk stream into wire chunks plus the server copy of the message.

    Rules, in order, for each chunk:

    * Continuation merge: the first `text-start` is dropped when the message's last text part
      is still `streaming` (the reply resumes that block); the first `reasoning-start` is sent
      but not applied when the last text/reasoning part is still `streaming`.
    * Replayed tool chunks (`is_replay_chunk`) are dropped.
    * The chunk is applied to the server copy. `start` on a new turn adopts a provider
      `messageId`; `start`, `finish` and `message-metadata` merge `messageMetadata`.
    * `error` is recorded in `error_text` and not sent; every later chunk is ignored, since
      the turn ends there.
    * Rewrites: a new turn's `start` without a usable `messageId` gets the server's message id
      stamped in; a continuation's `start` loses its `messageId` (the client must extend its
      last assistant message); a `finish` with `finishReason` is sent as
      `{"type": "finish", "messageMetadata": {...original..., "finishReason": ...}}`.
    * Any other chunk, including types the builder does not know, is sent unchanged.
    """

    def __init__(self, message: UIMessage, *, continuation: bool) -> None:
        """Start assembling a reply.

        Args:
            message: The server copy to build into, updated in place: a new
                `{"id": <server id>, "role": "assistant", "parts": []}`, or for a continuation
                a deep copy of the last assistant message.
            continuation: The reply extends `message` rather than starting a new one.
        """
        if not isinstance(message.get("parts"), list):
            message["parts"] = []
        self._message = message
        self._continuation = continuation
        self._blocks = OpenBlocks()
        self._text_start_seen = False
        self._reasoning_start_seen = False
        self._approval_requested = False
        self._error_text: str | None = None

    @property
    def message(self) -> UIMessage:
        """The server copy of the assistant message (the live object)."""
        return self._message

    @property
    def continuation(self) -> bool:
        """Whether the reply extends an existing assistant message."""
        return self._continuation

    @property
    def has_parts(self) -> bool:
        """Whether the message has at least one part (only then is it persisted)."""
        return bool(self._parts)

    @property
    def approval_requested(self) -> bool:
        """True once a tool approval was requested, so the caller can persist early."""
        return self._approval_requested

    @property
    def error_text(self) -> str | None:
        """The text of the reply's `error` chunk, if one arrived."""
        return self._error_text

    @property
    def _parts(self) -> list[UIPart]:
        parts: list[UIPart] = self._message["parts"]
        return parts

    def process(self, chunk: UIChunk) -> UIChunk | None:
        """Handle one chunk of the reply.

        Args:
            chunk: The decoded chunk as the model produced it; not modified.

        Returns:
            The chunk to store and send (the same object, or a rewritten copy), or None to
            drop it.
        """
        if self._error_text is not None:
            return None
        chunk_type = chunk.get("type")
        apply = True
        if self._continuation and chunk_type == "text-start" and not self._text_start_seen:
            self._text_start_seen = True
            if self._resume_text_block(chunk):
                return None
        elif (
            self._continuation
            and chunk_type == "reasoning-start"
            and not self._reasoning_start_seen
        ):
            self._reasoning_start_seen = True
            apply = not self._resume_reasoning_block(chunk)
        if is_replay_chunk(self._parts, chunk):
            return None
        if apply and not apply_chunk_to_parts(self._parts, chunk, self._blocks):
            if chunk_type == "error":
                self._error_text = chunk_error_text(chunk)
                return None
            self._apply_message_chunk(chunk)
        if chunk_type == "tool-approval-request":
            part = find_tool_part(self._parts, chunk.get("toolCallId"))
            if part is not None and part.get("state") == "approval-requested":
                self._approval_requested = True
        return self._rewrite(chunk)

    def _last_block(self, kinds: tuple[str, ...]) -> UIPart | None:
        for part in reversed(self._parts):
            if part.get("type") in kinds:
                return part
        return None

    def _resume_text_block(self, chunk: UIChunk) -> bool:
        part = self._last_block(("text",))
        if part is None or part.get("state") != "streaming":
            return False
        self._blocks.bind("text", chunk.get("id"), part)
        return True

    def _resume_reasoning_block(self, chunk: UIChunk) -> bool:
        last = self._last_block(("text", "reasoning"))
        if last is None or last.get("state") != "streaming":
            return False
        # Clients need the start to open the block; the server keeps filling its old one.
        reasoning = self._last_block(("reasoning",))
        if reasoning is not None:
            self._blocks.bind("reasoning", chunk.get("id"), reasoning)
        return True

    def _apply_message_chunk(self, chunk: UIChunk) -> None:
        chunk_type = chunk.get("type")
        if chunk_type == "start" and not self._continuation:
            provider_id = chunk.get("messageId")
            if isinstance(provider_id, str) and provider_id:
                self._message["id"] = provider_id
        if chunk_type in ("start", "finish", "message-metadata"):
            metadata = merged_metadata(self._message.get("metadata"), chunk.get("messageMetadata"))
            if metadata is not None:
                self._message["metadata"] = metadata

    def _rewrite(self, chunk: UIChunk) -> UIChunk:
        chunk_type = chunk.get("type")
        if chunk_type == "start":
            if self._continuation:
                if "messageId" not in chunk:
                    return chunk
                return {key: value for key, value in chunk.items() if key != "messageId"}
            provider_id = chunk.get("messageId")
            if isinstance(provider_id, str) and provider_id:
                return chunk
            return {**chunk, "messageId": self._message["id"]}
        if chunk_type == "finish" and "finishReason" in chunk:
            original = chunk.get("messageMetadata")
            rewritten = {key: value for key, value in chunk.items() if key != "finishReason"}
            rewritten["messageMetadata"] = {
                **(original if isinstance(original, dict) else {}),
                "finishReason": chunk["finishReason"],
            }
            return rewritten
        return chunk
