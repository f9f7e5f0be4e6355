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
"""

from durachat.client.chat import (
    ChatClient,
    Connecting,
    FrameHook,
    ReplyHook,
    fetch_history,
    http_url,
    new_message_id,
    socket_url,
)
from durachat.client.errors import ClientError
from durachat.client.reply import OUTCOMES, Outcome, Reply, message_text
from durachat.client.tools import ToolCall, ToolCallHook, WaitingState

__all__ = [
    "OUTCOMES",
    "ChatClient",
    "ClientError",
    "Connecting",
    "FrameHook",
    "Outcome",
    "Reply",
    "ReplyHook",
    "ToolCall",
    "ToolCallHook",
    "WaitingState",
    "fetch_history",
    "http_url",
    "message_text",
    "new_message_id",
    "socket_url",
]
