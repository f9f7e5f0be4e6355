"""The shapes a server accepts from clients, as pydantic models (docs/security.md#bad-input).

Two layers, each checked once where the data is first decoded:

* `check_client_frame(frame)`: a client frame's own fields (the gateway, on every frame it
  parses: a chat request has a non-empty `id` and an `init.body` string, a tool result a
  `toolCallId`, ...);
* `check_messages(messages)`: the AI SDK `UIMessage`s a chat request or a
  `cf_agent_chat_messages` carries (the shard, which decodes the request's body): an `id`, a
  `role` of `user`, `assistant` or `system` (system messages only those the server stored:
  the shard checks), and `parts` that
  are objects of a type the AI SDK defines, with fields of the right types.

Part types the AI SDK defines and the server does not interpret (`file`, `source-url`,
`source-document`, `step-start`, `data-*`, `dynamic-tool`, `tool-*`, `reasoning`) pass with
their required fields checked; any other type is refused. Fields beyond those checked are kept
as sent (`providerMetadata`, `callProviderMetadata`, ...). The shapes only check: callers keep
the plain dicts they parsed.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal, NotRequired, TypeAlias

from pydantic import (
    ConfigDict,
    Discriminator,
    Field,
    StrictBool,
    StrictStr,
    Tag,
    TypeAdapter,
    ValidationError,
    with_config,
)

# pydantic reads TypedDicts from typing_extensions before Python 3.12 (a pydantic dependency).
from typing_extensions import TypedDict

from durachat.protocol.frames import MessageType

ToolState: TypeAlias = Literal[
    "input-streaming",
    "input-available",
    "approval-requested",
    "approval-responded",
    "output-available",
    "output-error",
    "output-denied",
]
"""The states of a tool part (AI SDK 5 and later)."""

NonEmpty = Annotated[StrictStr, Field(min_length=1)]

# Shapes are TypedDicts checked by pydantic: the dicts stay as parsed, and a check costs about
# half of what building model instances would (a 50-message request: ~60 µs).
_OPEN: Final = ConfigDict(extra="allow")
"""Fields beyond the declared ones are allowed (and not checked)."""


@with_config(_OPEN)
class TextPart(TypedDict):
    type: Literal["text"]
    text: StrictStr
    state: NotRequired[Literal["streaming", "done"] | None]


@with_config(_OPEN)
class ReasoningPart(TypedDict):
    type: Literal["reasoning"]
    text: StrictStr
    state: NotRequired[Literal["streaming", "done"] | None]


class _ToolCall(TypedDict):
    """What every tool part carries: the call, its state, its input and its outcome."""

    toolCallId: NonEmpty
    state: ToolState
    input: NotRequired[Any]
    output: NotRequired[Any]
    errorText: NotRequired[StrictStr | None]
    providerExecuted: NotRequired[StrictBool | None]
    preliminary: NotRequired[StrictBool | None]
    approval: NotRequired[dict[str, Any] | None]


@with_config(_OPEN)
class ToolPart(_ToolCall):
    """`tool-<name>`: a call of a tool the agent or the client defines."""

    type: Annotated[StrictStr, Field(pattern=r"^tool-.+")]


@with_config(_OPEN)
class DynamicToolPart(_ToolCall):
    """`dynamic-tool`: a call of a tool known only at run time (named by `toolName`)."""

    type: Literal["dynamic-tool"]
    toolName: NonEmpty


@with_config(_OPEN)
class FilePart(TypedDict):
    type: Literal["file"]
    mediaType: StrictStr
    url: StrictStr
    filename: NotRequired[StrictStr | None]


@with_config(_OPEN)
class SourceUrlPart(TypedDict):
    type: Literal["source-url"]
    sourceId: StrictStr
    url: StrictStr
    title: NotRequired[StrictStr | None]


@with_config(_OPEN)
class SourceDocumentPart(TypedDict):
    type: Literal["source-document"]
    sourceId: StrictStr
    mediaType: StrictStr
    title: StrictStr
    filename: NotRequired[StrictStr | None]


@with_config(_OPEN)
class StepStartPart(TypedDict):
    type: Literal["step-start"]


@with_config(_OPEN)
class DataPart(TypedDict):
    """`data-<name>`: the agent's or the application's own data (docs/agents.md#data-parts)."""

    type: Annotated[StrictStr, Field(pattern=r"^data-.+")]
    id: NotRequired[StrictStr | None]
    data: NotRequired[Any]


_FIXED_PARTS: Final = frozenset(
    {"text", "reasoning", "dynamic-tool", "file", "source-url", "source-document", "step-start"}
)


def _part_kind(value: Any) -> str | None:
    """The shape a part is checked against; None (refused) for an unknown type."""
    kind = value.get("type") if isinstance(value, dict) else None
    if not isinstance(kind, str):
        return None
    if kind in _FIXED_PARTS:
        return kind
    if kind.startswith("tool-"):
        return "tool"
    if kind.startswith("data-"):
        return "data"
    return None


Part = Annotated[
    Annotated[TextPart, Tag("text")]
    | Annotated[ReasoningPart, Tag("reasoning")]
    | Annotated[ToolPart, Tag("tool")]
    | Annotated[DynamicToolPart, Tag("dynamic-tool")]
    | Annotated[FilePart, Tag("file")]
    | Annotated[SourceUrlPart, Tag("source-url")]
    | Annotated[SourceDocumentPart, Tag("source-document")]
    | Annotated[StepStartPart, Tag("step-start")]
    | Annotated[DataPart, Tag("data")],
    Discriminator(
        _part_kind,
        custom_error_type="invalid_part",
        custom_error_message=(
            "a part is an object whose `type` is one the AI SDK defines (text, reasoning, "
            "tool-<name>, dynamic-tool, data-<name>, file, source-url, source-document, "
            "step-start)"
        ),
    ),
]


@with_config(_OPEN)
class ClientMessage(TypedDict):
    """A `UIMessage` as a client sends it."""

    id: NonEmpty
    role: Literal["user", "assistant", "system"]
    """`system` only as the server stored it: a client sends back the system messages of its
    transcript, but adds none (the shard checks them against the transcript)."""
    parts: list[Part]
    metadata: NotRequired[Any]


_MESSAGES: Final = TypeAdapter(list[ClientMessage])


class InvalidInputError(ValueError):
    """Client input of the wrong shape: `code` is the stable error code (docs/protocol.md#errors),
    the message names the first problem and where it is."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def check_messages(messages: Any, *, allow_empty: bool = True) -> None:
    """Raise `InvalidInputError` (`invalid_messages`) unless `messages` is a list of valid
    `UIMessage`s (not empty unless `allow_empty`)."""
    if not isinstance(messages, list):
        raise InvalidInputError("invalid_messages", "`messages` must be an array")
    if not messages and not allow_empty:
        raise InvalidInputError("invalid_messages", "a chat request needs at least one message")
    try:
        _MESSAGES.validate_python(messages)
    except ValidationError as exc:
        raise InvalidInputError("invalid_messages", _describe(exc, "messages")) from None


# Client frames, beyond `type` (a string, checked by whoever dispatches on it). The shapes of
# the frames `durachat.protocol.client_frames` builds, with what clients may leave out.


@with_config(_OPEN)
class _ChatRequestInit(TypedDict):
    method: NotRequired[StrictStr]
    body: NonEmpty


@with_config(_OPEN)
class _ChatRequest(TypedDict):
    id: NonEmpty
    init: _ChatRequestInit


@with_config(_OPEN)
class _Cancel(TypedDict):
    id: StrictStr


@with_config(_OPEN)
class _ResumeRequest(TypedDict):
    probeId: NotRequired[StrictStr | None]


@with_config(_OPEN)
class _ResumeAck(TypedDict):
    id: StrictStr


@with_config(_OPEN)
class _ToolResult(TypedDict):
    toolCallId: NonEmpty
    toolName: NotRequired[StrictStr | None]
    output: NotRequired[Any]
    state: NotRequired[StrictStr | None]
    errorText: NotRequired[StrictStr | None]
    autoContinue: NotRequired[StrictBool | None]
    clientTools: NotRequired[list[dict[str, Any]] | None]


@with_config(_OPEN)
class _ToolApproval(TypedDict):
    toolCallId: NonEmpty
    approved: StrictBool
    autoContinue: NotRequired[StrictBool | None]


@with_config(_OPEN)
class _ChatMessages(TypedDict):
    messages: list[Any]


_FRAMES: Final[dict[str, tuple[TypeAdapter[Any], str]]] = {
    # The chat request's codes are the ones the shard has always answered with.
    MessageType.USE_CHAT_REQUEST.value: (TypeAdapter(_ChatRequest), "invalid_request"),
    MessageType.CHAT_REQUEST_CANCEL.value: (TypeAdapter(_Cancel), "invalid_frame"),
    MessageType.STREAM_RESUME_REQUEST.value: (TypeAdapter(_ResumeRequest), "invalid_frame"),
    MessageType.STREAM_RESUME_ACK.value: (TypeAdapter(_ResumeAck), "invalid_frame"),
    MessageType.TOOL_RESULT.value: (TypeAdapter(_ToolResult), "invalid_frame"),
    MessageType.TOOL_APPROVAL.value: (TypeAdapter(_ToolApproval), "invalid_frame"),
    MessageType.CHAT_MESSAGES.value: (TypeAdapter(_ChatMessages), "invalid_messages"),
}


def check_client_frame(frame: dict[str, Any]) -> None:
    """Raise `InvalidInputError` if a client frame of a known `type` lacks a field it needs
    or has one of the wrong type; frames of other types pass (the caller answers them)."""
    shape = _FRAMES.get(frame.get("type"))  # type: ignore[arg-type]
    if shape is None:
        return
    adapter, code = shape
    try:
        adapter.validate_python(frame)
    except ValidationError as exc:
        if frame.get("type") == MessageType.USE_CHAT_REQUEST.value:
            request_id = frame.get("id")
            if not isinstance(request_id, str) or not request_id:
                code = "invalid_request_id"
        raise InvalidInputError(code, _describe(exc, "frame")) from None


def _describe(exc: ValidationError, root: str) -> str:
    """The first problem of a validation error, as `where: what` (`messages[0].parts[1]: …`)."""
    error = exc.errors(include_url=False, include_input=False)[0]
    where = root
    loc = error["loc"]
    for i, step in enumerate(loc):
        if isinstance(step, int):
            where += f"[{step}]"
        elif i >= 2 and loc[i - 2] == "parts" and isinstance(loc[i - 1], int):
            continue  # the kind of part it was checked as: not a place in the document
        else:
            where += f".{step}"
    more = exc.error_count() - 1
    suffix = f" (and {more} more problem{'s' if more > 1 else ''})" if more else ""
    return f"{where}: {error['msg']}{suffix}"
