"""Immutable records the store hands out."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Literal, get_args

TurnKind = Literal["submit", "regenerate", "continuation", "programmatic"]
"""What started a turn."""

TurnStatus = Literal["accepted", "running", "completed", "error", "aborted", "skipped"]
"""Where a turn is in its life."""

OPEN_TURN_STATUSES: Final = ("accepted", "running")
"""Statuses of a turn that has not ended (what recovery looks for)."""

TURN_KINDS: Final[frozenset[str]] = frozenset(get_args(TurnKind))
TURN_STATUSES: Final[frozenset[str]] = frozenset(get_args(TurnStatus))

MAIN_BRANCH: Final = "main"
"""The branch every conversation has from its creation."""

_MAX_KEY_PART: Final = 512


@dataclass(frozen=True, slots=True)
class ConversationKey:
    """The identity of a conversation: `(tenant, agent, name)` (DESIGN §3).

    Raises:
        ValueError: a part is empty or longer than 512 characters.
    """

    tenant: str
    agent: str
    name: str

    def __post_init__(self) -> None:
        for part in ("tenant", "agent", "name"):
            value = getattr(self, part)
            if not value or len(value) > _MAX_KEY_PART:
                raise ValueError(f"conversation {part} must be 1..{_MAX_KEY_PART} characters")


@dataclass(frozen=True, slots=True)
class Conversation:
    """A stored conversation.

    Attributes:
        id: surrogate key, used by every other store call.
        key: the conversation's identity.
        epoch: the fencing epoch stored when this record was read.
    """

    id: int
    key: ConversationKey
    epoch: int


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """A message row of the message tree.

    Attributes:
        pk: surrogate key of the row (what `parent_pk`, leaves and deletes refer to).
        message_id: the UIMessage id; the same id may appear on several branches.
        parent_pk: the parent row, `None` for a root.
        seq: position in the conversation's insertion order (unique, monotonic).
        message: the UIMessage.
    """

    pk: int
    message_id: str
    parent_pk: int | None
    seq: int
    message: dict[str, Any]


@dataclass(frozen=True, slots=True)
class TurnRecord:
    """A turn as stored (DESIGN §9).

    Attributes:
        request_id: the client's request id; turns are idempotent by it.
        kind: what started the turn.
        status: where the turn is.
        owner: id of the shard running it.
        epoch: the fencing epoch it was begun (or last taken over) under.
        message_id: the assistant message the turn produces, once known.
        request: the request context needed to rerun the turn.
        stash: owner-defined recovery state.
        error: the error message of a failed turn.
        heartbeat_at: the owner's last heartbeat.
        created_at: when the turn was accepted.
    """

    request_id: str
    kind: TurnKind
    status: TurnStatus
    owner: str | None
    epoch: int
    message_id: str | None
    request: dict[str, Any] | None
    stash: dict[str, Any] | None
    error: str | None
    heartbeat_at: datetime | None
    created_at: datetime


@dataclass(frozen=True, slots=True)
class ToolCallRecord:
    """A server tool call in the ledger.

    Attributes:
        tool_call_id: the model's id of the call.
        tool_name: the tool called.
        status: `running` (started, no result recorded), `completed` or `error`.
        output: the recorded output of a completed call.
        error: the error text of a failed call.
    """

    tool_call_id: str
    tool_name: str
    status: str
    output: Any
    error: str | None


@dataclass(frozen=True, slots=True)
class OpenTurn:
    """A turn that has not ended, with the conversation it belongs to (what the jobs service
    checks for orphans).

    Attributes:
        conversation_id: the conversation's surrogate key.
        key: the conversation's identity.
        turn: the turn.
    """

    conversation_id: int
    key: ConversationKey
    turn: TurnRecord


@dataclass(frozen=True, slots=True)
class IncidentRecord:
    """A recovery incident as stored.

    Attributes:
        incident_id: `<root request id>:<latest user message id>`.
        request_id: the turn being recovered.
        status: `detected`, `scheduled`, `attempting`, `completed`, `skipped`, `exhausted` or
            `failed`.
        attempt: the current attempt (1-based).
        data: the rest of the budget state (progress, timestamps, reason).
        updated_at: when the record last changed.
    """

    incident_id: str
    request_id: str
    status: str
    attempt: int
    data: dict[str, Any]
    updated_at: datetime
