"""Accumulating one assistant message from a UI message stream
(docs/protocol.md#what-the-server-does-to-a-replys-chunks).

Used to follow a stream someone else produces (an observer, a replay) and to rebuild an
interrupted turn from its stored chunks.
"""

from __future__ import annotations

import copy

from durachat.messages.builder import OpenBlocks, apply_chunk_to_parts
from durachat.messages.ids import new_assistant_id
from durachat.types import JSONDict, UIChunk, UIMessage, UIPart

DEFAULT_ERROR_TEXT = "An error occurred."
"""Error text used when an `error` chunk carries none (the AI SDK's own masked message)."""


def merged_metadata(current: JSONDict | None, update: object) -> JSONDict | None:
    """Return `current` shallow-merged with `update`, or `current` if `update` is no object.

    Args:
        current: The message's metadata so far.
        update: A chunk's `messageMetadata`.

    Returns:
        A new dict when `update` is a dict, else `current` unchanged.
    """
    if not isinstance(update, dict):
        return current
    return {**(current or {}), **update}


def chunk_error_text(chunk: UIChunk) -> str:
    """Return the error text of an `error` chunk, or a generic text if it has none."""
    text = chunk.get("errorText")
    return text if isinstance(text, str) else DEFAULT_ERROR_TEXT


class StreamAccumulator:
    """Builds one assistant UIMessage from the chunks of one stream.

    Message-level chunks are handled here: `start` adopts its `messageId` (except for a
    continuation, which extends an existing message) and merges `messageMetadata`; `finish` and
    `message-metadata` merge metadata; `error` records its text; `finish-step` changes nothing.
    Everything else goes through `apply_chunk_to_parts`, with block ids tracked on the side.
    """

    def __init__(
        self,
        message_id: str | None = None,
        *,
        continuation: bool = False,
        seed: UIMessage | None = None,
    ) -> None:
        """Start a message.

        Args:
            message_id: The message's id. Defaults to the seed's id, else a fresh assistant id;
                a `start` chunk's `messageId` replaces it unless `continuation`.
            continuation: The stream extends an existing assistant message (`merge_into` falls
                back to the last assistant message, `start` keeps the id).
            seed: A message whose parts and metadata the stream continues from. It is copied,
                never modified.
        """
        seed_id = seed.get("id") if seed is not None else None
        self._message_id: str = message_id or (
            seed_id if isinstance(seed_id, str) and seed_id else new_assistant_id()
        )
        self._continuation = continuation
        seed_parts = seed.get("parts") if seed is not None else None
        self._parts: list[UIPart] = (
            copy.deepcopy(seed_parts) if isinstance(seed_parts, list) else []
        )
        seed_metadata = seed.get("metadata") if seed is not None else None
        self._metadata: JSONDict | None = (
            copy.deepcopy(seed_metadata) if isinstance(seed_metadata, dict) else None
        )
        self._blocks = OpenBlocks()
        self._error_text: str | None = None

    @property
    def message_id(self) -> str:
        """The id the message is built under."""
        return self._message_id

    @property
    def continuation(self) -> bool:
        """Whether the stream continues an existing assistant message."""
        return self._continuation

    @property
    def parts(self) -> list[UIPart]:
        """The live parts list (do not modify; use `to_message` for a snapshot)."""
        return self._parts

    @property
    def metadata(self) -> JSONDict | None:
        """The merged message metadata, or None if no chunk or seed brought any."""
        return self._metadata

    @property
    def error_text(self) -> str | None:
        """The text of the last `error` chunk, if any."""
        return self._error_text

    def apply(self, chunk: UIChunk) -> None:
        """Apply one chunk to the message."""
        if apply_chunk_to_parts(self._parts, chunk, self._blocks):
            return
        chunk_type = chunk.get("type")
        if chunk_type == "start":
            message_id = chunk.get("messageId")
            if isinstance(message_id, str) and message_id and not self._continuation:
                self._message_id = message_id
            self._metadata = merged_metadata(self._metadata, chunk.get("messageMetadata"))
        elif chunk_type in ("finish", "message-metadata"):
            self._metadata = merged_metadata(self._metadata, chunk.get("messageMetadata"))
        elif chunk_type == "error":
            self._error_text = chunk_error_text(chunk)

    def to_message(self, message_id: str | None = None) -> UIMessage:
        """Snapshot the message.

        Args:
            message_id: Id to put on the snapshot instead of `message_id`.

        Returns:
            `{"id", "role": "assistant", "parts"[, "metadata"]}`, a deep copy.
        """
        message: UIMessage = {
            "id": message_id or self._message_id,
            "role": "assistant",
            "parts": copy.deepcopy(self._parts),
        }
        if self._metadata is not None:
            message["metadata"] = copy.deepcopy(self._metadata)
        return message

    def merge_into(self, messages: list[UIMessage]) -> list[UIMessage]:
        """Put a snapshot of the message into a transcript.

        The message replaces the one with the same id; failing that, a continuation replaces
        the last assistant message (keeping that message's id); otherwise it is appended.

        Args:
            messages: The transcript; not modified.

        Returns:
            A new list.
        """
        index = next(
            (i for i, message in enumerate(messages) if message.get("id") == self._message_id),
            -1,
        )
        if index < 0 and self._continuation:
            index = next(
                (
                    i
                    for i in range(len(messages) - 1, -1, -1)
                    if messages[i].get("role") == "assistant"
                ),
                -1,
            )
        merged = list(messages)
        if index < 0:
            merged.append(self.to_message())
        else:
            existing_id = messages[index].get("id")
            merged[index] = self.to_message(existing_id if isinstance(existing_id, str) else None)
        return merged
