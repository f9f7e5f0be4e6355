"""The stream state of a conversation, mirrored by gateways for the resume handshake."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class StreamState:
    """Where a conversation's stream is.

    `status` is `idle` (nothing accepted), `pending` (a turn is accepted but has not started
    streaming), `streaming`, or `done` (the last stream finished; its chunks are still in the log
    from `start`).
    """

    status: str = "idle"
    request: str = ""
    start: str = ""
    continuation: bool = False
    recovering: str = ""
    """Root request id of a turn being recovered ("" when none)."""
    recovering_at: float = 0.0
    """When recovery started (ms since the epoch)."""
    terminal: str = ""
    """JSON `{"req", "body"}` of the last turn that ended in an error recovery could not mend,
    replayed to clients that reconnect ("" when none)."""

    @classmethod
    def all_from_hash(cls, fields: dict[str, str]) -> dict[str, StreamState]:
        """Decode the Redis hash form into the state of every branch found in it (the fields
        of a branch other than main are prefixed with `<branch>|`)."""
        by_branch: dict[str, dict[str, str]] = {"main": {}}
        for key, value in fields.items():
            branch, sep, field = key.rpartition("|")
            by_branch.setdefault(branch if sep else "main", {})[field if sep else key] = value
        return {branch: cls.from_hash(values) for branch, values in by_branch.items()}

    @classmethod
    def from_hash(cls, fields: dict[str, str]) -> StreamState:
        """Decode the Redis hash form (of one branch, unprefixed)."""
        return cls(
            status=fields.get("status", "idle") or "idle",
            request=fields.get("req", ""),
            start=fields.get("start", ""),
            continuation=fields.get("cont", "0") == "1",
            recovering=fields.get("recovering", ""),
            recovering_at=float(fields.get("recovering_at", "0") or 0),
            terminal=fields.get("terminal", ""),
        )

    def apply(self, change: dict[str, str], entry_id: str) -> None:
        """Apply a control change (the same one the writer applied to the hash)."""
        for field, value in change.items():
            resolved = entry_id if value == "$id" else value
            if field == "status":
                self.status = resolved
            elif field == "req":
                self.request = resolved
            elif field == "start":
                self.start = resolved
            elif field == "cont":
                self.continuation = resolved == "1"
            elif field == "recovering":
                self.recovering = resolved
            elif field == "recovering_at":
                self.recovering_at = float(resolved or 0)
            elif field == "terminal":
                self.terminal = resolved
