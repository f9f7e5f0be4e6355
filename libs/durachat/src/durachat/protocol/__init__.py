"""The chat wire protocol spoken with `agents` / `@cloudflare/ai-chat` clients.

Every frame type, its fields and its constructor live in this package (docs/protocol.md): the
frame types and the frames both sides send in `frames`, what the server sends in
`server_frames`, what a client sends in `client_frames`; how branches are named in `branches`.
"""

from durachat.protocol.branches import MAIN_BRANCH, BranchRef
from durachat.protocol.frames import (
    ChatClearFrame,
    ChatMessagesFrame,
    MessageType,
    chat_clear_frame,
    chat_messages_frame,
    encode_json,
)

__all__ = [
    "MAIN_BRANCH",
    "BranchRef",
    "ChatClearFrame",
    "ChatMessagesFrame",
    "MessageType",
    "chat_clear_frame",
    "chat_messages_frame",
    "encode_json",
]
