"""A Python client of the `@cloudflare/ai-chat` chat protocol, and the `durachat` CLI.

async with ChatClient.connect("http://127.0.0.1:8080", "chat-agent", "default") as client:
    reply = await client.send("hello")
    async for chunk in reply:
        ...
    print(await reply.text())
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

__all__ = [
    "OUTCOMES",
    "ChatClient",
    "ClientError",
    "Connecting",
    "FrameHook",
    "Outcome",
    "Reply",
    "ReplyHook",
    "fetch_history",
    "http_url",
    "message_text",
    "new_message_id",
    "socket_url",
]
