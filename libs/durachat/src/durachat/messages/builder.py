"""Building the parts of a UIMessage from UI message stream chunks
(docs/protocol.md#how-chunks-become-parts).

The same rules serve the server's reply loop, the observer accumulator and the rebuild of an
interrupted turn from stored chunks, so the three always agree on what a stream produced.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Final, TypeAlias

from durachat.types import JSONDict, UIChunk, UIPart

TERMINAL_TOOL_STATES: Final = frozenset({"output-available", "output-error", "output-denied"})
"""Tool part states that carry a final result."""

_SETTLED_TOOL_STATES: Final = TERMINAL_TOOL_STATES | {"approval-responded"}


class OpenBlocks:
    """Side index from the ids of open text/reasoning blocks to the parts they started.

    The AI SDK names every text and reasoning block (`text-start` `{id}`), but a stored part has
    no field for that id. Keeping the link here, outside the parts, lets a delta reach the block
    it names even when blocks interleave, without adding anything that would be persisted.
    Without an index (or for an unknown id) a delta goes to the last part of its kind, as in the
    reference.
    """

    __slots__ = ("_parts",)

    def __init__(self) -> None:
        """Create an empty index."""
        self._parts: dict[tuple[str, str], UIPart] = {}

    def bind(self, kind: str, block_id: object, part: UIPart) -> None:
        """Link block `block_id` of `kind` (`"text"` or `"reasoning"`) to `part`."""
        if isinstance(block_id, str):
            self._parts[(kind, block_id)] = part

    def find(self, parts: list[UIPart], kind: str, block_id: object) -> UIPart | None:
        """Return the part linked to the block, if it is still one of `parts`."""
        if not isinstance(block_id, str):
            return None
        part = self._parts.get((kind, block_id))
        if part is None:
            return None
        # The parts list is not ours alone (reset-step, callers); a stale link must not win.
        if any(candidate is part for candidate in reversed(parts)):
            return part
        del self._parts[(kind, block_id)]
        return None

    def release(self, kind: str, block_id: object) -> None:
        """Forget the block; a closed id may be reused by a later block."""
        if isinstance(block_id, str):
            self._parts.pop((kind, block_id), None)

    def clear(self) -> None:
        """Forget every block."""
        self._parts.clear()


def normalize_tool_input(raw: object) -> JSONDict:
    """Coerce a tool call's input to a JSON object.

    Providers reject a tool call whose input is not an object, and a bad input in the stored
    transcript would break every later turn, so every write and load goes through this.

    Args:
        raw: The input as streamed or stored.

    Returns:
        `raw` itself if it is a dict; the parsed object if `raw` is a string holding a JSON
        object; otherwise a new empty dict.
    """
    if isinstance(raw, dict):
        return raw
    if isinstance(raw, str) and raw.strip().startswith("{"):
        try:
            parsed = json.loads(raw)
        except ValueError:
            return {}
        if isinstance(parsed, dict):
            return parsed
    return {}


def find_tool_part(parts: list[UIPart], tool_call_id: object) -> UIPart | None:
    """Return the last part whose `toolCallId` is `tool_call_id` (None for an empty id)."""
    if not isinstance(tool_call_id, str) or not tool_call_id:
        return None
    for part in reversed(parts):
        if part.get("toolCallId") == tool_call_id:
            return part
    return None


_REPLAY_CANDIDATES: Final = frozenset(
    {
        "tool-input-start",
        "tool-input-delta",
        "tool-input-available",
        "tool-output-denied",
        "tool-approval-request",
    }
)


def is_replay_chunk(parts: list[UIPart], chunk: UIChunk) -> bool:
    """Tell whether `chunk` replays a tool call the message has already moved past.

    Some providers re-emit earlier tool calls in a continuation. Forwarding those chunks would
    make a client's AI SDK regress a finished tool part, so the server drops them.

    Args:
        parts: The parts built so far.
        chunk: The incoming chunk.

    Returns:
        True for `tool-input-start` of a known call; `tool-input-delta` / `tool-input-available`
        of a call no longer `input-streaming`; `tool-output-denied` / `tool-approval-request` of
        a call that is settled (`output-*`) or already `approval-responded`.
    """
    chunk_type = chunk.get("type")
    if chunk_type not in _REPLAY_CANDIDATES:
        return False
    part = find_tool_part(parts, chunk.get("toolCallId"))
    if part is None:
        return False
    state = part.get("state")
    if chunk_type == "tool-input-start":
        return True
    if chunk_type in ("tool-input-delta", "tool-input-available"):
        return state != "input-streaming"
    return state in _SETTLED_TOOL_STATES


def apply_chunk_to_parts(
    parts: list[UIPart], chunk: UIChunk, blocks: OpenBlocks | None = None
) -> bool:
    """Apply one stream chunk to a message's parts, in place.

    Args:
        parts: The parts to update.
        chunk: The chunk, a decoded UI message stream event.
        blocks: Optional index of open text/reasoning block ids; when given, deltas and ends
            go to the block their `id` names instead of the last part of their kind.

    Returns:
        Whether the chunk type builds parts (even if this chunk changed nothing, e.g. a
        transient data part or an output for an unknown tool call). Message-level chunks
        (`start`, `finish`, `finish-step`, `message-metadata`, `error`, `abort`) and the AI SDK
        v7 types `custom`, `reasoning-file` and `tool-approval-response` return False.
        `reset-step` is applied: it drops the parts of the current step.
    """
    chunk_type = chunk.get("type")
    if not isinstance(chunk_type, str):
        return False
    handler = _HANDLERS.get(chunk_type)
    if handler is not None:
        handler(parts, chunk, blocks)
        return True
    if chunk_type.startswith("data-"):
        _apply_data(parts, chunk)
        return True
    return False


def _last_part_of_type(parts: list[UIPart], part_type: str) -> UIPart | None:
    for part in reversed(parts):
        if part.get("type") == part_type:
            return part
    return None


def _block_part(
    parts: list[UIPart], chunk: UIChunk, blocks: OpenBlocks | None, kind: str
) -> UIPart | None:
    if blocks is not None:
        part = blocks.find(parts, kind, chunk.get("id"))
        if part is not None:
            return part
    return _last_part_of_type(parts, kind)


def _merge_provider_metadata(part: UIPart, chunk: UIChunk) -> None:
    # Anthropic sends the thinking signature on later chunks; keep what earlier ones brought.
    metadata = chunk.get("providerMetadata")
    if isinstance(metadata, dict):
        existing = part.get("providerMetadata")
        part["providerMetadata"] = {**(existing if isinstance(existing, dict) else {}), **metadata}


def _new_block(kind: str, text: str, chunk: UIChunk) -> UIPart:
    part: UIPart = {"type": kind, "text": text, "state": "streaming"}
    # Reasoning metadata can be all a block carries (redacted thinking), so it is kept.
    if kind == "reasoning" and chunk.get("providerMetadata") is not None:
        part["providerMetadata"] = chunk["providerMetadata"]
    return part


def _start_block(parts: list[UIPart], chunk: UIChunk, blocks: OpenBlocks | None, kind: str) -> None:
    part = _new_block(kind, "", chunk)
    parts.append(part)
    if blocks is not None:
        blocks.bind(kind, chunk.get("id"), part)


def _block_delta(parts: list[UIPart], chunk: UIChunk, blocks: OpenBlocks | None, kind: str) -> None:
    delta = chunk.get("delta")
    text = delta if isinstance(delta, str) else ""
    part = _block_part(parts, chunk, blocks, kind)
    if part is None:
        # A delta without its start: the stream was resumed mid-block.
        part = _new_block(kind, text, chunk)
        parts.append(part)
        if blocks is not None:
            blocks.bind(kind, chunk.get("id"), part)
        return
    current = part.get("text")
    part["text"] = (current if isinstance(current, str) else "") + text
    if kind == "reasoning":
        _merge_provider_metadata(part, chunk)


def _end_block(parts: list[UIPart], chunk: UIChunk, blocks: OpenBlocks | None, kind: str) -> None:
    part = _block_part(parts, chunk, blocks, kind)
    if blocks is not None:
        blocks.release(kind, chunk.get("id"))
    if part is None or "state" not in part:
        return
    part["state"] = "done"
    if kind == "reasoning":
        _merge_provider_metadata(part, chunk)


def _optional_fields(chunk: UIChunk, names: tuple[str, ...]) -> JSONDict:
    return {name: chunk[name] for name in names if chunk.get(name) is not None}


def _tool_call_fields(chunk: UIChunk) -> JSONDict:
    fields = _optional_fields(chunk, ("providerExecuted", "title"))
    if chunk.get("providerMetadata") is not None:
        fields["callProviderMetadata"] = chunk["providerMetadata"]
    return fields


def _new_tool_part(chunk: UIChunk, state: str) -> UIPart:
    return {
        "type": f"tool-{chunk.get('toolName')}",
        "toolCallId": chunk.get("toolCallId"),
        "toolName": chunk.get("toolName"),
        "state": state,
    }


def _tool_input_start(parts: list[UIPart], chunk: UIChunk, _blocks: OpenBlocks | None) -> None:
    if find_tool_part(parts, chunk.get("toolCallId")) is not None:
        return
    # No "input" key: the reference's `input: undefined` vanishes when serialised.
    parts.append({**_new_tool_part(chunk, "input-streaming"), **_tool_call_fields(chunk)})


def _tool_input_delta(parts: list[UIPart], chunk: UIChunk, _blocks: OpenBlocks | None) -> None:
    part = find_tool_part(parts, chunk.get("toolCallId"))
    if part is None or part.get("state") != "input-streaming":
        return
    # AI SDK deltas carry `inputTextDelta`, not `input`, so the input usually stays unset.
    if "input" in chunk:
        part["input"] = chunk["input"]
    else:
        part.pop("input", None)


def _tool_input_available(parts: list[UIPart], chunk: UIChunk, _blocks: OpenBlocks | None) -> None:
    part = find_tool_part(parts, chunk.get("toolCallId"))
    if part is None:
        parts.append(
            {
                **_new_tool_part(chunk, "input-available"),
                "input": normalize_tool_input(chunk.get("input")),
                **_tool_call_fields(chunk),
            }
        )
    elif part.get("state") == "input-streaming":
        part["state"] = "input-available"
        part["input"] = normalize_tool_input(chunk.get("input"))
        part.update(_tool_call_fields(chunk))


def _tool_input_error(parts: list[UIPart], chunk: UIChunk, _blocks: OpenBlocks | None) -> None:
    fields = _tool_call_fields(chunk)
    fields.pop("title", None)
    part = find_tool_part(parts, chunk.get("toolCallId"))
    if part is None:
        parts.append(
            {
                **_new_tool_part(chunk, "output-error"),
                "input": normalize_tool_input(chunk.get("input")),
                "errorText": chunk.get("errorText"),
                **fields,
            }
        )
    elif part.get("state") not in TERMINAL_TOOL_STATES:
        part["state"] = "output-error"
        part["errorText"] = chunk.get("errorText")
        part["input"] = normalize_tool_input(chunk.get("input"))
        part.update(fields)


def _tool_approval_request(parts: list[UIPart], chunk: UIChunk, _blocks: OpenBlocks | None) -> None:
    part = find_tool_part(parts, chunk.get("toolCallId"))
    if part is None or part.get("state") in _SETTLED_TOOL_STATES:
        return
    approval: JSONDict = {"id": chunk.get("approvalId")}
    if "approvalDescriptor" in chunk:
        approval["descriptor"] = chunk["approvalDescriptor"]
    # Same fields the AI SDK v7 client records, so both copies of the part agree.
    if chunk.get("isAutomatic") is True:
        approval["isAutomatic"] = True
    if chunk.get("signature") is not None:
        approval["signature"] = chunk["signature"]
    part["state"] = "approval-requested"
    part["approval"] = approval


def _tool_output_denied(parts: list[UIPart], chunk: UIChunk, _blocks: OpenBlocks | None) -> None:
    part = find_tool_part(parts, chunk.get("toolCallId"))
    if part is not None and part.get("state") not in _SETTLED_TOOL_STATES:
        part["state"] = "output-denied"


def _tool_output_available(parts: list[UIPart], chunk: UIChunk, _blocks: OpenBlocks | None) -> None:
    part = find_tool_part(parts, chunk.get("toolCallId"))
    if part is None:
        return
    part["state"] = "output-available"
    part["output"] = chunk.get("output")
    if chunk.get("preliminary"):
        part["preliminary"] = True
    else:
        # The final result replaces the preliminary ones, as on the client.
        part.pop("preliminary", None)


def _tool_output_error(parts: list[UIPart], chunk: UIChunk, _blocks: OpenBlocks | None) -> None:
    part = find_tool_part(parts, chunk.get("toolCallId"))
    if part is not None:
        part["state"] = "output-error"
        part["errorText"] = chunk.get("errorText")


def _start_step(parts: list[UIPart], _chunk: UIChunk, _blocks: OpenBlocks | None) -> None:
    parts.append({"type": "step-start"})


def _reset_step(parts: list[UIPart], _chunk: UIChunk, blocks: OpenBlocks | None) -> None:
    # Same as the AI SDK client: a retried step withdraws everything after its step-start
    # (everything, when there is none), so the stored message matches what clients show.
    start = len(parts) - 1
    while start >= 0 and parts[start].get("type") != "step-start":
        start -= 1
    del parts[start + 1 :]
    if blocks is not None:
        blocks.clear()


def _apply_data(parts: list[UIPart], chunk: UIChunk) -> None:
    if chunk.get("transient"):
        return
    data_id = chunk.get("id")
    if data_id is not None:
        for existing in reversed(parts):
            if existing.get("type") == chunk["type"] and existing.get("id") == data_id:
                existing["data"] = chunk.get("data")
                return
    part: UIPart = {"type": chunk["type"]}
    if data_id is not None:
        part["id"] = data_id
    if "data" in chunk:
        part["data"] = chunk["data"]
    parts.append(part)


def _file(parts: list[UIPart], chunk: UIChunk, _blocks: OpenBlocks | None) -> None:
    parts.append({"type": "file", "mediaType": chunk.get("mediaType"), "url": chunk.get("url")})


def _source_url(parts: list[UIPart], chunk: UIChunk, _blocks: OpenBlocks | None) -> None:
    parts.append(
        {
            "type": "source-url",
            "sourceId": chunk.get("sourceId"),
            "url": chunk.get("url"),
            **_optional_fields(chunk, ("title", "providerMetadata")),
        }
    )


def _source_document(parts: list[UIPart], chunk: UIChunk, _blocks: OpenBlocks | None) -> None:
    parts.append(
        {
            "type": "source-document",
            "sourceId": chunk.get("sourceId"),
            "mediaType": chunk.get("mediaType"),
            "title": chunk.get("title"),
            **_optional_fields(chunk, ("filename", "providerMetadata")),
        }
    )


_Handler: TypeAlias = Callable[[list[UIPart], UIChunk, OpenBlocks | None], None]


def _for_kind(
    step: Callable[[list[UIPart], UIChunk, OpenBlocks | None, str], None], kind: str
) -> _Handler:
    def handler(parts: list[UIPart], chunk: UIChunk, blocks: OpenBlocks | None) -> None:
        step(parts, chunk, blocks, kind)

    return handler


_HANDLERS: Final[dict[str, _Handler]] = {
    "text-start": _for_kind(_start_block, "text"),
    "text-delta": _for_kind(_block_delta, "text"),
    "text-end": _for_kind(_end_block, "text"),
    "reasoning-start": _for_kind(_start_block, "reasoning"),
    "reasoning-delta": _for_kind(_block_delta, "reasoning"),
    "reasoning-end": _for_kind(_end_block, "reasoning"),
    "file": _file,
    "source-url": _source_url,
    "source-document": _source_document,
    "tool-input-start": _tool_input_start,
    "tool-input-delta": _tool_input_delta,
    "tool-input-available": _tool_input_available,
    "tool-input-error": _tool_input_error,
    "tool-approval-request": _tool_approval_request,
    "tool-output-denied": _tool_output_denied,
    "tool-output-available": _tool_output_available,
    "tool-output-error": _tool_output_error,
    "start-step": _start_step,
    "step-start": _start_step,
    "reset-step": _reset_step,
}


def tool_part_name(part: UIPart) -> str | None:
    """The tool name of a `tool-<name>` or `dynamic-tool` part (None for other parts)."""
    part_type = part.get("type")
    if part_type == "dynamic-tool":
        name = part.get("toolName")
        return name if isinstance(name, str) else None
    if isinstance(part_type, str) and part_type.startswith("tool-"):
        return part_type.removeprefix("tool-")
    return None
