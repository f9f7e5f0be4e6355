"""Prometheus metrics of a shard."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

ACTIVE_CONVERSATIONS = Gauge(
    "durachat_shard_active_conversations", "Conversations held in memory by this shard"
)
TURNS = Counter("durachat_shard_turns_total", "Turns run, by outcome", ["outcome"])
TIME_TO_FIRST_CHUNK = Histogram(
    "durachat_shard_time_to_first_chunk_seconds",
    "From the start of a turn to its first chunk from the agent",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
CHUNKS = Counter("durachat_shard_chunks_total", "Chunks appended to event logs")
FENCED = Counter("durachat_shard_fenced_total", "Writes rejected because ownership moved")
