"""Recovery incidents: the budget state of a turn being recovered after a crash.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30

Hand-written. Constraint and index names follow `models.NAMING_CONVENTION`.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "recovery_incidents",
        sa.Column("id", _ID, nullable=False),
        sa.Column("conversation_id", _ID, nullable=False),
        sa.Column("incident_id", sa.Text(), nullable=False),
        sa.Column("request_id", sa.Text(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("data", sa.Text(), nullable=True),
        sa.Column("created_at", _TS, nullable=False, server_default=sa.func.now()),
        sa.Column("updated_at", _TS, nullable=False, server_default=sa.func.now()),
        sa.PrimaryKeyConstraint("id", name="pk_recovery_incidents"),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name="fk_recovery_incidents_conversation_id_conversations",
            ondelete="CASCADE",
        ),
        sa.UniqueConstraint(
            "conversation_id",
            "incident_id",
            name="uq_recovery_incidents_conversation_id_incident_id",
        ),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_recovery_incidents_updated_at", "recovery_incidents", ["updated_at"])


def downgrade() -> None:
    op.drop_index("ix_recovery_incidents_updated_at", table_name="recovery_incidents")
    op.drop_table("recovery_incidents")
