"""The tool-execution ledger in SQL, written in the conversation's fenced write order."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from durachat.tools import LedgerEntry
from durachat_infra.store import FencedTransaction, ToolCallRecord

Write = Callable[[Callable[[FencedTransaction], Awaitable[None]]], Awaitable[None]]


class SqlToolLedger:
    """`durachat.tools.ToolLedger` on the `tool_executions` table.

    Each entry is committed before the call runs (and again when it ends), through the owner's
    write chain, so it is fenced like every other write of the conversation.
    """

    def __init__(self, write: Write, owner: str) -> None:
        self._write = write
        self._owner = owner

    async def begin(self, tool_call_id: str, tool_name: str, input: Any) -> LedgerEntry | None:
        """See `ToolLedger.begin`."""
        found: list[ToolCallRecord | None] = []

        async def record(tx: FencedTransaction) -> None:
            found.append(
                await tx.record_tool_call(
                    tool_call_id, tool_name=tool_name, input=input, owner=self._owner
                )
            )

        await self._write(record)
        known = found[0]
        if known is None:
            return None
        status = known.status if known.status in ("completed", "error") else "running"
        return LedgerEntry(status, known.output, known.error)  # type: ignore[arg-type]

    async def finish(
        self, tool_call_id: str, *, output: Any = None, error: str | None = None
    ) -> None:
        """See `ToolLedger.finish`."""

        async def record(tx: FencedTransaction) -> None:
            await tx.finish_tool_call(tool_call_id, output=output, error=error)

        await self._write(record)
