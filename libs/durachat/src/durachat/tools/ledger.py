"""The tool-execution ledger: a server tool call never runs twice.

Before a server tool runs, its call is entered in the ledger; when it ends, its output (or
error) is recorded. A call seen again — a turn retried, continued or recovered on another
worker — is not executed a second time: a completed call gives back its recorded output, and a
call that was still running when its worker died is reported as interrupted instead of being
silently re-run (it may have had effects).

The host supplies the ledger (the shard keeps it in SQL, in the conversation's fenced write
order); `MemoryToolLedger` is the in-process one for tests and single-process use.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol

INTERRUPTED_TOOL_ERROR = (
    "The tool call was interrupted while it ran; it was not run again because it may already "
    "have taken effect."
)

LedgerStatus = Literal["running", "completed", "error"]


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """What the ledger knows of a call."""

    status: LedgerStatus
    output: Any = None
    error: str | None = None


class ToolLedger(Protocol):
    """Where server tool calls are recorded (durably, in the host)."""

    async def begin(self, tool_call_id: str, tool_name: str, input: Any) -> LedgerEntry | None:
        """Enter a call before it runs; returns `None` for a new call (run it), else what is
        already known of it (do not run it)."""
        ...

    async def finish(
        self, tool_call_id: str, *, output: Any = None, error: str | None = None
    ) -> None:
        """Record how a call ended."""
        ...


class MemoryToolLedger:
    """A ledger in memory (tests; single-process hosts)."""

    def __init__(self) -> None:
        self.entries: dict[str, LedgerEntry] = {}

    async def begin(self, tool_call_id: str, tool_name: str, input: Any) -> LedgerEntry | None:
        """See `ToolLedger.begin`."""
        known = self.entries.get(tool_call_id)
        if known is not None:
            return known
        self.entries[tool_call_id] = LedgerEntry("running")
        return None

    async def finish(
        self, tool_call_id: str, *, output: Any = None, error: str | None = None
    ) -> None:
        """See `ToolLedger.finish`."""
        self.entries[tool_call_id] = (
            LedgerEntry("error", error=error)
            if error is not None
            else LedgerEntry("completed", output)
        )
