"""`loadtest-agent`: the demo agent with every text delta stamped with the time it left the
model, so that a load test can measure delivery latency (docs/load-testing.md).

Serve it beside the demo: `DURACHAT_AGENTS=durachat.demo,durachat.loadtest.agent make run`.
The stamp is `providerMetadata.loadtest.t`, nanoseconds since the epoch: the load generator's
clock must agree with the shards' (the same machine, or NTP).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

from durachat.agent import Turn
from durachat.demo import ChatAgent
from durachat.types import UIChunk


class LoadtestAgent(ChatAgent):
    """Served as `loadtest-agent`: the demo agent (scripted model, demo tools), stamped."""

    async def on_chat_message(self, turn: Turn) -> AsyncIterator[UIChunk]:
        """Stream the demo agent's reply; stamp each `text-delta` as it leaves the model."""
        async for chunk in self.stream_model(turn):
            if chunk.get("type") == "text-delta":
                chunk["providerMetadata"] = {"loadtest": {"t": time.time_ns()}}
            yield chunk
