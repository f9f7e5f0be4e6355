"""The data of the in-memory store: rows, one conversation's state, the shared database, and
the walks over a message tree that reads and writes share.

Rows are immutable and replaced when they change, so copying a conversation for a transaction
copies only its dictionaries. JSON documents are kept as text, encoded the way the SQL store
encodes them, so both hand out fresh objects and refuse the same values.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, cast

from durachat_infra.store._records import (
    MAX_BRANCH_ID,
    BranchRecord,
    BranchRef,
    ConversationKey,
    Siblings,
    StoredMessage,
    TurnKind,
    TurnRecord,
    TurnStatus,
)
from durachat_infra.store._tenant_records import ApiKeyRecord, SigningKeyRecord, TenantRecord
from durachat_infra.store.errors import StoreError


def encode(value: Any, action: str) -> str | None:
    """A JSON document as stored (`None` stays `None`); `StoreError` if it is not JSON."""
    if value is None:
        return None
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise StoreError(f"{action}: {exc}") from exc


def decode(text: str | None) -> Any:
    """A stored JSON document, as a fresh object."""
    return None if text is None else json.loads(text)


@dataclass(frozen=True, slots=True)
class MessageRow:
    """A node of the message tree; `body` is the UIMessage as JSON text."""

    pk: int
    message_id: str
    parent_pk: int | None
    seq: int
    role: str
    body: str

    def stored(self) -> StoredMessage:
        """The row as the store hands it out."""
        return StoredMessage(self.pk, self.message_id, self.parent_pk, self.seq, decode(self.body))


@dataclass(frozen=True, slots=True)
class BranchRow:
    """A branch: a named pointer to a leaf."""

    id: int
    name: str
    leaf_pk: int | None
    parent_branch_id: int | None
    fork_pk: int | None
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class TurnRow:
    """A turn; `order` is its place among the turns of every conversation."""

    order: int
    request_id: str
    kind: str
    status: str
    owner: str | None
    epoch: int
    message_id: str | None
    request: str | None
    stash: str | None
    error: str | None
    heartbeat_at: datetime | None
    created_at: datetime

    def record(self) -> TurnRecord:
        """The turn as the store hands it out."""
        return TurnRecord(
            request_id=self.request_id,
            kind=cast(TurnKind, self.kind),
            status=cast(TurnStatus, self.status),
            owner=self.owner,
            epoch=self.epoch,
            message_id=self.message_id,
            request=decode(self.request),
            stash=decode(self.stash),
            error=self.error,
            heartbeat_at=self.heartbeat_at,
            created_at=self.created_at,
        )


@dataclass(frozen=True, slots=True)
class ToolRow:
    """A server tool call in the ledger."""

    tool_call_id: str
    tool_name: str
    status: str
    input: str | None
    output: str | None
    error: str | None
    owner: str | None
    epoch: int


@dataclass(frozen=True, slots=True)
class IncidentRow:
    """A recovery incident."""

    incident_id: str
    request_id: str
    status: str
    attempt: int
    data: str | None
    updated_at: datetime


_SEEDED = {"default": "Default tenant"}


@dataclass(frozen=True, slots=True)
class TenantRow:
    """A tenant; `quotas` and `settings` as JSON text (`None`: none)."""

    id: str
    name: str
    quotas: str | None
    settings: str | None
    created_at: datetime

    def record(self) -> TenantRecord:
        """The tenant as the store hands it out."""
        return TenantRecord(
            id=self.id,
            name=self.name,
            quotas=decode(self.quotas) or {},
            settings=decode(self.settings) or {},
            created_at=self.created_at,
        )


@dataclass(slots=True)
class ConversationState:
    """Everything stored for one conversation."""

    id: int
    key: ConversationKey
    epoch: int = 0
    next_seq: int = 0
    last_body: str | None = None
    last_client_tools: str | None = None
    messages: dict[int, MessageRow] = field(default_factory=dict)
    branches: dict[int, BranchRow] = field(default_factory=dict)
    turns: dict[str, TurnRow] = field(default_factory=dict)
    tools: dict[str, ToolRow] = field(default_factory=dict)
    incidents: dict[str, IncidentRow] = field(default_factory=dict)

    def copy(self) -> ConversationState:
        """A copy a transaction may change without touching this one."""
        return replace(
            self,
            messages=dict(self.messages),
            branches=dict(self.branches),
            turns=dict(self.turns),
            tools=dict(self.tools),
            incidents=dict(self.incidents),
        )


class MemoryDatabase:
    """What a database server holds: every conversation, the tenants and their keys, the key
    counters, and the write lock.

    Every `MemoryStore` opened on the same database sees the same data, as `Store`s opened on
    one URL do. Writers take `write_lock` one at a time (as SQLite's writers do); readers never
    wait and see only committed state.
    """

    def __init__(self, tenants: tuple[str, ...] = ("default",)) -> None:
        now = datetime.now(UTC)
        self.tenants: dict[str, TenantRow] = {
            # Named as the first migration names `default`.
            tenant: TenantRow(tenant, _SEEDED.get(tenant, tenant), None, None, now)
            for tenant in tenants
        }
        self.api_keys: dict[str, ApiKeyRecord] = {}
        self.signing_keys: dict[str, SigningKeyRecord] = {}
        self.conversations: dict[int, ConversationState] = {}
        self.by_key: dict[ConversationKey, int] = {}
        self.write_lock = asyncio.Lock()
        self._counters = {"conversation": 0, "message": 0, "branch": 0, "turn": 0}

    def next_id(self, kind: str) -> int:
        """A new key of `kind` (`conversation`, `message`, `branch`, `turn`); keys are never
        handed out twice, even when the transaction that took one rolls back."""
        self._counters[kind] += 1
        return self._counters[kind]


def resolve(state: ConversationState, branch: BranchRef) -> BranchRow | None:
    """A branch by id or name, or `None`."""
    if isinstance(branch, bool) or not isinstance(branch, int | str):
        raise TypeError(f"a branch is named by its id (int) or name (str), not {branch!r}")
    if isinstance(branch, str):
        return next((row for row in state.branches.values() if row.name == branch), None)
    if not 0 <= branch <= MAX_BRANCH_ID:
        return None
    return state.branches.get(branch)


def branch_record(state: ConversationState, row: BranchRow) -> BranchRecord:
    """A branch as the store hands it out."""

    def message_id(pk: int | None) -> str | None:
        message = None if pk is None else state.messages.get(pk)
        return None if message is None else message.message_id

    return BranchRecord(
        id=row.id,
        name=row.name,
        leaf_message_id=message_id(row.leaf_pk),
        parent_branch_id=row.parent_branch_id,
        fork_message_id=message_id(row.fork_pk),
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def path(state: ConversationState, leaf_pk: int | None) -> list[MessageRow]:
    """The rows from the root down to `leaf_pk` (`[]` for `None`)."""
    rows: list[MessageRow] = []
    pk = leaf_pk
    while pk is not None:
        row = state.messages[pk]
        rows.append(row)
        pk = row.parent_pk
    rows.reverse()
    return rows


def occurrence(state: ConversationState, leaf_pk: int | None, message_id: str) -> MessageRow | None:
    """The row of `message_id` on the path to `leaf_pk` nearest the leaf, or `None`."""
    return next(
        (row for row in reversed(path(state, leaf_pk)) if row.message_id == message_id), None
    )


def siblings_of(state: ConversationState, row: MessageRow) -> Siblings:
    """The children of the row's parent (the roots, for a root) by sequence number, and where
    the row is among them."""
    children = sorted(
        (other for other in state.messages.values() if other.parent_pk == row.parent_pk),
        key=lambda other: other.seq,
    )
    return Siblings(
        ids=tuple(child.message_id for child in children),
        index=[child.pk for child in children].index(row.pk),
    )


def remove_messages(state: ConversationState, pks: set[int]) -> None:
    """Delete rows; branches whose leaf or fork point goes point at nothing (as the SQL
    schema's `ON DELETE SET NULL` does, without touching `updated_at`)."""
    for pk in pks:
        del state.messages[pk]
    for row in list(state.branches.values()):
        leaf = None if row.leaf_pk in pks else row.leaf_pk
        fork = None if row.fork_pk in pks else row.fork_pk
        if (leaf, fork) != (row.leaf_pk, row.fork_pk):
            state.branches[row.id] = replace(row, leaf_pk=leaf, fork_pk=fork)


def prune_above(state: ConversationState, pk: int) -> int:
    """Delete the part of the path from the root to `pk` that no branch reaches, with
    everything below it; returns how many rows went.

    The reached rows form a prefix of the path (a branch reaching a row reaches its
    ancestors), so what goes is the subtree of the first row no branch reaches.
    """
    reached: set[int] = set()
    for branch in state.branches.values():
        reached.update(row.pk for row in path(state, branch.leaf_pk))
    top = next((row.pk for row in path(state, pk) if row.pk not in reached), None)
    if top is None:
        return 0
    children: dict[int | None, list[int]] = {}
    for row in state.messages.values():
        children.setdefault(row.parent_pk, []).append(row.pk)
    doomed: set[int] = set()
    stack = [top]
    while stack:
        current = stack.pop()
        doomed.add(current)
        stack.extend(children.get(current, ()))
    remove_messages(state, doomed)
    return len(doomed)
