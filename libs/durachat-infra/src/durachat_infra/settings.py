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


class CommonSettings(BaseSettings):
    """Settings shared by the gateway, shard and jobs processes."""

    model_config = SettingsConfigDict(env_prefix="DURACHAT_", extra="ignore")

    redis_url: str = Field(default="redis://127.0.0.1:6379/0", validation_alias="REDIS_URL")
    """Redis server holding the event logs, membership, leases and job queues."""

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

    log_maxlen: int = 10_000
    """Approximate maximum entries kept in a conversation's event log."""

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

    max_frame_bytes: int = 4 * 1024 * 1024
    """Largest client frame accepted."""

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


def process_env(**overrides: str) -> dict[str, str]:
    """Return this process's environment with `overrides` applied (for spawning children)."""
    env = dict(os.environ)
    env.update(overrides)
    return env
