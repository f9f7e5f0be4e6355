"""Initial schema: tenants, conversations, branches, messages, turns; seed the default tenant.

Revision ID: 0001
Revises:
Create Date: 2025-11-30

Hand-written. Constraint and index names follow `models.NAMING_CONVENTION`.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# 64-bit keys on PostgreSQL; SQLite only autoincrements a column declared exactly INTEGER.
_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_TS = sa.DateTime(timezone=True)


def _timestamps() -> list[sa.Column[object]]:
    return [
        sa.Column("created_at", _TS, nullable=False, server_default=sa.func.now()),
        sa.Column("updated_at", _TS, nullable=False, server_default=sa.func.now()),
    ]


def upgrade() -> None:
    tenants = op.create_table(
        "tenants",
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("created_at", _TS, nullable=False, server_default=sa.func.now()),
        sa.PrimaryKeyConstraint("id", name="pk_tenants"),
    )
    op.create_table(
        "conversations",
        sa.Column("id", _ID, nullable=False),
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("agent", sa.Text(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("epoch", sa.BigInteger(), nullable=False, server_default=sa.text("0")),
        sa.Column("next_seq", sa.BigInteger(), nullable=False, server_default=sa.text("0")),
        sa.Column("last_body", sa.Text(), nullable=True),
        sa.Column("last_client_tools", sa.Text(), nullable=True),
        *_timestamps(),
        sa.PrimaryKeyConstraint("id", name="pk_conversations"),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name="fk_conversations_tenant_id_tenants"
        ),
        sa.UniqueConstraint(
            "tenant_id", "agent", "name", name="uq_conversations_tenant_id_agent_name"
        ),
        sqlite_autoincrement=True,
    )
    op.create_table(
        "messages",
        sa.Column("id", _ID, nullable=False),
        sa.Column("conversation_id", _ID, nullable=False),
        sa.Column("message_id", sa.Text(), nullable=False),
        sa.Column("parent_id", _ID, nullable=True),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("role", sa.Text(), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        *_timestamps(),
        sa.PrimaryKeyConstraint("id", name="pk_messages"),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name="fk_messages_conversation_id_conversations",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["parent_id"], ["messages.id"], name="fk_messages_parent_id_messages"
        ),
        sa.UniqueConstraint("conversation_id", "seq", name="uq_messages_conversation_id_seq"),
        sqlite_autoincrement=True,
    )
    op.create_index(
        "ix_messages_conversation_id_message_id", "messages", ["conversation_id", "message_id"]
    )
    op.create_index("ix_messages_parent_id", "messages", ["parent_id"])
    op.create_table(
        "branches",
        sa.Column("id", _ID, nullable=False),
        sa.Column("conversation_id", _ID, nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("leaf_id", _ID, nullable=True),
        sa.Column("parent_branch_id", _ID, nullable=True),
        sa.Column("fork_message_id", _ID, nullable=True),
        *_timestamps(),
        sa.PrimaryKeyConstraint("id", name="pk_branches"),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name="fk_branches_conversation_id_conversations",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["leaf_id"], ["messages.id"], name="fk_branches_leaf_id_messages", ondelete="SET NULL"
        ),
        sa.ForeignKeyConstraint(
            ["parent_branch_id"],
            ["branches.id"],
            name="fk_branches_parent_branch_id_branches",
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["fork_message_id"],
            ["messages.id"],
            name="fk_branches_fork_message_id_messages",
            ondelete="SET NULL",
        ),
        sa.UniqueConstraint("conversation_id", "name", name="uq_branches_conversation_id_name"),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_branches_leaf_id", "branches", ["leaf_id"])
    op.create_index("ix_branches_fork_message_id", "branches", ["fork_message_id"])
    op.create_index("ix_branches_parent_branch_id", "branches", ["parent_branch_id"])
    op.create_table(
        "turns",
        sa.Column("id", _ID, nullable=False),
        sa.Column("conversation_id", _ID, nullable=False),
        sa.Column("request_id", sa.Text(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("owner", sa.Text(), nullable=True),
        sa.Column("epoch", sa.BigInteger(), nullable=False),
        sa.Column("heartbeat_at", _TS, nullable=True),
        sa.Column("message_id", sa.Text(), nullable=True),
        sa.Column("request", sa.Text(), nullable=True),
        sa.Column("stash", sa.Text(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        *_timestamps(),
        sa.PrimaryKeyConstraint("id", name="pk_turns"),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name="fk_turns_conversation_id_conversations",
            ondelete="CASCADE",
        ),
        sa.UniqueConstraint(
            "conversation_id", "request_id", name="uq_turns_conversation_id_request_id"
        ),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_turns_status_heartbeat_at", "turns", ["status", "heartbeat_at"])

    op.bulk_insert(tenants, [{"id": "default", "name": "Default tenant"}])


def downgrade() -> None:
    op.drop_table("turns")
    op.drop_table("branches")
    op.drop_table("messages")
    op.drop_table("conversations")
    op.drop_table("tenants")
