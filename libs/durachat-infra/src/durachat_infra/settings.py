"""Typed settings of every durachat process, read from the environment.

Settings objects are built once in each process's `main()` and passed down; nothing reads the
environment at import time. Every variable is documented in `docs/configuration.md`.
"""

from __future__ import annotations

import os
import uuid
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class EventFeedSettings(BaseSettings):
    """The tenants' event feed (docs/observability.md#subscribing-to-events)."""

    model_config = SettingsConfigDict(env_prefix="DURACHAT_EVENTS_", extra="ignore")

    enabled: bool = True
    """Publish the events this process emits to the feed."""
    maxlen: int = Field(default=100_000, ge=1)
    """Approximate number of events kept per tenant (and in the operator's stream of all)."""
    retention: float = Field(default=86_400.0, gt=0)
    """Seconds an event is kept; older ones are trimmed."""
    buffer_bytes: int = Field(default=1_048_576, ge=1024)
    """Bytes of events a process holds while Redis is slow or away; past that new ones are
    dropped (and counted)."""
    batch: int = Field(default=256, ge=1)
    """Most events sent to Redis in one round trip."""
    subscriber_buffer_bytes: int = Field(default=1_048_576, ge=1024)
    """Bytes of events a gateway holds for one SSE or WebSocket subscriber that reads slower
    than they come; when full the gateway waits, and cuts off a subscriber that makes no room
    for a few seconds (it resumes with its last event id)."""
    heartbeat: float = Field(default=15.0, gt=0)
    """Seconds between the heartbeats of an SSE stream (comments) with no event."""


class WebhookSettings(BaseSettings):
    """Webhook deliveries by the jobs worker (docs/observability.md#webhooks)."""

    model_config = SettingsConfigDict(env_prefix="DURACHAT_WEBHOOK_", extra="ignore")

    max_attempts: int = Field(default=8, ge=1)
    """Tries of one delivery before it goes to the dead-letter list."""
    retry_base: float = Field(default=1.0, gt=0)
    """Seconds before the first retry; each later one waits twice as long as the one before."""
    retry_max: float = Field(default=600.0, gt=0)
    """Longest wait between two tries, in seconds."""
    timeout: float = Field(default=10.0, gt=0)
    """Seconds a receiver has to answer a delivery."""
    dead_letter_max: int = Field(default=1000, ge=1)
    """Failed deliveries kept per webhook (the oldest go first)."""
    block_private: bool = False
    """Refuse to deliver to hosts that resolve to loopback, private, link-local or reserved
    addresses (a guard against requests into the cluster's own network; see
    docs/observability.md#webhooks). Off by default so local development can use localhost."""


class CommonSettings(BaseSettings):
    """Settings shared by the gateway, shard and jobs processes."""

    model_config = SettingsConfigDict(env_prefix="DURACHAT_", extra="ignore")

    redis_url: str = Field(default="redis://127.0.0.1:6379/0", validation_alias="REDIS_URL")
    """Redis server holding the event logs, membership, leases and job queues (with
    `REDIS_CLUSTER_NODES`, only its password and scheme are used)."""

    redis_cluster_nodes: str | None = Field(default=None, validation_alias="REDIS_CLUSTER_NODES")
    """`host:port,host:port,…`: seed nodes of a Redis Cluster to use instead of one server
    (docs/operations.md#redis-cluster)."""

    database_url: str = Field(
        default="sqlite+aiosqlite:///var/durachat.db", validation_alias="DATABASE_URL"
    )
    """SQLAlchemy URL of the transcript store (SQLite file by default, PostgreSQL in a cluster)."""

    key_prefix: str = "dc"
    """Prefix of every Redis key, so several clusters can share one Redis."""

    log_level: str = "INFO"
    """Python logging level of the process."""

    log_format: Literal["json", "text"] = "text"
    """`json`: one JSON object a line, with the current span's `trace_id` / `span_id`;
    `text`: human-readable lines (docs/observability.md#logs)."""

    metrics_port: int | None = None
    """Port on which the process serves `/metrics` to Prometheus, unauthenticated; unset: no
    such listener (docs/observability.md#metrics)."""

    metrics_host: str | None = None
    """Address of that listener (default: the address the process binds its main port to)."""

    cluster_secret: str | None = Field(default=None, repr=False)
    """Secret that signs calls between the processes of the cluster (gateways and jobs to a
    shard's internal API, docs/security.md); unset, the internal API takes unsigned calls."""

    events: EventFeedSettings = Field(default_factory=EventFeedSettings)
    """The event feed (`DURACHAT_EVENTS_*`, docs/observability.md#subscribing-to-events)."""


class ClusterTiming(BaseSettings):
    """Membership and lease timing, shared so gateways and shards agree."""

    model_config = SettingsConfigDict(env_prefix="DURACHAT_", extra="ignore")

    heartbeat_interval: float = 0.5
    """Seconds between a shard's membership heartbeats."""

    shard_ttl: float = 2.0
    """Seconds after its last heartbeat that a shard counts as dead."""

    lease_ttl: float = 2.0
    """Seconds a conversation lease lives without renewal."""


class ShardSettings(CommonSettings, ClusterTiming):
    """Settings of a shard process."""

    shard_id: str = Field(default_factory=lambda: f"shard-{uuid.uuid4().hex[:8]}")
    host: str = Field(default="127.0.0.1", validation_alias="DURACHAT_SHARD_HOST")
    """Address the shard's internal API binds to."""

    advertise_host: str | None = Field(
        default=None, validation_alias="DURACHAT_SHARD_ADVERTISE_HOST"
    )
    """Address gateways use to reach the shard (defaults to the bound address; set it when
    binding 0.0.0.0, e.g. to the pod IP)."""

    port: int = Field(default=0, validation_alias="DURACHAT_SHARD_PORT")
    """Port of the internal API (also its `/healthz`, `/readyz` and `/metrics`); 0 picks a free
    one and registers it. Containers set a fixed one (8081 in the chart and the compose file) so
    probes and network policies can name it."""

    agents: str = "durachat.demo"
    """Comma-separated import paths of modules (or `module:Class`) defining agents."""

    model: str | None = None
    """litellm model string every agent uses instead of its own `model` (unset: each agent's
    own; the demo agent's is the offline scripted model)."""

    idle_evict_after: float = 300.0
    """Seconds an idle conversation stays in memory before it is evicted."""

    max_loop_lag: float = Field(default=1.0, ge=0)
    """Seconds the shard's event loop may run behind, two measurements in a row, before new
    turns wait for it to catch up and are refused with `overloaded` if it does not in time
    (0: never for this reason). Keep it under the lease TTL: a loop later than that loses its
    conversations' leases."""

    max_write_backlog: float = Field(default=5.0, ge=0)
    """Seconds the shard's oldest queued write may wait before new turns wait for it, as
    above (0: never for this reason). Keep it under the gateways' forward timeout: a
    chat request is answered once its turn is stored."""

    max_admission_wait: float = Field(default=5.0, ge=0)
    """Seconds a chat request may wait for a shard that is behind to catch up before it is
    refused with `overloaded` (0: refused at once); never past the gateway's deadline."""

    log_maxlen: int = 10_000
    """Approximate maximum entries kept in a conversation's event log."""

    log_max_bytes: int = Field(default=64 * 1024 * 1024, ge=0)
    """Most bytes of entries kept in a conversation's event log (0: no bound); the oldest are
    dropped past it, the newest entry always kept."""

    drain_timeout: float = 10.0
    """Seconds a shard stopping on SIGTERM lets running turns finish; the rest are
    checkpointed and continued by their new owners."""

    turn_heartbeat_interval: float = 2.0
    """Seconds between the heartbeats a shard writes on its open turns."""


class QuotaDefaults(BaseSettings):
    """The quotas every tenant gets unless it overrides them (docs/security.md#quotas); 0 means
    no limit."""

    model_config = SettingsConfigDict(env_prefix="DURACHAT_QUOTA_", extra="ignore")

    connections: int = Field(default=1000, ge=0)
    """Open WebSockets of the tenant across the cluster."""
    concurrent_turns: int = Field(default=100, ge=0)
    """Chat requests of the tenant accepted and not yet answered, across the cluster."""
    turns_per_minute: int = Field(default=600, ge=0)
    """Chat requests of the tenant per minute (a token bucket refilled continuously)."""
    conversations: int = Field(default=100_000, ge=0)
    """Conversations the tenant may have; more are not created."""
    tokens_per_day: int = Field(default=0, ge=0)
    """Model tokens (estimated from text, four characters a token) per UTC day."""
    max_message_bytes: int = Field(default=2_000_000, ge=0)
    """Largest message of a chat request, in bytes of JSON."""
    max_messages_per_request: int = Field(default=10_000, ge=0)
    """Most messages one chat request may carry."""


class GatewaySettings(CommonSettings, ClusterTiming):
    """Settings of a gateway process."""

    gateway_id: str = Field(default_factory=lambda: f"gw-{uuid.uuid4().hex[:8]}")
    host: str = Field(default="127.0.0.1", validation_alias="DURACHAT_HOST")
    port: int = Field(default=8080, validation_alias="PORT")
    tenant: str = "default"
    """Tenant every request acts as in open mode (no `admin_key`)."""

    admin_key: str | None = Field(default=None, repr=False)
    """The operator's key for the admin API and the cluster routes. Set, every route needs a
    credential (docs/security.md); unset, the gateway is open (local development)."""

    token_max_ttl: float = Field(default=86_400.0, gt=0)
    """Longest lifetime a client token may be given, in seconds; also how long a rotated-out
    signing key keeps verifying tokens unless the rotation says otherwise."""

    auth_refresh_interval: float = Field(default=0.25, gt=0)
    """Seconds between a gateway's checks for changed tenants and keys (revocations reach
    every gateway within about this long)."""

    quotas: QuotaDefaults = Field(default_factory=QuotaDefaults)
    """Quota defaults (`DURACHAT_QUOTA_*`)."""

    forward_timeout: float = 10.0
    """Seconds a client frame may take to reach its owner shard, redirects and retries included."""

    send_queue_limit: int = 4096
    """Frames buffered for one slow client; past that it is disconnected (close code 1013) and
    resumes from the event log when it reconnects."""

    send_buffer_bytes: int = Field(default=16 * 1024 * 1024, gt=0)
    """Bytes of frames buffered for one slow client; past that it is disconnected (1013) as
    well (docs/operations.md#buffers)."""

    forward_queue_bytes: int = Field(default=16 * 1024 * 1024, gt=0)
    """Bytes of one connection's frames waiting to reach their shard; past that the gateway
    stops reading the connection until there is room, and refuses the frame (`overloaded`)
    if there is none within `forward_timeout`."""

    log_read_bytes: int = Field(default=4 * 1024 * 1024, gt=0)
    """About how many bytes of one conversation's event-log entries a gateway reads from Redis
    at once (at least one entry, at most 8)."""

    max_frame_bytes: int = 4 * 1024 * 1024
    """Largest client frame accepted."""

    max_body_bytes: int = Field(default=4 * 1024 * 1024, gt=0)
    """Largest HTTP request body accepted (413 beyond)."""

    max_header_bytes: int = Field(default=64 * 1024, gt=0)
    """Largest HTTP request line and headers together (431 beyond, at once)."""

    allowed_origins: str = ""
    """Comma-separated origins (`https://app.example.com`) whose browser pages may open
    WebSockets; empty: any. A tenant's `allowed_origins` setting replaces it for the tenant's
    sockets. A socket without an `Origin` header (not a browser) is always allowed."""

    ws_compression: bool = False
    """Offer permessage-deflate. Off by default: it costs about 38 KiB of compressor state per
    connection and CPU on every frame, for frames that are mostly small."""


class JobsSettings(CommonSettings):
    """Settings of the jobs worker."""

    turn_stale_after: float = 10.0
    """Seconds without a heartbeat after which an open turn counts as orphaned (a turn whose
    owner no longer holds the conversation's lease is orphaned at once)."""

    orphan_scan_interval: int = 1
    """Seconds between scans for orphaned turns (1-60)."""

    log_retention: float = 86_400.0
    """Seconds a conversation's event log keeps entries after they were written; older ones
    are trimmed (a cursor older than that has expired)."""

    abandoned_stream_after: float = 600.0
    """Seconds after its last entry that a stream still marked open, with no turn behind it,
    is closed."""

    incident_retention: float = 3_600.0
    """Seconds a recovery incident is kept after its last change."""

    retention_interval: int = 60
    """Seconds between retention sweeps (1-3600)."""

    health_host: str = Field(default="127.0.0.1", validation_alias="DURACHAT_JOBS_HOST")
    """Address the worker's health and metrics listener binds to."""

    health_port: int | None = Field(default=None, validation_alias="DURACHAT_JOBS_PORT")
    """Port of the worker's `/healthz`, `/readyz` and `/metrics` listener; unset: no listener
    (0 picks a free one)."""

    webhooks: WebhookSettings = Field(default_factory=WebhookSettings)
    """Webhook deliveries (`DURACHAT_WEBHOOK_*`)."""


def process_env(**overrides: str) -> dict[str, str]:
    """Return this process's environment with `overrides` applied (for spawning children)."""
    env = dict(os.environ)
    env.update(overrides)
    return env
