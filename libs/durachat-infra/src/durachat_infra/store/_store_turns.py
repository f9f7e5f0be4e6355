"""Reads and unfenced upkeep of turns, recovery incidents and the request context."""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

from sqlalchemy import Row, delete, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from durachat_infra.store._records import (
    OPEN_TURN_STATUSES,
    ConversationKey,
    IncidentRecord,
    OpenTurn,
    TurnKind,
    TurnRecord,
    TurnStatus,
)
from durachat_infra.store._statements import (
    OPEN_TURNS,
    RECENT_REQUEST_IDS,
    REQUEST_CONTEXT,
    TURN_COLUMNS,
    params,
)
from durachat_infra.store._store_core import StoreCore
from durachat_infra.store._types import utcnow
from durachat_infra.store.models import Conversation as ConversationRow
from durachat_infra.store.models import RecoveryIncident, Turn


class TurnReads(StoreCore):
    """The `Store` methods on turns, recovery incidents and the saved request context."""

    async def recent_request_ids(self, conversation_id: int, *, limit: int = 256) -> list[str]:
        """Request ids of the conversation's newest turns, newest first (for fast dedupe)."""

        async def read(conn: AsyncConnection) -> list[str]:
            rows = await conn.execute(RECENT_REQUEST_IDS, params(cid=conversation_id, limit=limit))
            return [str(r[0]) for r in rows]

        # On every activation of a stored conversation (docs/benchmarks.md, "Activation").
        return await self._run_lookup("recent turns", read)

    async def get_turn(self, conversation_id: int, request_id: str) -> TurnRecord | None:
        """Return the turn `request_id` of the conversation, or `None`."""
        async with self._read("get turn") as conn:
            row = (
                await conn.execute(
                    select(*TURN_COLUMNS).where(
                        Turn.conversation_id == conversation_id, Turn.request_id == request_id
                    )
                )
            ).first()
        return None if row is None else _turn_record(row)

    async def open_turns(self, conversation_id: int) -> list[TurnRecord]:
        """The conversation's turns that have not ended (`accepted` or `running`), oldest
        first: after a new owner claims a conversation, the ones its former owner left."""

        async def read(conn: AsyncConnection) -> list[TurnRecord]:
            rows = await conn.execute(OPEN_TURNS, params(cid=conversation_id))
            return [_turn_record(row) for row in rows]

        return await self._run_lookup("open turns", read)

    async def all_open_turns(self, *, limit: int = 1000) -> list[OpenTurn]:
        """Open turns of every conversation, oldest first (the orphan scan of the jobs
        service; the `(status, heartbeat_at)` index serves it)."""
        async with self._read("all open turns") as conn:
            rows = await conn.execute(
                select(
                    *TURN_COLUMNS,
                    ConversationRow.id.label("conv_id"),
                    ConversationRow.tenant_id,
                    ConversationRow.agent,
                    ConversationRow.name,
                )
                .join(ConversationRow, ConversationRow.id == Turn.conversation_id)
                .where(Turn.status.in_(OPEN_TURN_STATUSES))
                .order_by(Turn.id)
                .limit(limit)
            )
            return [
                OpenTurn(
                    row.conv_id,
                    ConversationKey(row.tenant_id, row.agent, row.name),
                    _turn_record(row),
                )
                for row in rows
            ]

    async def heartbeat_turns(self, owner: str) -> int:
        """Mark every open turn of `owner` as alive now; returns how many there are.

        Not fenced: a heartbeat only says the process is alive. Whether it still owns a
        conversation is the lease's business (the orphan scan checks both).
        """

        async def beat(conn: AsyncConnection) -> int:
            result = await conn.execute(
                update(Turn)
                .where(Turn.owner == owner, Turn.status.in_(OPEN_TURN_STATUSES))
                .values(heartbeat_at=utcnow())
            )
            return int(result.rowcount)

        return await self._run_write("heartbeat turns", beat)

    async def get_incident(self, conversation_id: int, incident_id: str) -> IncidentRecord | None:
        """Return a recovery incident, or `None`."""
        async with self._read("get incident") as conn:
            row = (
                await conn.execute(
                    select(
                        RecoveryIncident.incident_id,
                        RecoveryIncident.request_id,
                        RecoveryIncident.status,
                        RecoveryIncident.attempt,
                        RecoveryIncident.data,
                        RecoveryIncident.updated_at,
                    ).where(
                        RecoveryIncident.conversation_id == conversation_id,
                        RecoveryIncident.incident_id == incident_id,
                    )
                )
            ).first()
        if row is None:
            return None
        return IncidentRecord(
            row.incident_id, row.request_id, row.status, row.attempt, row.data or {}, row.updated_at
        )

    async def sweep_incidents(self, before: datetime) -> int:
        """Delete recovery incidents untouched since `before`; returns how many."""
        async with self._write("sweep incidents") as conn:
            result = await conn.execute(
                delete(RecoveryIncident).where(RecoveryIncident.updated_at < before)
            )
            return int(result.rowcount)

    async def load_request_context(
        self, conversation_id: int
    ) -> tuple[dict[str, Any] | None, list[Any] | None]:
        """Return `(last_body, last_client_tools)` as saved by `save_request_context`.

        `(None, None)` if nothing was saved (or the conversation does not exist).
        """

        async def read(conn: AsyncConnection) -> Any:
            return (await conn.execute(REQUEST_CONTEXT, params(cid=conversation_id))).first()

        row = await self._run_lookup("load request context", read)
        if row is None:
            return None, None
        return row.last_body, row.last_client_tools


def _turn_record(row: Row[Any]) -> TurnRecord:
    return TurnRecord(
        request_id=row.request_id,
        kind=cast(TurnKind, row.kind),
        status=cast(TurnStatus, row.status),
        owner=row.owner,
        epoch=row.epoch,
        message_id=row.message_id,
        request=row.request,
        stash=row.stash,
        error=row.error,
        heartbeat_at=row.heartbeat_at,
        created_at=row.created_at,
    )
