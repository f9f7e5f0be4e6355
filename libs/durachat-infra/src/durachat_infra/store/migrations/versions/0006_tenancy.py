"""Tenancy: tenant quotas and settings, API keys, token signing keys.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02

Hand-written. Constraint and index names follow `models.NAMING_CONVENTION`.

* `tenants` gets `quotas` and `settings` (JSON text, NULL: the defaults).
* `api_keys`: a tenant's API keys; only a hash of each secret is stored.
* `signing_keys`: the secrets a tenant's client tokens are signed with.

Both new tables go with their tenant (`ON DELETE CASCADE`). The downgrade drops them and the
new columns; existing tenants and conversations are untouched either way.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    # Plain ALTER TABLE on SQLite too: recreating `tenants` would delete and re-insert the rows
    # every conversation refers to.
    with op.batch_alter_table("tenants", recreate="never") as batch:
        batch.add_column(sa.Column("quotas", sa.Text(), nullable=True))
        batch.add_column(sa.Column("settings", sa.Text(), nullable=True))
    op.create_table(
        "api_keys",
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("secret_hash", sa.Text(), nullable=False),
        sa.Column("label", sa.Text(), nullable=True),
        sa.Column("created_at", _TS, nullable=False, server_default=sa.func.now()),
        sa.Column("revoked_at", _TS, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_api_keys"),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name="fk_api_keys_tenant_id_tenants", ondelete="CASCADE"
        ),
    )
    op.create_index("ix_api_keys_tenant_id", "api_keys", ["tenant_id"])
    op.create_table(
        "signing_keys",
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("secret", sa.Text(), nullable=False),
        sa.Column("created_at", _TS, nullable=False, server_default=sa.func.now()),
        sa.Column("retires_at", _TS, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_signing_keys"),
        sa.ForeignKeyConstraint(
            ["tenant_id"],
            ["tenants.id"],
            name="fk_signing_keys_tenant_id_tenants",
            ondelete="CASCADE",
        ),
    )
    op.create_index("ix_signing_keys_tenant_id", "signing_keys", ["tenant_id"])


def downgrade() -> None:
    op.drop_index("ix_signing_keys_tenant_id", table_name="signing_keys")
    op.drop_table("signing_keys")
    op.drop_index("ix_api_keys_tenant_id", table_name="api_keys")
    op.drop_table("api_keys")
    with op.batch_alter_table("tenants", recreate="never") as batch:
        batch.drop_column("settings")
        batch.drop_column("quotas")
