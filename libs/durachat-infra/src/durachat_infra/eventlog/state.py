"""The stream state of a conversation, mirrored by gateways for the resume handshake.

The state of each branch lives in the conversation's state hash (`dc:{tag}:state`). Entries
that change it carry the change (`StateChange`), which the append script applies to the hash
and gateways apply to their mirror. `StreamState` decodes the hash and builds every change, so
the encoding has one home (docs/architecture.md#the-event-log).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Final, TypeAlias

from durachat.protocol import MAIN_BRANCH, encode_json

StateChange: TypeAlias = dict[str, str]
"""Fields of a branch's stream state to set, unprefixed (see `state_fields`)."""

ENTRY_ID: Final = "$id"
"""A value in a state change that stands for the id of the entry making the change (the
append script puts the id in)."""


def state_prefix(branch: str) -> str:
    """The prefix of a branch's fields in the conversation's state hash: none for main,
    `<branch>|` for the others."""
    return "" if branch in ("", MAIN_BRANCH) else f"{branch}|"


def state_fields(branch: str, change: StateChange) -> StateChange:
    """A stream-state change as stored in the conversation's state hash (see `state_prefix`)."""
    prefix = state_prefix(branch)
    return {f"{prefix}{key}": value for key, value in change.items()} if prefix else change


def branch_change(branch: str, stored: StateChange) -> StateChange:
    """The change of `branch`'s own fields in a change as stored (`state_fields` undone)."""
    prefix = state_prefix(branch)
    return {key.removeprefix(prefix): value for key, value in stored.items()} if prefix else stored


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
        by_branch: dict[str, dict[str, str]] = {MAIN_BRANCH: {}}
        for key, value in fields.items():
            branch, sep, field = key.rpartition("|")
            by_branch.setdefault(branch if sep else MAIN_BRANCH, {})[field if sep else key] = value
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

    def apply(self, change: StateChange, entry_id: str) -> None:
        """Apply a control change (the same one the writer applied to the hash)."""
        for field, value in change.items():
            resolved = entry_id if value == ENTRY_ID else value
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

    def gave_up(self) -> tuple[str, str] | None:
        """The request id and terminal message of the turn recovery last gave up on, if one
        is recorded (`terminal`)."""
        if not self.terminal:
            return None
        record = json.loads(self.terminal)
        return str(record.get("req", "")), str(record.get("body", ""))

    # The changes each step of a stream makes. The field order is part of the log's format
    # (an entry keeps its change as JSON).

    @staticmethod
    def change_pending(request_id: str) -> StateChange:
        """A turn is accepted and will stream later. A new request clears the record of the
        last one recovery gave up on."""
        return {"status": "pending", "req": request_id, "start": "", "cont": "0", "terminal": ""}

    @staticmethod
    def change_streaming(request_id: str, *, continuation: bool) -> StateChange:
        """The request's stream starts at the entry making the change."""
        return {
            "status": "streaming",
            "req": request_id,
            "start": ENTRY_ID,
            "cont": "1" if continuation else "0",
            "terminal": "",
        }

    @staticmethod
    def change_ended(*, streamed: bool) -> StateChange:
        """The request ended: `done` if it streamed (its chunks stay replayable), else `idle`."""
        return {"status": "done" if streamed else "idle"}

    @staticmethod
    def change_idle() -> StateChange:
        """No turn is accepted any more (the last one ended without streaming)."""
        return {"status": "idle"}

    @staticmethod
    def change_cleared() -> StateChange:
        """The conversation (or branch) was cleared: back to the initial state."""
        return {
            "status": "idle",
            "req": "",
            "start": "",
            "cont": "0",
            "terminal": "",
            "recovering": "",
        }

    @staticmethod
    def change_recovering(root_request_id: str, *, active: bool) -> StateChange:
        """A turn is (or no longer is) being recovered, as of now."""
        return {
            "recovering": root_request_id if active else "",
            "recovering_at": str(int(time.time() * 1000)),
        }

    @staticmethod
    def change_gave_up(request_id: str, text: str) -> StateChange:
        """Recovery gave up on `request_id`, which ended with `text`: recorded for clients that
        connect later."""
        return {
            "status": "done",
            "terminal": encode_json({"req": request_id, "body": text}),
            "recovering": "",
        }
