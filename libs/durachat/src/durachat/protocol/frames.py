"""Wire frame types of the chat protocol (all frames are JSON text)."""

from __future__ import annotations

from enum import StrEnum


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
