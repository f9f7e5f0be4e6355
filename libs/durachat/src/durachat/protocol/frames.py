"""Wire frame types of the chat protocol, the frames both sides send, and their JSON encoding.

Every frame is a JSON object sent as WebSocket text. Frames are plain dicts, typed with
`TypedDict`s and built by the constructors here (server to client in
`durachat.protocol.server_frames`, client to server in `durachat.protocol.client_frames`): a
constructor fixes a frame's fields and their order, so the bytes on the wire do not depend on
who builds it. docs/protocol.md describes every frame.
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Any, Final, Literal, TypedDict

from durachat.types import UIMessage


class MessageType(StrEnum):
    """The `type` field of every chat frame, client to server (C→S) and server to client (S→C)."""

    CHAT_MESSAGES = "cf_agent_chat_messages"  # both
    USE_CHAT_REQUEST = "cf_agent_use_chat_request"  # C→S
    USE_CHAT_RESPONSE = "cf_agent_use_chat_response"  # S→C
    CHAT_CLEAR = "cf_agent_chat_clear"  # both
    CHAT_REQUEST_CANCEL = "cf_agent_chat_request_cancel"  # C→S
    STREAM_RESUMING = "cf_agent_stream_resuming"  # S→C
    STREAM_RESUME_ACK = "cf_agent_stream_resume_ack"  # C→S
    STREAM_RESUME_REQUEST = "cf_agent_stream_resume_request"  # C→S
    STREAM_RESUME_NONE = "cf_agent_stream_resume_none"  # S→C
    STREAM_PENDING = "cf_agent_stream_pending"  # S→C
    TOOL_RESULT = "cf_agent_tool_result"  # C→S
    TOOL_APPROVAL = "cf_agent_tool_approval"  # C→S
    MESSAGE_UPDATED = "cf_agent_message_updated"  # S→C
    CHAT_RECOVERING = "cf_agent_chat_recovering"  # S→C
    IDENTITY = "cf_agent_identity"  # S→C
    MCP_SERVERS = "cf_agent_mcp_servers"  # S→C
    ERROR = "durachat_error"  # S→C, the project's own namespace
    BRANCHES = "durachat_branches"  # C→S asks for the branch list, S→C answers it
    BRANCH_SWITCH = "durachat_branch_switch"  # C→S
    BRANCH_SWITCHED = "durachat_branch_switched"  # S→C
    BRANCH_OP = "durachat_branch_op"  # C→S a branch read or write, S→C its answer


_encode: Final = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def encode_json(value: Any) -> str:
    """A frame (or a chunk carried in one) as the JSON text the server sends: no spaces,
    non-ASCII characters as they are. One encoder serves every call (cheaper than
    `json.dumps` with options, which builds one per call)."""
    return _encode(value)


class ChatMessagesFrame(TypedDict):
    """`cf_agent_chat_messages`: a whole transcript. S→C a broadcast the client replaces its
    messages with; C→S a client's own list, stored and passed on to the other connections."""

    type: Literal[MessageType.CHAT_MESSAGES]
    messages: list[UIMessage]


class ChatClearFrame(TypedDict):
    """`cf_agent_chat_clear`: C→S clear the conversation; S→C it was cleared."""

    type: Literal[MessageType.CHAT_CLEAR]


def chat_messages_frame(messages: list[UIMessage]) -> ChatMessagesFrame:
    """`{"type":"cf_agent_chat_messages","messages":[…]}`."""
    return {"type": MessageType.CHAT_MESSAGES, "messages": messages}


def chat_clear_frame() -> ChatClearFrame:
    """`{"type":"cf_agent_chat_clear"}`."""
    return {"type": MessageType.CHAT_CLEAR}
