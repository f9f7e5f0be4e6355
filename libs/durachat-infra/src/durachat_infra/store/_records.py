"""Immutable records the store hands out."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Literal, get_args

from durachat.protocol import MAIN_BRANCH, BranchRef

TurnKind = Literal["submit", "regenerate", "continuation", "programmatic"]
"""What started a turn."""

TurnStatus = Literal["accepted", "running", "completed", "error", "aborted", "skipped"]
"""Where a turn is in its life."""

OPEN_TURN_STATUSES: Final = ("accepted", "running")
"""Statuses of a turn that has not ended (what recovery looks for)."""

TURN_KINDS: Final[frozenset[str]] = frozenset(get_args(TurnKind))
TURN_STATUSES: Final[frozenset[str]] = frozenset(get_args(TurnStatus))

MAX_BRANCH_NAME: Final = 200
"""Longest branch name, in characters."""

MAX_BRANCH_ID: Final = 2**63 - 1
"""Largest possible branch id (a 64-bit key)."""

_MAX_KEY_PART: Final = 512
_MAX_ID_DIGITS: Final = len(str(MAX_BRANCH_ID))
_DIGITS: Final = re.compile(r"[0-9]+")
_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True, slots=True)
class ConversationKey:
    """The identity of a conversation: `(tenant, agent, name)` (docs/architecture.md#storage).

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
        created: the call that returned it created it (so it holds nothing yet).
    """

    id: int
    key: ConversationKey
    epoch: int
    created: bool = False


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """A message row of the message tree.

    Attributes:
        pk: surrogate key of the row (what `parent_pk`, leaves and deletes refer to).
        message_id: the UIMessage id; the same id may appear on several branches.
        parent_pk: the parent row, `None` for a root.
        seq: position in the conversation's insertion order (unique, monotonic).
        message: the UIMessage.
        quarantined: why the stored body could not be handed out as stored (it was nested too
            deep to read safely; `message` is then what could be kept of it), else None.
    """

    pk: int
    message_id: str
    parent_pk: int | None
    seq: int
    message: dict[str, Any]
    quarantined: str | None = None


@dataclass(frozen=True, slots=True)
class TurnRecord:
    """A turn as stored (docs/architecture.md#storage, docs/recovery.md).

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


@dataclass(frozen=True, slots=True)
class BranchRecord:
    """A branch: a named pointer to a leaf of the conversation's message tree (docs/branching.md).

    Attributes:
        id: the branch's stable public id (never reused).
        name: unique within the conversation; every conversation has `main`.
        leaf_message_id: the UIMessage id of the branch's leaf, `None` for an empty branch.
        parent_branch_id: the branch it was forked from, if any (and if that still exists).
        fork_message_id: the UIMessage id of the message it was forked at, if any (and if that
            message still exists).
        created_at: when the branch was created.
        updated_at: when it last changed (its leaf moved, it was renamed).
    """

    id: int
    name: str
    leaf_message_id: str | None
    parent_branch_id: int | None
    fork_message_id: str | None
    created_at: datetime
    updated_at: datetime

    def to_json(self) -> dict[str, Any]:
        """The branch as the HTTP and WebSocket APIs show it."""
        return {
            "id": self.id,
            "name": self.name,
            "leaf_message_id": self.leaf_message_id,
            "parent_branch_id": self.parent_branch_id,
            "fork_message_id": self.fork_message_id,
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
        }


@dataclass(frozen=True, slots=True)
class ShownOn:
    """A branch whose path holds a message: viewing it shows that message."""

    id: int
    name: str

    @property
    def ref(self) -> str:
        """How the branch is named on the wire: `main`, or its id."""
        return MAIN_BRANCH if self.name == MAIN_BRANCH else str(self.id)


@dataclass(frozen=True, slots=True)
class Siblings:
    """The alternatives of one message: every child of its parent (what a "2 / 3" picker
    shows).

    Attributes:
        ids: the UIMessage ids of the siblings, oldest first (by sequence number), the message
            itself included.
        index: the position of the message in `ids`.
        shown_on: for each sibling, a branch whose path holds it (the branch the siblings were
            asked from if it does, else the one updated last), or `None` when no branch
            reaches it; empty when not looked up.
    """

    ids: tuple[str, ...]
    index: int
    shown_on: tuple[ShownOn | None, ...] = ()


def parse_branch_ref(text: str) -> BranchRef:
    """Read a branch reference from text (a URL's `?branch=`): digits are an id, anything else
    is a name. Branch names never consist of digits only, so the two cannot be confused (digits
    too large for an id stay text: they name no branch)."""
    if _DIGITS.fullmatch(text) and len(text) <= _MAX_ID_DIGITS:
        value = int(text)
        if value <= MAX_BRANCH_ID:
            return value
    return text


def check_branch_name(name: str) -> None:
    """Validate a name for a new or renamed branch.

    Raises:
        ValueError: the name is empty, longer than `MAX_BRANCH_NAME`, all digits (it would read
            as a branch id), has leading or trailing whitespace, or contains control characters.
    """
    if not isinstance(name, str) or not name:
        raise ValueError("a branch name must be a non-empty string")
    if len(name) > MAX_BRANCH_NAME:
        raise ValueError(f"a branch name is at most {MAX_BRANCH_NAME} characters")
    if _DIGITS.fullmatch(name):
        raise ValueError(f"branch name {name!r} is all digits: it would read as a branch id")
    if name != name.strip() or _CONTROL.search(name):
        raise ValueError(
            f"branch name {name!r} must not have surrounding whitespace or control characters"
        )


def message_columns(message: dict[str, Any]) -> dict[str, Any]:
    """Return the message row's derived columns, validating the UIMessage's `id` and `role`."""
    message_id = message.get("id") if isinstance(message, dict) else None
    role = message.get("role") if isinstance(message, dict) else None
    if not isinstance(message_id, str) or not message_id:
        raise ValueError(f"message needs a non-empty string 'id': {message!r:.200}")
    if not isinstance(role, str) or not role:
        raise ValueError(f"message {message_id!r} needs a non-empty string 'role'")
    return {"message_id": message_id, "role": role, "body": message}
