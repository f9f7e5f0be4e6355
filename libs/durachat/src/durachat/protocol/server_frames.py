"""Frames the server sends (S→C): their types and constructors (docs/protocol.md).

Each constructor returns a plain dict with its fields in the order the server has always sent
them; `durachat.protocol.encode_json` turns it into the frame's text. The frames that go both
ways (`cf_agent_chat_messages`, `cf_agent_chat_clear`) are in `durachat.protocol.frames`.
"""

from __future__ import annotations

from typing import Any, Final, Literal, NotRequired, TypedDict

from durachat.protocol.frames import MessageType
from durachat.types import JSONDict, UIMessage

_RESPONSE: Final = MessageType.USE_CHAT_RESPONSE


class ChatResponseFrame(TypedDict):
    """`cf_agent_use_chat_response`: one frame of a request's reply stream (a chunk, an error,
    the terminal frame, the end of a replay; docs/protocol.md#server--client-frames)."""

    body: str
    """A JSON-serialised UI message chunk, an error text, or `""`."""
    done: bool
    """Whether this frame ends the request's stream."""
    error: NotRequired[Literal[True]]
    id: str
    """The request id."""
    type: Literal[MessageType.USE_CHAT_RESPONSE]
    seq: NotRequired[int]
    """A chunk's position in its request's stream, from 0."""
    messageIds: NotRequired[list[str]]
    outcome: NotRequired[str]
    """How the request ended when it did not complete: `aborted`, `error` or `skipped`."""
    continuation: NotRequired[Literal[True]]
    replay: NotRequired[Literal[True]]
    replayComplete: NotRequired[Literal[True]]


def chunk_frame(request_id: str, seq: int, body: str, *, continuation: bool) -> ChatResponseFrame:
    """A chunk of a request's stream; `body` is the chunk's JSON (`encode_json(chunk)`)."""
    frame: ChatResponseFrame = {
        "body": body,
        "done": False,
        "id": request_id,
        "type": _RESPONSE,
        "seq": seq,
    }
    if continuation:
        frame["continuation"] = True
    return frame


def reply_error_frame(
    request_id: str, text: str, *, message_ids: list[str] | None, continuation: bool
) -> ChatResponseFrame:
    """The error frame of a failed request, sent before its terminal frame."""
    frame: ChatResponseFrame = {
        "body": text,
        "done": False,
        "error": True,
        "id": request_id,
        "type": _RESPONSE,
    }
    if message_ids is not None:
        frame["messageIds"] = message_ids
    if continuation:
        frame["continuation"] = True
    return frame


def done_frame(
    request_id: str,
    *,
    outcome: str | None = None,
    message_ids: list[str] | None = None,
    continuation: bool = False,
) -> ChatResponseFrame:
    """The terminal frame of a request: `outcome` unless it completed, `messageIds` (the
    request's trailing user messages) unless it is a continuation."""
    frame: ChatResponseFrame = {"body": "", "done": True, "id": request_id, "type": _RESPONSE}
    if message_ids is not None:
        frame["messageIds"] = message_ids
    if outcome is not None:
        frame["outcome"] = outcome
    if continuation:
        frame["continuation"] = True
    return frame


def gave_up_frame(request_id: str, text: str, *, continuation: bool = False) -> ChatResponseFrame:
    """The terminal frame of a request recovery gave up on; `text` is the agent's terminal
    message (docs/recovery.md#budgets)."""
    frame: ChatResponseFrame = {
        "body": text,
        "done": True,
        "error": True,
        "id": request_id,
        "type": _RESPONSE,
    }
    if continuation:
        frame["continuation"] = True
    return frame


def replay_end_frame(request_id: str, *, live: bool, continuation: bool) -> ChatResponseFrame:
    """The end of a replay (docs/protocol.md#resume-handshake): the stream goes on live
    (`replayComplete`), or it is over (`done`)."""
    frame: ChatResponseFrame
    if live:
        frame = {
            "body": "",
            "done": False,
            "id": request_id,
            "type": _RESPONSE,
            "replay": True,
            "replayComplete": True,
        }
    else:
        frame = {"body": "", "done": True, "id": request_id, "type": _RESPONSE, "replay": True}
    if continuation:
        frame["continuation"] = True
    return frame


class RejectedRequestFrame(TypedDict):
    """`cf_agent_use_chat_response` answering a chat request that was refused before it ran;
    a `durachat_error` follows it."""

    type: Literal[MessageType.USE_CHAT_RESPONSE]
    id: str
    body: str
    done: Literal[True]
    error: Literal[True]
    outcome: Literal["error"]


def rejected_request_frame(request_id: str, reason: str) -> RejectedRequestFrame:
    """`{"type":"cf_agent_use_chat_response","id","body":<reason>,"done":true,"error":true,
    "outcome":"error"}`."""
    return {
        "type": _RESPONSE,
        "id": request_id,
        "body": reason,
        "done": True,
        "error": True,
        "outcome": "error",
    }


def invalid_request_frames(request_id: str, reason: str) -> list[ChatResponseFrame]:
    """What a chat request refused as invalid gets, as the reference answers a failed turn:
    its error frame (`reason` as the body), then its terminal frame with `outcome: "error"`
    (a `durachat_error` naming the problem follows them)."""
    return [
        reply_error_frame(request_id, reason, message_ids=None, continuation=False),
        done_frame(request_id, outcome="error"),
    ]


class StreamResumingFrame(TypedDict):
    """`cf_agent_stream_resuming`: a stream can be resumed; the client ACKs it to get it."""

    type: Literal[MessageType.STREAM_RESUMING]
    id: str
    probeId: NotRequired[str]


class StreamPendingFrame(TypedDict):
    """`cf_agent_stream_pending`: a turn is accepted and has not started streaming."""

    type: Literal[MessageType.STREAM_PENDING]
    id: str
    probeId: NotRequired[str]


class StreamResumeNoneFrame(TypedDict):
    """`cf_agent_stream_resume_none`: nothing to resume."""

    type: Literal[MessageType.STREAM_RESUME_NONE]
    reason: NotRequired[Literal["idle"]]
    probeId: NotRequired[str]


def stream_resuming_frame(request_id: str, probe_id: str | None = None) -> StreamResumingFrame:
    """`{"type":"cf_agent_stream_resuming","id"[,"probeId"]}`; `probeId` echoes the resume
    request it answers."""
    frame: StreamResumingFrame = {"type": MessageType.STREAM_RESUMING, "id": request_id}
    if probe_id:
        frame["probeId"] = probe_id
    return frame


def stream_pending_frame(request_id: str, probe_id: str | None = None) -> StreamPendingFrame:
    """`{"type":"cf_agent_stream_pending","id"[,"probeId"]}`."""
    frame: StreamPendingFrame = {"type": MessageType.STREAM_PENDING, "id": request_id}
    if probe_id:
        frame["probeId"] = probe_id
    return frame


def stream_resume_none_frame(
    *, idle: bool = False, probe_id: str | None = None
) -> StreamResumeNoneFrame:
    """`cf_agent_stream_resume_none`: with `reason: "idle"` (and the `probeId`) when it answers
    a resume request, bare when it releases a connection waiting on `pending`."""
    frame: StreamResumeNoneFrame = {"type": MessageType.STREAM_RESUME_NONE}
    if idle:
        frame["reason"] = "idle"
    if probe_id:
        frame["probeId"] = probe_id
    return frame


class ChatRecoveringFrame(TypedDict):
    """`cf_agent_chat_recovering`: a turn is (or no longer is) being recovered."""

    type: Literal[MessageType.CHAT_RECOVERING]
    recovering: bool
    id: str
    """The root request id of the recovered turn."""


def chat_recovering_frame(root_request_id: str, *, active: bool) -> ChatRecoveringFrame:
    """`{"type":"cf_agent_chat_recovering","recovering","id"}`."""
    return {"type": MessageType.CHAT_RECOVERING, "recovering": active, "id": root_request_id}


class MessageUpdatedFrame(TypedDict):
    """`cf_agent_message_updated`: a tool result or approval changed a stored message."""

    type: Literal[MessageType.MESSAGE_UPDATED]
    message: UIMessage


def message_updated_frame(message: UIMessage) -> MessageUpdatedFrame:
    """`{"type":"cf_agent_message_updated","message"}`."""
    return {"type": MessageType.MESSAGE_UPDATED, "message": message}


class IdentityFrame(TypedDict):
    """`cf_agent_identity`, sent on connect."""

    type: Literal[MessageType.IDENTITY]
    name: str
    agent: str


def identity_frame(name: str, agent: str) -> IdentityFrame:
    """`{"type":"cf_agent_identity","name","agent"}`."""
    return {"type": MessageType.IDENTITY, "name": name, "agent": agent}


class McpServersFrame(TypedDict):
    """`cf_agent_mcp_servers`, sent on connect (durachat has no MCP servers)."""

    mcp: dict[str, Any]
    type: Literal[MessageType.MCP_SERVERS]


def mcp_servers_frame() -> McpServersFrame:
    """`{"mcp":{"prompts":[],"resources":[],"servers":{},"tools":[]},"type":"cf_agent_mcp_servers"}`."""
    return {
        "mcp": {"prompts": [], "resources": [], "servers": {}, "tools": []},
        "type": MessageType.MCP_SERVERS,
    }


class ErrorFrame(TypedDict):
    """`durachat_error`: a frame of the client's was rejected (docs/protocol.md#errors)."""

    type: Literal[MessageType.ERROR]
    code: str
    """Stable, for code to act on."""
    message: str
    """For people."""


def error_frame(code: str, message: str) -> ErrorFrame:
    """`{"type":"durachat_error","code","message"}`."""
    return {"type": MessageType.ERROR, "code": code, "message": message}


class BranchSwitchedFrame(TypedDict):
    """`durachat_branch_switched`: the connection views another branch from now on."""

    type: Literal[MessageType.BRANCH_SWITCHED]
    branch: str
    """`main` or the branch's id."""
    reason: str
    """`switch` (asked for), `edit` or `regenerate` (a fork), `deleted` (its branch was)."""


def branch_switched_frame(branch: str, reason: str) -> BranchSwitchedFrame:
    """`{"type":"durachat_branch_switched","branch","reason"}`."""
    return {"type": MessageType.BRANCH_SWITCHED, "branch": branch, "reason": reason}


class BranchesFrame(TypedDict):
    """`durachat_branches`, the answer: every branch, and the one the connection views."""

    type: Literal[MessageType.BRANCHES]
    branches: list[JSONDict]
    viewing: str


def branches_frame(branches: list[JSONDict], viewing: str) -> BranchesFrame:
    """`{"type":"durachat_branches","branches","viewing"}`."""
    return {"type": MessageType.BRANCHES, "branches": branches, "viewing": viewing}


class BranchOpAnswerFrame(TypedDict):
    """`durachat_branch_op`, the answer: what the HTTP route would have answered."""

    type: Literal[MessageType.BRANCH_OP]
    op: Any
    """The op, as the client sent it."""
    status: int
    id: NotRequired[str]
    """The id the client gave the op."""
    body: dict[str, Any]


def branch_op_answer_frame(
    op: Any, status: int, body: dict[str, Any], *, op_id: str | None = None
) -> BranchOpAnswerFrame:
    """`{"type":"durachat_branch_op","op","status"[,"id"],"body"}`."""
    if op_id is None:
        return {"type": MessageType.BRANCH_OP, "op": op, "status": status, "body": body}
    return {"type": MessageType.BRANCH_OP, "op": op, "status": status, "id": op_id, "body": body}
