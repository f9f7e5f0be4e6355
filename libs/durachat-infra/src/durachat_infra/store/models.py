"""SQLAlchemy models of the store's tables.

The models describe the schema at the newest migration; the migrations in `migrations/versions`
are hand-written and are what creates the schema (a test checks the two agree). Queries use these
models through SQLAlchemy Core; there are no ORM relationships or sessions.

Conventions:

* surrogate keys are 64-bit on PostgreSQL (`BIGSERIAL`) and `INTEGER PRIMARY KEY AUTOINCREMENT`
  on SQLite, so ids are never reused after a delete on either database;
* timestamps are timezone-aware UTC (`UTCDateTime`), JSON documents are text (`JSONText`);
* every constraint and index has a deterministic name (`NAMING_CONVENTION`), so later migrations
  can alter them by name on both databases (SQLite batch mode needs names).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from durachat_infra.store._types import JSONText, UTCDateTime, utcnow

__all__ = [
    "NAMING_CONVENTION",
    "ApiKey",
    "Base",
    "Branch",
    "Conversation",
    "Message",
    "QuarantinedRow",
    "RecoveryIncident",
    "SigningKey",
    "Tenant",
    "Turn",
    "Webhook",
]

NAMING_CONVENTION = {
    "pk": "pk_%(table_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
}

Id = BigInteger().with_variant(Integer(), "sqlite")
"""Surrogate key type: `BIGINT` on PostgreSQL; `INTEGER` on SQLite, the only rowid alias."""


class Base(DeclarativeBase):
    """Declarative base holding the store's `MetaData`."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {datetime: UTCDateTime(), str: Text()}


class _Timestamps:
    created_at: Mapped[datetime] = mapped_column(default=utcnow, server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(
        default=utcnow, onupdate=utcnow, server_default=func.now()
    )


class Tenant(Base):
    """A tenant; every conversation belongs to one. The first migration seeds `default`."""

    __tablename__ = "tenants"

    id: Mapped[str] = mapped_column(primary_key=True)
    name: Mapped[str]
    created_at: Mapped[datetime] = mapped_column(default=utcnow, server_default=func.now())
    quotas: Mapped[dict[str, Any] | None] = mapped_column(JSONText)
    """The quotas this tenant overrides (docs/security.md#quotas); the rest are the defaults."""
    settings: Mapped[dict[str, Any] | None] = mapped_column(JSONText)


class ApiKey(Base):
    """An API key of a tenant (docs/security.md): its public id and a hash of its secret."""

    __tablename__ = "api_keys"
    __table_args__ = (Index(None, "tenant_id"),)

    id: Mapped[str] = mapped_column(primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    secret_hash: Mapped[str]
    label: Mapped[str | None]
    created_at: Mapped[datetime] = mapped_column(default=utcnow, server_default=func.now())
    revoked_at: Mapped[datetime | None]


class SigningKey(Base):
    """A secret that signs a tenant's client tokens; rotated with an overlap
    (docs/security.md#rotation)."""

    __tablename__ = "signing_keys"
    __table_args__ = (Index(None, "tenant_id"),)

    id: Mapped[str] = mapped_column(primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    secret: Mapped[str]
    created_at: Mapped[datetime] = mapped_column(default=utcnow, server_default=func.now())
    retires_at: Mapped[datetime | None]


class Webhook(Base):
    """A URL a tenant's events are delivered to (docs/observability.md#webhooks), with the
    secret its deliveries are signed with."""

    __tablename__ = "webhooks"
    __table_args__ = (Index(None, "tenant_id"),)

    id: Mapped[str] = mapped_column(primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    url: Mapped[str]
    types: Mapped[list[str] | None] = mapped_column(JSONText)
    """The event type patterns it receives (`None`: every type)."""
    secret: Mapped[str]
    created_at: Mapped[datetime] = mapped_column(default=utcnow, server_default=func.now())


class Conversation(_Timestamps, Base):
    """A conversation `(tenant, agent, name)` with its fencing epoch and sequence counter."""

    __tablename__ = "conversations"
    __table_args__ = (
        UniqueConstraint("tenant_id", "agent", "name"),
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"))
    agent: Mapped[str]
    name: Mapped[str]
    epoch: Mapped[int] = mapped_column(BigInteger, default=0, server_default=text("0"))
    """Fencing token: only a writer presenting this epoch may write
    (docs/architecture.md#ownership)."""
    next_seq: Mapped[int] = mapped_column(BigInteger, default=0, server_default=text("0"))
    """Next message sequence number to hand out."""
    last_body: Mapped[dict[str, Any] | None] = mapped_column(JSONText)
    last_client_tools: Mapped[list[Any] | None] = mapped_column(JSONText)


class Message(_Timestamps, Base):
    """A node of a conversation's message tree; `body` is the UIMessage JSON."""

    __tablename__ = "messages"
    __table_args__ = (
        UniqueConstraint("conversation_id", "seq"),
        Index(None, "conversation_id", "message_id"),
        Index(None, "parent_id"),
        # The children of a message (siblings, "2 / 3"), and the roots of a conversation, in
        # sequence order (migration 0004).
        Index(None, "conversation_id", "parent_id", "seq"),
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    conversation_id: Mapped[int] = mapped_column(
        Id, ForeignKey("conversations.id", ondelete="CASCADE")
    )
    message_id: Mapped[str]
    """The UIMessage id. Not unique: an edited message keeps its id on another branch."""
    parent_id: Mapped[int | None] = mapped_column(Id, ForeignKey("messages.id"))
    seq: Mapped[int] = mapped_column(BigInteger)
    role: Mapped[str]
    body: Mapped[dict[str, Any]] = mapped_column(JSONText)


class Branch(_Timestamps, Base):
    """A named pointer to a leaf of the message tree; `main` exists for every conversation."""

    __tablename__ = "branches"
    __table_args__ = (
        UniqueConstraint("conversation_id", "name"),
        # The three foreign keys into messages/branches are checked on every delete of a message
        # or branch; without these indexes each check would scan the whole table.
        Index(None, "leaf_id"),
        Index(None, "fork_message_id"),
        Index(None, "parent_branch_id"),
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    conversation_id: Mapped[int] = mapped_column(
        Id, ForeignKey("conversations.id", ondelete="CASCADE")
    )
    name: Mapped[str]
    leaf_id: Mapped[int | None] = mapped_column(Id, ForeignKey("messages.id", ondelete="SET NULL"))
    parent_branch_id: Mapped[int | None] = mapped_column(
        Id, ForeignKey("branches.id", ondelete="SET NULL")
    )
    fork_message_id: Mapped[int | None] = mapped_column(
        Id, ForeignKey("messages.id", ondelete="SET NULL")
    )


class Turn(_Timestamps, Base):
    """A turn: the durable record of one request, its owner, heartbeat and stash
    (docs/recovery.md)."""

    __tablename__ = "turns"
    __table_args__ = (
        UniqueConstraint("conversation_id", "request_id"),
        Index(None, "status", "heartbeat_at"),
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    conversation_id: Mapped[int] = mapped_column(
        Id, ForeignKey("conversations.id", ondelete="CASCADE")
    )
    request_id: Mapped[str]
    kind: Mapped[str]
    status: Mapped[str]
    owner: Mapped[str | None]
    epoch: Mapped[int] = mapped_column(BigInteger)
    heartbeat_at: Mapped[datetime | None]
    message_id: Mapped[str | None]
    request: Mapped[dict[str, Any] | None] = mapped_column(JSONText)
    stash: Mapped[dict[str, Any] | None] = mapped_column(JSONText)
    error: Mapped[str | None]


class ToolExecution(_Timestamps, Base):
    """The tool-execution ledger: one row per server tool call, written before it runs and
    after it ends, so no completed call is ever executed twice (docs/architecture.md#storage)."""

    __tablename__ = "tool_executions"
    __table_args__ = (
        UniqueConstraint("conversation_id", "tool_call_id"),
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    conversation_id: Mapped[int] = mapped_column(
        Id, ForeignKey("conversations.id", ondelete="CASCADE")
    )
    tool_call_id: Mapped[str]
    tool_name: Mapped[str]
    status: Mapped[str]
    """`running`, `completed` or `error`."""
    input: Mapped[Any | None] = mapped_column(JSONText)
    output: Mapped[Any | None] = mapped_column(JSONText)
    error: Mapped[str | None]
    owner: Mapped[str | None]
    epoch: Mapped[int] = mapped_column(BigInteger)


class RecoveryIncident(_Timestamps, Base):
    """The budget state of a turn under crash recovery (docs/recovery.md#budgets): attempts,
    progress and how it ended. One row per incident; stale rows are swept by the jobs service."""

    __tablename__ = "recovery_incidents"
    __table_args__ = (
        UniqueConstraint("conversation_id", "incident_id"),
        Index(None, "updated_at"),
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    conversation_id: Mapped[int] = mapped_column(
        Id, ForeignKey("conversations.id", ondelete="CASCADE")
    )
    incident_id: Mapped[str]
    request_id: Mapped[str]
    status: Mapped[str]
    attempt: Mapped[int] = mapped_column(Integer)
    data: Mapped[dict[str, Any] | None] = mapped_column(JSONText)


class QuarantinedRow(_Timestamps, Base):
    """A stored JSON document that could not be read safely, as it was before `durachat-admin
    repair` (or migration 0005) rewrote it (docs/operations.md#stored-data-that-cannot-be-read).
    Kept for inspection; nothing reads it. No foreign keys: it outlives what it came from."""

    __tablename__ = "quarantined_rows"
    __table_args__ = ({"sqlite_autoincrement": True},)

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    table_name: Mapped[str]
    column_name: Mapped[str]
    row_id: Mapped[int] = mapped_column(BigInteger)
    conversation_id: Mapped[int | None] = mapped_column(BigInteger)
    reason: Mapped[str]
    original: Mapped[str]
