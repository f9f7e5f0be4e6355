"""Repairing stored JSON that cannot be read safely
(docs/operations.md#stored-data-that-cannot-be-read).

Reads never fail on such a document (the store hands out what can be kept of it, see
`_safe_json`), but the row stays as it was. The repair makes that permanent: every JSON column
of every row is checked, and a document nested past `durachat.limits.MAX_JSON_DEPTH` (a
message: `MAX_MESSAGE_DEPTH`), or one that is not readable JSON at all, is copied to
`quarantined_rows` as it was and rewritten as the store hands it out. A message keeps its id
and role, and every part within the bound.

Runs once as migration 0005, and on demand as `durachat-admin repair`. Plain SQL only, so the
migration does not depend on the models of later versions. Idempotent: a repaired row is within
the bound and is left alone the next time.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

from sqlalchemy import text
from sqlalchemy.engine import Connection

from durachat_infra.store._safe_json import (
    MESSAGE_MAX_DEPTH,
    STORED_MAX_DEPTH,
    Problem,
    decode_stored,
    stored_message,
    too_deep,
)

BATCH: Final = 500


@dataclass(frozen=True, slots=True)
class _Column:
    table: str
    column: str
    conversation: str
    """The column holding the row's conversation id."""
    nullable: bool = True


COLUMNS: Final = (
    _Column("messages", "body", "conversation_id", nullable=False),
    _Column("conversations", "last_body", "id"),
    _Column("conversations", "last_client_tools", "id"),
    _Column("turns", "request", "conversation_id"),
    _Column("turns", "stash", "conversation_id"),
    _Column("tool_executions", "input", "conversation_id"),
    _Column("tool_executions", "output", "conversation_id"),
    _Column("recovery_incidents", "data", "conversation_id"),
)
"""Every JSON column of the store."""


@dataclass(frozen=True, slots=True)
class Repaired:
    """One document that was quarantined and rewritten."""

    table: str
    column: str
    row_id: int
    conversation_id: int | None
    reason: str


def repair_rows(conn: Connection) -> list[Repaired]:
    """Quarantine and rewrite every stored JSON document that cannot be read safely, in the
    caller's transaction; returns what was repaired."""
    repaired: list[Repaired] = []
    for column in COLUMNS:
        for row in _rows(conn, column):
            found = _check(column, row)
            if found is None:
                continue
            rewritten, problem = found
            conn.execute(
                text(
                    "INSERT INTO quarantined_rows"
                    " (table_name, column_name, row_id, conversation_id, reason, original)"
                    " VALUES (:table, :column, :row, :conversation, :reason, :original)"
                ),
                {
                    "table": column.table,
                    "column": column.column,
                    "row": row.id,
                    "conversation": row.conversation,
                    "reason": str(problem),
                    "original": row.document,
                },
            )
            conn.execute(
                text(f"UPDATE {column.table} SET {column.column} = :value WHERE id = :row"),
                {"value": rewritten, "row": row.id},
            )
            repaired.append(
                Repaired(column.table, column.column, row.id, row.conversation, str(problem))
            )
    return repaired


def _rows(conn: Connection, column: _Column) -> Iterator[Any]:
    """The rows of a column that hold a document, in batches by id."""
    extra = ", message_id, role" if column.table == "messages" else ""
    after = -1
    while True:
        batch = conn.execute(
            text(
                f"SELECT id, {column.conversation} AS conversation, {column.column} AS document"
                f"{extra} FROM {column.table}"
                f" WHERE id > :after AND {column.column} IS NOT NULL ORDER BY id LIMIT :batch"
            ),
            {"after": after, "batch": BATCH},
        ).all()
        yield from batch
        if len(batch) < BATCH:
            return
        after = batch[-1].id


def _check(column: _Column, row: Any) -> tuple[str | None, Problem] | None:
    """The rewritten document and why, or None for a document that reads safely."""
    document = str(row.document)
    bound = MESSAGE_MAX_DEPTH if column.table == "messages" else STORED_MAX_DEPTH
    if too_deep(document, bound) is None:
        try:
            json.loads(document)
            return None
        except (ValueError, RecursionError):
            pass
    if column.table == "messages":
        message, problem = stored_message(document, str(row.message_id), str(row.role))
        if problem is None:
            return None
        return _encode(message), problem
    value, problem = decode_stored(document)
    if problem is None:
        return None
    if value is None and not column.nullable:
        return None
    return (None if value is None else _encode(value)), problem


def _encode(value: Any) -> str:
    # As the store's JSONText encodes.
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
