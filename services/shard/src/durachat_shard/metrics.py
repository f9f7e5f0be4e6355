"""Prometheus metrics of a shard (docs/observability.md#metrics).

Labels stay bounded: outcome, agent, tenant and model, never a conversation. What is counted
per chunk uses children bound once, here, so a chunk costs one increment.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)

ACTIVE_CONVERSATIONS = Gauge(
    "durachat_shard_active_conversations", "Conversations held in memory by this shard"
)
TURNS = Counter("durachat_shard_turns_total", "Turns run, by outcome", ["outcome"])
TIME_TO_FIRST_CHUNK = Histogram(
    "durachat_shard_time_to_first_chunk_seconds",
    "From the start of a turn to its first chunk from the agent",
    buckets=_LATENCY_BUCKETS,
)
TURN_DURATION = Histogram(
    "durachat_shard_turn_duration_seconds",
    "From the start of a turn to its terminal frame, by outcome",
    ["outcome"],
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300),
)
CHUNKS = Counter("durachat_shard_chunks_total", "Chunks appended to event logs")
LOOP_LAG = Histogram(
    "durachat_shard_event_loop_lag_seconds",
    "How late the shard's event loop ran a timer due every 100 ms",
    buckets=_LATENCY_BUCKETS,
)
WRITE_BACKLOG = Gauge(
    "durachat_shard_write_backlog_seconds",
    "How long the oldest write still queued on the shard's write chains has waited",
)
TURNS_WAITING = Gauge(
    "durachat_shard_turns_waiting",
    "Chat requests waiting for a shard that is behind to catch up before they start",
)
TURNS_REFUSED = Counter(
    "durachat_shard_turns_refused_total",
    "Chat requests refused before they became turns, by reason (`overloaded`: the event loop "
    "or the writes were behind)",
    ["reason"],
)
FENCED = Counter("durachat_shard_fenced_total", "Writes rejected because ownership moved")
LEASES = Counter(
    "durachat_shard_leases_total",
    "Conversation leases: `taken` (a new tenure), `lost` (renewal failed or fenced), "
    "`reclaimed` (taken back after Redis lost it)",
    ["event"],
)
LEASES_TAKEN = LEASES.labels("taken")
LEASES_LOST = LEASES.labels("lost")
LEASES_RECLAIMED = LEASES.labels("reclaimed")
WRITE_CHAIN_LAG = Histogram(
    "durachat_shard_write_chain_lag_seconds",
    "From queueing a write on a conversation's write chain to its commit",
    buckets=_LATENCY_BUCKETS,
)
MODEL_ERRORS = Counter(
    "durachat_shard_model_errors_total", "Turns ended by a model error, by agent", ["agent"]
)
MODEL_TOKENS = Counter(
    "durachat_shard_model_tokens_total",
    "Model tokens of the replies streamed, estimated from their text, by tenant and model",
    ["tenant", "model"],
)
