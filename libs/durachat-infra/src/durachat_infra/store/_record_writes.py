"""Turn, tool-ledger and recovery-incident writes of a fenced transaction."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select, update

from durachat_infra.store import _statements as statements
from durachat_infra.store._engine import insert_new
from durachat_infra.store._records import (
    TURN_KINDS,
    TURN_STATUSES,
    ToolCallRecord,
    TurnKind,
    TurnStatus,
)
from durachat_infra.store._transaction_core import TransactionCore
from durachat_infra.store._types import utcnow
from durachat_infra.store.errors import StoreError
from durachat_infra.store.models import RecoveryIncident, ToolExecution, Turn


class RecordWrites(TransactionCore):
    """The turn, tool-call and incident records of `FencedTransaction`."""

    async def begin_turn(
        self, request_id: str, *, kind: TurnKind, owner: str, request: dict[str, Any] | None
    ) -> bool:
        """Record a new turn with status `accepted` under this transaction's epoch.

        Requests are idempotent by id: if a turn with `request_id` exists, nothing changes.

        Returns:
            `True` if the turn was recorded, `False` if it already existed.

        Raises:
            ValueError: unknown `kind` or empty `request_id`.
        """
        if not request_id:
            raise ValueError("request_id must not be empty")
        if kind not in TURN_KINDS:
            raise ValueError(f"unknown turn kind {kind!r}; expected one of {sorted(TURN_KINDS)}")
        async with self._op("begin turn") as conn:
            inserted = await conn.execute(
                statements.begin_turn(conn.dialect),
                statements.params(
                    cid=self.conversation_id,
                    request_id=request_id,
                    kind=kind,
                    owner=owner,
                    epoch=self.epoch,
                    request=request,
                ),
            )
            return inserted.first() is not None

    async def update_turn(
        self,
        request_id: str,
        *,
        status: TurnStatus | None = None,
        message_id: str | None = None,
        error: str | None = None,
        heartbeat: bool = False,
        stash: dict[str, Any] | None = None,
        owner: str | None = None,
    ) -> None:
        """Update the turn `request_id`; arguments left at `None`/`False` keep their value.

        Args:
            request_id: the turn to update.
            status: the new status.
            message_id: the assistant message the turn produces.
            error: the error message of a failed turn.
            heartbeat: set `heartbeat_at` to now.
            stash: replace the recovery stash.
            owner: take the turn over for another shard; also records this transaction's epoch
                as the turn's epoch (recovery by a new owner).

        Raises:
            ValueError: unknown `status`.
            StoreError: there is no turn `request_id` in this conversation.
        """
        if status is not None and status not in TURN_STATUSES:
            raise ValueError(
                f"unknown turn status {status!r}; expected one of {sorted(TURN_STATUSES)}"
            )
        values: dict[str, Any] = {"updated_at": utcnow()}
        if status is not None:
            values["status"] = status
        if message_id is not None:
            values["message_id"] = message_id
        if error is not None:
            values["error"] = error
        if heartbeat:
            values["heartbeat_at"] = values["updated_at"]
        if stash is not None:
            values["stash"] = stash
        if owner is not None:
            values["owner"] = owner
            values["epoch"] = self.epoch
        async with self._op("update turn") as conn:
            if values.keys() == {"updated_at", "status", "message_id"}:
                # How every turn ends: the prepared statement (see `_statements`).
                result = await conn.execute(
                    statements.SETTLE_TURN,
                    statements.params(
                        cid=self.conversation_id,
                        request_id=request_id,
                        status=values["status"],
                        message_id=values["message_id"],
                        now=values["updated_at"],
                    ),
                )
            else:
                result = await conn.execute(
                    update(Turn)
                    .where(
                        Turn.conversation_id == self.conversation_id,
                        Turn.request_id == request_id,
                    )
                    .values(**values)
                )
            if result.rowcount != 1:
                raise StoreError(f"no turn {request_id!r} in conversation {self.conversation_id}")

    async def record_tool_call(
        self, tool_call_id: str, *, tool_name: str, input: Any, owner: str
    ) -> ToolCallRecord | None:
        """Enter a server tool call in the ledger as `running`, before it runs.

        Returns:
            `None` if the call is new (it may run now), else the call's existing record, which
            is left as it is: a completed call is never run again.
        """
        async with self._op("record tool call") as conn:
            inserted = await conn.execute(
                insert_new(
                    conn,
                    ToolExecution,
                    ["conversation_id", "tool_call_id"],
                    conversation_id=self.conversation_id,
                    tool_call_id=tool_call_id,
                    tool_name=tool_name,
                    status="running",
                    input=input,
                    owner=owner,
                    epoch=self.epoch,
                ).returning(ToolExecution.id)
            )
            if inserted.first() is not None:
                return None
            row = (
                await conn.execute(
                    select(
                        ToolExecution.tool_name,
                        ToolExecution.status,
                        ToolExecution.output,
                        ToolExecution.error,
                    ).where(
                        ToolExecution.conversation_id == self.conversation_id,
                        ToolExecution.tool_call_id == tool_call_id,
                    )
                )
            ).one()
        return ToolCallRecord(tool_call_id, row.tool_name, row.status, row.output, row.error)

    async def finish_tool_call(
        self, tool_call_id: str, *, output: Any = None, error: str | None = None
    ) -> None:
        """Record how a server tool call ended: its output, or `error`."""
        async with self._op("finish tool call") as conn:
            await conn.execute(
                update(ToolExecution)
                .where(
                    ToolExecution.conversation_id == self.conversation_id,
                    ToolExecution.tool_call_id == tool_call_id,
                )
                .values(
                    status="error" if error is not None else "completed",
                    output=output,
                    error=error,
                    updated_at=utcnow(),
                )
            )

    async def save_incident(
        self, incident_id: str, *, request_id: str, status: str, attempt: int, data: dict[str, Any]
    ) -> None:
        """Create or replace the recovery incident `incident_id`."""
        async with self._op("save incident") as conn:
            inserted = await conn.execute(
                insert_new(
                    conn,
                    RecoveryIncident,
                    ["conversation_id", "incident_id"],
                    conversation_id=self.conversation_id,
                    incident_id=incident_id,
                    request_id=request_id,
                    status=status,
                    attempt=attempt,
                    data=data,
                ).returning(RecoveryIncident.id)
            )
            if inserted.first() is not None:
                return
            await conn.execute(
                update(RecoveryIncident)
                .where(
                    RecoveryIncident.conversation_id == self.conversation_id,
                    RecoveryIncident.incident_id == incident_id,
                )
                .values(
                    request_id=request_id,
                    status=status,
                    attempt=attempt,
                    data=data,
                    updated_at=utcnow(),
                )
            )
