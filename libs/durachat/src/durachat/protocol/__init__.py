"""The chat wire protocol spoken with `agents` / `@cloudflare/ai-chat` clients."""

from durachat.protocol.frames import MessageType

__all__ = ["MessageType"]
