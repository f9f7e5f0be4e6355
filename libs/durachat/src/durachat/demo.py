"""The demo agent `chat-agent` that `make run` serves, driven by the built-in scripted model."""

from __future__ import annotations

from durachat.agent import Agent


class ChatAgent(Agent):
    """Answers with the configured model (the offline scripted model by default)."""
