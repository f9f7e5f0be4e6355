"""Frames a client sends (C→S): their types and constructors (docs/protocol.md).

What `useAgentChat` sends, and the branch frames of durachat's own namespace. Each constructor
returns a plain dict with its fields in the order the Python client has always sent them. The
frames that go both ways (`cf_agent_chat_messages`, `cf_agent_chat_clear`) are in
`durachat.protocol.frames`.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypeAlias, TypedDict, cast

from durachat.protocol.frames import MessageType
from durachat.types import JSONDict


class ChatRequestInit(TypedDict):
    """The `init` of a chat request, shaped like a `fetch` request's."""

    method: Literal["POST"]
    body: str
    """JSON text: `{"messages", "trigger", …extra}`."""


class ChatRequestFrame(TypedDict):
    """`cf_agent_use_chat_request`: send the transcript, get a reply."""

    id: str
    """The request id; every frame of the reply carries it."""
    init: ChatRequestInit
    type: Literal[MessageType.USE_CHAT_REQUEST]


def chat_request_frame(request_id: str, body: str) -> ChatRequestFrame:
    """`{"id","init":{"method":"POST","body"},"type":"cf_agent_use_chat_request"}`; `body` is
    the request body's JSON text."""
    return {
        "id": request_id,
        "init": {"method": "POST", "body": body},
        "type": MessageType.USE_CHAT_REQUEST,
    }


class ChatRequestCancelFrame(TypedDict):
    """`cf_agent_chat_request_cancel`: abort the running turn of request `id`."""

    type: Literal[MessageType.CHAT_REQUEST_CANCEL]
    id: str


def chat_request_cancel_frame(request_id: str) -> ChatRequestCancelFrame:
    """`{"type":"cf_agent_chat_request_cancel","id"}`."""
    return {"type": MessageType.CHAT_REQUEST_CANCEL, "id": request_id}


class StreamResumeRequestFrame(TypedDict):
    """`cf_agent_stream_resume_request`: is there a stream to resume?"""

    type: Literal[MessageType.STREAM_RESUME_REQUEST]
    probeId: NotRequired[str]
    """Echoed in the answer, to tell it from answers to earlier requests."""


def stream_resume_request_frame(probe_id: str | None = None) -> StreamResumeRequestFrame:
    """`{"type":"cf_agent_stream_resume_request"[,"probeId"]}`."""
    frame: StreamResumeRequestFrame = {"type": MessageType.STREAM_RESUME_REQUEST}
    if probe_id is not None:
        frame["probeId"] = probe_id
    return frame


class StreamResumeAckFrame(TypedDict):
    """`cf_agent_stream_resume_ack`: replay the stream offered for request `id`, then go live."""

    type: Literal[MessageType.STREAM_RESUME_ACK]
    id: str


def stream_resume_ack_frame(request_id: str) -> StreamResumeAckFrame:
    """`{"type":"cf_agent_stream_resume_ack","id"}`."""
    return {"type": MessageType.STREAM_RESUME_ACK, "id": request_id}


class ToolResultFrame(TypedDict):
    """`cf_agent_tool_result`: the result of a client tool call."""

    type: Literal[MessageType.TOOL_RESULT]
    toolCallId: str
    toolName: NotRequired[str]
    clientTools: NotRequired[list[JSONDict]]
    """Replaces the client tools the conversation's continuations offer the model."""
    output: Any
    state: NotRequired[Literal["output-error"]]
    errorText: NotRequired[str]
    autoContinue: NotRequired[bool]


def tool_result_frame(
    tool_call_id: str,
    output: Any,
    *,
    tool_name: str | None = None,
    client_tools: list[JSONDict] | None = None,
    error_text: str | None = None,
    auto_continue: bool,
) -> ToolResultFrame:
    """`{"type":"cf_agent_tool_result","toolCallId"[,"toolName"][,"clientTools"],"output"
    [,"state":"output-error","errorText"],"autoContinue"}`: with `error_text`, the call failed."""
    # Built field by field: `output` comes after the optional fields before it.
    frame: dict[str, Any] = {"type": MessageType.TOOL_RESULT, "toolCallId": tool_call_id}
    if tool_name is not None:
        frame["toolName"] = tool_name
    if client_tools:
        frame["clientTools"] = client_tools
    frame["output"] = output
    if error_text is not None:
        frame["state"] = "output-error"
        frame["errorText"] = error_text
    frame["autoContinue"] = auto_continue
    return cast(ToolResultFrame, frame)


class ToolApprovalFrame(TypedDict):
    """`cf_agent_tool_approval`: the user's answer to a call that needs approval."""

    type: Literal[MessageType.TOOL_APPROVAL]
    toolCallId: str
    approved: bool
    autoContinue: NotRequired[bool]


def tool_approval_frame(
    tool_call_id: str, approved: bool, *, auto_continue: bool
) -> ToolApprovalFrame:
    """`{"type":"cf_agent_tool_approval","toolCallId","approved","autoContinue"}`."""
    return {
        "type": MessageType.TOOL_APPROVAL,
        "toolCallId": tool_call_id,
        "approved": approved,
        "autoContinue": auto_continue,
    }


class BranchesRequestFrame(TypedDict):
    """`durachat_branches`: list the conversation's branches."""

    type: Literal[MessageType.BRANCHES]


def branches_request_frame() -> BranchesRequestFrame:
    """`{"type":"durachat_branches"}`."""
    return {"type": MessageType.BRANCHES}


class BranchSwitchFrame(TypedDict):
    """`durachat_branch_switch`: view another branch (its id or name)."""

    type: Literal[MessageType.BRANCH_SWITCH]
    branch: str


def branch_switch_frame(branch: str) -> BranchSwitchFrame:
    """`{"type":"durachat_branch_switch","branch"}`."""
    return {"type": MessageType.BRANCH_SWITCH, "branch": branch}


BranchOp: TypeAlias = Literal["siblings", "create", "rename", "delete", "fork"]
"""The operations of `durachat_branch_op` (docs/branching.md)."""


class BranchOpFields(TypedDict, total=False):
    """The fields of a `durachat_branch_op` beyond its op (which each op needs:
    docs/branching.md#websocket-a-connection-views-one-branch)."""

    messageId: str
    branch: str
    name: str
    at: str
    from_branch: str


class BranchOpFrame(BranchOpFields):
    """`durachat_branch_op`: a branch read or write, answered like the HTTP route."""

    type: Literal[MessageType.BRANCH_OP]
    id: str
    """Echoed in the answer."""
    op: BranchOp


def branch_op_frame(op_id: str, op: BranchOp, fields: BranchOpFields) -> BranchOpFrame:
    """`{"type":"durachat_branch_op","id","op",…fields}`."""
    return {"type": MessageType.BRANCH_OP, "id": op_id, "op": op, **fields}
