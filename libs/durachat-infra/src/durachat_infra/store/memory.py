"""The in-memory adapter of the store port: the same contract as the SQL `Store`, kept in
Python objects.

For tests and tools that want the store's behaviour without a database. The conformance suite
(`tests/integration/store`) runs every contract test on it as well as on SQLite and PostgreSQL.
Nothing is persisted; `MemoryStore`s opened on one `MemoryDatabase` share its data, as `Store`s
opened on one URL do::

    database = MemoryDatabase()
    async with MemoryStore(database) as store:
        conv = await store.get_or_create_conversation(ConversationKey("default", "chat", "c1"))
        await store.claim(conv.id, 1)
        async with store.transaction(conv.id, 1) as tx:
            [pk] = await tx.insert_chain(None, [{"id": "m1", "role": "user", "parts": []}])
            await tx.set_leaf("main", pk)
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from datetime import datetime
from types import TracebackType
from typing import Any, Self, TypeVar

from durachat.protocol import MAIN_BRANCH, BranchRef
from durachat_infra.store._memory_data import (
    BranchRow,
    ConversationState,
    MemoryDatabase,
    MessageRow,
    branch_record,
    decode,
    find_siblings,
    path,
    resolve,
)
from durachat_infra.store._memory_tenants import MemoryTenants
from durachat_infra.store._memory_transaction import MemoryTransaction
from durachat_infra.store._memory_webhooks import MemoryWebhooks
from durachat_infra.store._records import (
    OPEN_TURN_STATUSES,
    BranchRecord,
    Conversation,
    ConversationKey,
    IncidentRecord,
    OpenTurn,
    Siblings,
    StoredMessage,
    TurnRecord,
)
from durachat_infra.store._types import utcnow
from durachat_infra.store.errors import (
    ConversationExistsError,
    FencedError,
    StoreError,
    UnknownBranchError,
    UnknownConversationError,
    UnknownTenantError,
)

__all__ = ["MemoryDatabase", "MemoryStore", "MemoryTransaction"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


class MemoryStore(MemoryTenants, MemoryWebhooks):
    """Tenants and their keys, conversations, message trees, branches, turns, tool calls and
    recovery incidents in memory (see `durachat_infra.store.port.StorePort` for the contract).

    Writes (transactions, claims, creations, heartbeats, sweeps) run one at a time under the
    database's write lock, so a claim waits for the transaction in progress, as on SQL.
    """

    def __init__(self, database: MemoryDatabase | None = None) -> None:
        self.database = database if database is not None else MemoryDatabase()
        """The data this store reads and writes (shared with other stores opened on it)."""

    async def close(self) -> None:
        """Nothing to release; the data stays in `database`."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def get_or_create_conversation(
        self, key: ConversationKey, *, epoch: int = 0
    ) -> Conversation:
        """The conversation `key`, created (at `epoch`) with an empty `main` if needed."""
        if epoch < 0:
            raise ValueError("epoch must not be negative")
        found = await self.find_conversation(key)
        if found is not None:
            return found
        async with self.database.write_lock:
            found = await self.find_conversation(key)
            if found is not None:
                return found
            state = self._create(key)
            state.epoch = epoch
            now = utcnow()
            branch = self.database.next_id("branch")
            state.branches[branch] = BranchRow(branch, MAIN_BRANCH, None, None, None, now, now)
            return Conversation(state.id, key, state.epoch, created=True)

    async def find_conversation(self, key: ConversationKey) -> Conversation | None:
        """The conversation `key`, or `None`."""
        state = self._by_key(key)
        return None if state is None else Conversation(state.id, key, state.epoch)

    async def claim(self, conversation_id: int, epoch: int, *, fresh: bool = False) -> None:
        """Raise the conversation's epoch to `epoch` for a new owner."""
        if epoch < 0:
            raise ValueError("epoch must not be negative")
        async with self.database.write_lock:
            state = self.database.conversations.get(conversation_id)
            if state is None:
                raise StoreError(f"conversation {conversation_id} does not exist")
            if state.epoch < epoch:
                state.epoch = epoch
                return
            if state.epoch > epoch or fresh:
                logger.warning(
                    "rejected claim of conversation %s at epoch %s (stored epoch %s)",
                    conversation_id,
                    epoch,
                    state.epoch,
                )
                raise FencedError(conversation_id, epoch, state.epoch)

    @contextlib.asynccontextmanager
    async def transaction(
        self, conversation_id: int, epoch: int
    ) -> AsyncIterator[MemoryTransaction]:
        """Open a fenced write transaction on a conversation."""
        action = f"transaction on conversation {conversation_id}"
        async with self.database.write_lock:
            state = self.database.conversations.get(conversation_id)
            if state is None:
                raise StoreError(f"conversation {conversation_id} does not exist")
            if state.epoch != epoch:
                logger.warning(
                    "rejected a write to conversation %s under epoch %s (stored epoch %s)",
                    conversation_id,
                    epoch,
                    state.epoch,
                )
                raise FencedError(conversation_id, epoch, state.epoch)
            tx = MemoryTransaction(self.database, state.copy(), epoch)
            try:
                yield tx
            finally:
                failed = tx.finish()
            if failed:
                raise StoreError(f"{action}: rolled back because an operation in it failed")
            self.database.conversations[conversation_id] = tx.state

    async def run_transaction(
        self,
        conversation_id: int,
        epoch: int,
        work: Callable[[MemoryTransaction], Awaitable[T]],
    ) -> T:
        """Run `work` in a fenced write transaction and return its result."""
        async with self.transaction(conversation_id, epoch) as tx:
            return await work(tx)

    async def load_path(
        self, conversation_id: int, branch: str = MAIN_BRANCH
    ) -> list[StoredMessage]:
        """The messages on branch `branch` (by name), root first; `[]` if unknown."""
        state = self.database.conversations.get(conversation_id)
        found = None if state is None else _named(state, branch)
        if state is None or found is None:
            return []
        return [row.stored() for row in path(state, found.leaf_pk)]

    async def transcript(
        self, key: ConversationKey, branch: str = MAIN_BRANCH
    ) -> list[dict[str, Any]]:
        """The UIMessages on a branch of conversation `key`; `[]` if unknown."""
        state = self._by_key(key)
        found = None if state is None else _named(state, branch)
        if state is None or found is None:
            return []
        return [row.stored().message for row in path(state, found.leaf_pk)]

    async def list_branches(self, conversation_id: int) -> list[BranchRecord]:
        """Every branch, oldest first."""
        state = self.database.conversations.get(conversation_id)
        if state is None:
            return []
        return [branch_record(state, state.branches[key]) for key in sorted(state.branches)]

    async def get_branch(self, conversation_id: int, branch: BranchRef) -> BranchRecord | None:
        """One branch by id or name, or `None`."""
        state = self.database.conversations.get(conversation_id)
        found = None if state is None else resolve(state, branch)
        return None if state is None or found is None else branch_record(state, found)

    async def branch_path(
        self, conversation_id: int, branch: BranchRef
    ) -> list[StoredMessage] | None:
        """The messages on a branch, root first; `None` for an unknown branch."""
        state = self.database.conversations.get(conversation_id)
        found = None if state is None else resolve(state, branch)
        if state is None or found is None:
            return None
        return [row.stored() for row in path(state, found.leaf_pk)]

    async def siblings(
        self, conversation_id: int, message_id: str, branch: BranchRef | None = None
    ) -> Siblings | None:
        """The alternatives of a message, its index among them and the branches that show
        them (found as `Store.siblings` documents)."""
        state = self.database.conversations.get(conversation_id)
        if state is None:
            if branch is not None and branch != MAIN_BRANCH:
                raise UnknownBranchError(conversation_id, branch)
            return None
        return find_siblings(state, conversation_id, message_id, branch)

    async def fork_conversation(
        self, source: ConversationKey, branch: BranchRef, target: ConversationKey
    ) -> Conversation:
        """Copy the path of a branch into a new conversation `target`, as its `main`."""
        async with self.database.write_lock:
            origin = self._by_key(source)
            if origin is None:
                raise UnknownConversationError(source)
            found = resolve(origin, branch)
            if found is None:
                raise UnknownBranchError(origin.id, branch)
            if target.tenant not in self.database.tenants:
                raise UnknownTenantError(target.tenant)
            if self._by_key(target) is not None:
                raise ConversationExistsError(target)
            state = self._create(target)
            parent: int | None = None
            for seq, row in enumerate(path(origin, found.leaf_pk)):
                pk = self.database.next_id("message")
                state.messages[pk] = MessageRow(pk, row.message_id, parent, seq, row.role, row.body)
                parent = pk
            state.next_seq = len(state.messages)
            now = utcnow()
            main = self.database.next_id("branch")
            state.branches[main] = BranchRow(main, MAIN_BRANCH, parent, None, None, now, now)
            return Conversation(state.id, target, state.epoch)

    async def recent_request_ids(self, conversation_id: int, *, limit: int = 256) -> list[str]:
        """Request ids of the conversation's newest turns, newest first."""
        state = self.database.conversations.get(conversation_id)
        if state is None:
            return []
        turns = sorted(state.turns.values(), key=lambda turn: turn.order, reverse=True)
        return [turn.request_id for turn in turns[:limit]]

    async def get_turn(self, conversation_id: int, request_id: str) -> TurnRecord | None:
        """One turn, or `None`."""
        state = self.database.conversations.get(conversation_id)
        turn = None if state is None else state.turns.get(request_id)
        return None if turn is None else turn.record()

    async def open_turns(self, conversation_id: int) -> list[TurnRecord]:
        """The conversation's open turns, oldest first."""
        state = self.database.conversations.get(conversation_id)
        if state is None:
            return []
        turns = sorted(state.turns.values(), key=lambda turn: turn.order)
        return [turn.record() for turn in turns if turn.status in OPEN_TURN_STATUSES]

    async def all_open_turns(self, *, limit: int = 1000) -> list[OpenTurn]:
        """Open turns of every conversation, oldest first."""
        found = [
            (turn.order, OpenTurn(state.id, state.key, turn.record()))
            for state in self.database.conversations.values()
            for turn in state.turns.values()
            if turn.status in OPEN_TURN_STATUSES
        ]
        found.sort(key=lambda item: item[0])
        return [open_turn for _, open_turn in found[:limit]]

    async def heartbeat_turns(self, owner: str) -> int:
        """Stamp every open turn of `owner` as alive now; returns how many."""
        async with self.database.write_lock:
            now = utcnow()
            beaten = 0
            for state in self.database.conversations.values():
                for turn in list(state.turns.values()):
                    if turn.owner == owner and turn.status in OPEN_TURN_STATUSES:
                        state.turns[turn.request_id] = replace(turn, heartbeat_at=now)
                        beaten += 1
            return beaten

    async def get_incident(self, conversation_id: int, incident_id: str) -> IncidentRecord | None:
        """One recovery incident, or `None`."""
        state = self.database.conversations.get(conversation_id)
        row = None if state is None else state.incidents.get(incident_id)
        if row is None:
            return None
        return IncidentRecord(
            row.incident_id,
            row.request_id,
            row.status,
            row.attempt,
            decode(row.data) or {},
            row.updated_at,
        )

    async def sweep_incidents(self, before: datetime) -> int:
        """Delete recovery incidents unchanged since `before`; returns how many."""
        async with self.database.write_lock:
            swept = 0
            for state in self.database.conversations.values():
                stale = [key for key, row in state.incidents.items() if row.updated_at < before]
                for key in stale:
                    del state.incidents[key]
                swept += len(stale)
            return swept

    async def load_request_context(
        self, conversation_id: int
    ) -> tuple[dict[str, Any] | None, list[Any] | None]:
        """`(last_body, last_client_tools)` as last saved."""
        state = self.database.conversations.get(conversation_id)
        if state is None:
            return None, None
        return decode(state.last_body), decode(state.last_client_tools)

    def _by_key(self, key: ConversationKey) -> ConversationState | None:
        conversation_id = self.database.by_key.get(key)
        return None if conversation_id is None else self.database.conversations[conversation_id]

    def _create(self, key: ConversationKey) -> ConversationState:
        """Add an empty conversation (no branches yet); the caller holds the write lock."""
        if key.tenant not in self.database.tenants:
            raise UnknownTenantError(key.tenant)
        state = ConversationState(self.database.next_id("conversation"), key)
        self.database.conversations[state.id] = state
        self.database.by_key[key] = state.id
        return state


def _named(state: ConversationState, name: str) -> BranchRow | None:
    return next((row for row in state.branches.values() if row.name == name), None)
