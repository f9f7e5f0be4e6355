"""The bench agent: the scripted model, each text delta stamped with the time it left the model."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

from durachat.agent import Agent, Turn
from durachat.types import UIChunk


class BenchAgent(Agent):
    """Served as `bench-agent`; stamps `providerMetadata.bench.t` (epoch ns) on every text delta."""

    async def on_chat_message(self, turn: Turn) -> AsyncIterator[UIChunk]:
        """Stream the scripted model; stamp each `text-delta` as it leaves the model."""
        async for chunk in self.stream_model(turn):
            if chunk.get("type") == "text-delta":
                chunk["providerMetadata"] = {"bench": {"t": time.time_ns()}}
            yield chunk
