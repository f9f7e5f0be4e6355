"""Entries of a conversation's event log.

Each entry carries one outgoing frame (already serialised, so gateways forward bytes), who it is
for, and what it is: a stream chunk of a request, a terminal frame of a request, another frame,
or a control record that changes the stream state gateways mirror.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from durachat.protocol import MAIN_BRANCH


class Kind(StrEnum):
    """What an entry is; one byte on the wire."""

    CHUNK = "c"
    """A `cf_agent_use_chat_response` chunk frame of request `request` (replayable)."""
    TERMINAL = "d"
    """The terminal frame of request `request` (ends its stream)."""
    TRANSCRIPT = "m"
    """A transcript (`cf_agent_chat_messages`): gateways find the latest one in a replay."""
    FRAME = "f"
    """Any other frame (clear, message updates, frames for one connection)."""
    CONTROL = "s"
    """A stream-state change; `frame` is its JSON payload, never sent to clients."""
    VIEW = "v"
    """Moves the connections it is for (among those viewing its branch) to another branch;
    `frame` is `{"branch", "reason"}`. Gateways apply it and tell each client."""


ALL = "*"


EVERY_BRANCH = "*"
"""The branch tag of an entry for connections on every branch (a clear of the whole
conversation)."""


def branch_of(entry_branch: str) -> str:
    """The branch key an entry's tag stands for."""
    return entry_branch or MAIN_BRANCH


def branch_tag(branch: str) -> str:
    """The tag of a branch's entries: none for main (its entries carry no branch field), the
    branch key for the others (`branch_of` undone)."""
    return "" if branch == MAIN_BRANCH else branch


def all_but(connection_id: str) -> str:
    """Target every connection except `connection_id`."""
    return f"-{connection_id}"


def only(connection_id: str) -> str:
    """Target `connection_id` alone."""
    return f"={connection_id}"


def is_for(target: str, connection_id: str) -> bool:
    """Whether an entry with `target` is delivered to `connection_id`."""
    if target == ALL:
        return True
    if target[0] == "-":
        return target[1:] != connection_id
    return target[1:] == connection_id


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One entry read from an event log."""

    id: str
    kind: Kind
    frame: str
    target: str
    request: str
    state: str = ""
    """JSON of the stream-state change this entry made, if any."""
    branch: str = ""
    """The branch the entry belongs to ("" for main, `EVERY_BRANCH` for all of them)."""

    @classmethod
    def from_fields(cls, entry_id: str, fields: dict[str, str]) -> LogEntry:
        """Build an entry from a Redis stream record."""
        return cls(
            id=entry_id,
            kind=Kind(fields.get("k", "f")),
            frame=fields.get("f", ""),
            target=fields.get("t", ALL),
            request=fields.get("r", ""),
            state=fields.get("s", ""),
            branch=fields.get("b", ""),
        )

    def state_change(self) -> dict[str, str] | None:
        """The stream-state change this entry made, if any."""
        if not self.state:
            return None
        change: dict[str, str] = json.loads(self.state)
        return change

    def control(self) -> dict[str, Any]:
        """The payload of a control or view entry."""
        payload: dict[str, Any] = json.loads(self.frame)
        return payload


def entry_id_key(entry_id: str) -> tuple[int, int]:
    """Sort key of a stream entry id (`ms-seq`)."""
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def with_replay_flag(frame: str) -> str:
    """Mark a serialised chunk frame as replayed (`"replay": true`)."""
    return frame[:-1] + ',"replay":true}'


def with_cursor(frame: str, entry_id: str) -> str:
    """Stamp a serialised frame with the id of its log entry (`"cursor": "<id>"`)."""
    return f'{frame[:-1]},"cursor":"{entry_id}"}}'
