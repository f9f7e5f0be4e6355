"""Quarantined rows: stored JSON documents too deep to read safely are set aside and rewritten.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01

Hand-written. Constraint and index names follow `models.NAMING_CONVENTION`.

Creates `quarantined_rows`, then runs the repair once (`durachat_infra.store.repair`): every
JSON column of every row is checked, and a document nested past `durachat.limits` is copied to
`quarantined_rows` as it was and rewritten within the bound (docs/operations.md). Rows written
before the shard refused such input become readable again; `durachat-admin repair` runs the
same repair on demand.

The downgrade drops the table; rewritten rows stay rewritten.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from durachat_infra.store.repair import repair_rows

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "quarantined_rows",
        sa.Column("id", _ID, nullable=False),
        sa.Column("table_name", sa.Text(), nullable=False),
        sa.Column("column_name", sa.Text(), nullable=False),
        sa.Column("row_id", sa.BigInteger(), nullable=False),
        sa.Column("conversation_id", sa.BigInteger(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("original", sa.Text(), nullable=False),
        sa.Column("created_at", _TS, nullable=False, server_default=sa.func.now()),
        sa.Column("updated_at", _TS, nullable=False, server_default=sa.func.now()),
        sa.PrimaryKeyConstraint("id", name="pk_quarantined_rows"),
        sqlite_autoincrement=True,
    )
    repair_rows(op.get_bind())


def downgrade() -> None:
    op.drop_table("quarantined_rows")
