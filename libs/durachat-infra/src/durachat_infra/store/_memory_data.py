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

from durachat.protocol import MAIN_BRANCH, BranchRef
from durachat_infra.store._records import (
    MAX_BRANCH_ID,
    BranchRecord,
    ConversationKey,
    ShownOn,
    Siblings,
    StoredMessage,
    TurnKind,
    TurnRecord,
    TurnStatus,
)
from durachat_infra.store._safe_json import decode_column, stored_message
from durachat_infra.store._tenant_records import (
    ApiKeyRecord,
    SigningKeyRecord,
    TenantRecord,
    WebhookRecord,
)
from durachat_infra.store.errors import AmbiguousMessageError, StoreError, UnknownBranchError


def encode(value: Any, action: str) -> str | None:
    """A JSON document as stored (`None` stays `None`); `StoreError` if it is not JSON."""
    if value is None:
        return None
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise StoreError(f"{action}: {exc}") from exc


def decode(text: str | None) -> Any:
    """A stored JSON document, as a fresh object (cut back within the bound if it is nested
    too deep to read safely, as the SQL store does)."""
    return None if text is None else decode_column(text)


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
        """The row as the store hands it out (quarantined as the SQL store does)."""
        message, problem = stored_message(self.body, self.message_id, self.role)
        return StoredMessage(
            self.pk,
            self.message_id,
            self.parent_pk,
            self.seq,
            message,
            None if problem is None else str(problem),
        )


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
        self.webhooks: dict[str, WebhookRecord] = {}
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


def find_siblings(
    state: ConversationState, conversation_id: int, message_id: str, branch: BranchRef | None
) -> Siblings | None:
    """The siblings of a message and the branches that show them, found as
    `Store.siblings` documents."""
    viewer = None
    row = None
    if branch is not None:
        viewer = resolve(state, branch)
        if viewer is None:
            raise UnknownBranchError(conversation_id, branch)
        row = occurrence(state, viewer.leaf_pk, message_id)
    if row is None:
        rows = [m for m in state.messages.values() if m.message_id == message_id]
        if len(rows) == 1:
            row = rows[0]
        elif rows and branch is None:
            viewer = resolve(state, MAIN_BRANCH)
            row = None if viewer is None else occurrence(state, viewer.leaf_pk, message_id)
            if row is None:
                raise AmbiguousMessageError(conversation_id, message_id)
    if row is None:
        return None
    if viewer is None:
        viewer = resolve(state, MAIN_BRANCH)
    children = sorted(
        (other for other in state.messages.values() if other.parent_pk == row.parent_pk),
        key=lambda other: other.seq,
    )
    keys = [child.pk for child in children]
    holders: dict[int, list[BranchRow]] = {}
    for candidate in state.branches.values():
        for step in path(state, candidate.leaf_pk):
            if step.pk in keys:
                holders.setdefault(step.pk, []).append(candidate)
    prefer = None if viewer is None else viewer.id
    at_parent = [b for b in state.branches.values() if b.fork_pk == row.parent_pk]
    near = {b.id for b in at_parent} | {b.parent_branch_id for b in at_parent}
    return Siblings(
        ids=tuple(child.message_id for child in children),
        index=keys.index(row.pk),
        shown_on=tuple(_shown_on(holders.get(key, []), prefer, near) for key in keys),
    )


def _shown_on(
    branches: list[BranchRow], prefer: int | None, near: set[int | None]
) -> ShownOn | None:
    """`prefer` if it holds the sibling; else, of the branches forked at the siblings' parent
    or forked from there (`near`) that hold it (or, if none does, of all that do), the one
    updated last."""
    if not branches:
        return None
    chosen = next((b for b in branches if b.id == prefer), None)
    if chosen is None:
        close = [b for b in branches if b.id in near]
        chosen = max(close or branches, key=lambda b: (b.updated_at, b.id))
    return ShownOn(id=chosen.id, name=chosen.name)


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
