"""Branch views: an index for the children of a message; a `main` branch for every conversation.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01

Hand-written. Constraint and index names follow `models.NAMING_CONVENTION`.

* `ix_messages_conversation_id_parent_id_seq` serves the siblings of a message (the children of
  its parent in sequence order) and the roots of a conversation (`parent_id IS NULL`) without
  scanning the conversation.
* Every conversation gets its `main` row if it lacks one (the store has created it with each
  conversation since 0001, so this normally inserts nothing). A conversation found without one
  keeps its messages: `main` points at its newest message. Existing branches are not touched, so
  every conversation's transcript stays what it was.

The downgrade drops the index and keeps the branch rows (0003 has the same `branches` table).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index(
        "ix_messages_conversation_id_parent_id_seq",
        "messages",
        ["conversation_id", "parent_id", "seq"],
    )
    op.execute(
        sa.text(
            "INSERT INTO branches (conversation_id, name, leaf_id)"
            " SELECT c.id, 'main',"
            "  (SELECT m.id FROM messages m WHERE m.conversation_id = c.id"
            "   ORDER BY m.seq DESC LIMIT 1)"
            " FROM conversations c"
            " WHERE NOT EXISTS (SELECT 1 FROM branches b"
            "  WHERE b.conversation_id = c.id AND b.name = 'main')"
        )
    )


def downgrade() -> None:
    op.drop_index("ix_messages_conversation_id_parent_id_seq", table_name="messages")
