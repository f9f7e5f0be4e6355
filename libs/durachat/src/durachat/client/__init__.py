"""A Python client of the `@cloudflare/ai-chat` chat protocol, and the `durachat` CLI.

async with ChatClient.connect("http://127.0.0.1:8080", "chat-agent", "default") as client:
    reply = await client.send("hello")
    async for chunk in reply:
        ...
    print(await reply.text())

Tools: `client.pending_tool_calls()` lists the calls waiting for the client;
`add_tool_output`, `add_tool_error` and `approve_tool` answer them and return the reply of the
continuation the server starts; `ChatClient.connect(..., on_tool_call=hook)` answers client
tools automatically, and `Reply.final()` follows the continuations.

Branches: `ChatClient.connect(..., branch=...)` views a branch; `client.branch`,
`client.branches()`, `client.switch_branch(...)`, and `client.edit(message_id, text)`, which
(like `regenerate`) the server answers where the client is, keeping the replaced messages on a
new branch; `client.siblings(message_id)` and `client.alternatives(message_id)` (a "2 / 3"
picker and the branch that shows each alternative), `create_branch`, `rename_branch`,
`delete_branch` and `fork_conversation`.

Events: `async for event in EventsClient(url, headers=…).events(types=["chat:turn:*"])` follows
the gateway's event feed, resuming after the last event on a reconnect.
"""

from durachat.client.chat import ChatClient, Connecting, FrameHook, ReplyHook
from durachat.client.errors import ClientError
from durachat.client.events import EventsClient
from durachat.client.reply import OUTCOMES, Outcome, Reply, message_text
from durachat.client.tools import ToolCall, ToolCallHook, WaitingState
from durachat.client.transcript import edit_transcript, new_message_id
from durachat.client.urls import (
    branch_query,
    fetch_history,
    http_url,
    is_branch,
    socket_url,
)
from durachat.protocol import MAIN_BRANCH, BranchRef

__all__ = [
    "MAIN_BRANCH",
    "OUTCOMES",
    "BranchRef",
    "ChatClient",
    "ClientError",
    "Connecting",
    "EventsClient",
    "FrameHook",
    "Outcome",
    "Reply",
    "ReplyHook",
    "ToolCall",
    "ToolCallHook",
    "WaitingState",
    "branch_query",
    "edit_transcript",
    "fetch_history",
    "http_url",
    "is_branch",
    "message_text",
    "new_message_id",
    "socket_url",
]
