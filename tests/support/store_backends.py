"""Backends of the store port for its conformance suite (`tests/integration/store`).

A `StoreBackend` is one fresh database of one kind (`memory`, `sqlite`, `postgres`): `open()`
gives a store on it (each SQL store has its own engine and pool, like another process; each
memory store is another handle on the same `MemoryDatabase`), and the `peek` methods read what
the port does not show (every message of a conversation, raw columns), straight from the
backend's storage, so tests can check what a write left behind.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Protocol

from sqlalchemy import Text, func, select, type_coerce, update

from durachat_infra.store import Store
from durachat_infra.store._memory_data import decode
from durachat_infra.store.memory import MemoryDatabase, MemoryStore
from durachat_infra.store.models import Branch, Message
from durachat_infra.store.models import Conversation as ConversationRow
from durachat_infra.store.port import StorePort

ConversationColumns = tuple[int, int, Any, Any]
"""`(epoch, next_seq, last_body, last_client_tools)` of a conversation."""


class StoreBackend(Protocol):
    """One fresh database of one backend, and what the port alone cannot read from it."""

    name: str
    """`memory`, `sqlite` or `postgres`."""

    def open(self) -> StorePort:
        """Open another store on the database (closed when the test ends)."""
        ...

    async def message_ids(self, conversation_id: int) -> list[str]:
        """The UIMessage ids of every message of the conversation, in sequence order."""
        ...

    async def message_role(self, pk: int) -> str:
        """The stored role of message row `pk`."""
        ...

    async def branch_leaves(self, conversation_id: int) -> list[tuple[str, int | None]]:
        """`(name, leaf pk)` of every branch of the conversation, oldest first."""
        ...

    async def conversation_columns(self, conversation_id: int) -> ConversationColumns:
        """The conversation's stored epoch, sequence counter and request context."""
        ...

    async def conversation_count(self) -> int:
        """How many conversations the database holds."""
        ...

    async def plant_body(self, pk: int, text: str) -> None:
        """Overwrite the stored JSON text of message row `pk`, behind the store's back (data
        written before a bound was enforced)."""
        ...

    async def close(self) -> None:
        """Close every store opened."""
        ...


class MemoryBackend:
    """A `MemoryDatabase`."""

    name = "memory"

    def __init__(self) -> None:
        self.database = MemoryDatabase()

    def open(self) -> StorePort:
        return MemoryStore(self.database)

    async def message_ids(self, conversation_id: int) -> list[str]:
        messages = self.database.conversations[conversation_id].messages.values()
        return [row.message_id for row in sorted(messages, key=lambda row: row.seq)]

    async def message_role(self, pk: int) -> str:
        for state in self.database.conversations.values():
            if pk in state.messages:
                return state.messages[pk].role
        raise KeyError(pk)

    async def branch_leaves(self, conversation_id: int) -> list[tuple[str, int | None]]:
        branches = self.database.conversations[conversation_id].branches
        return [(branches[key].name, branches[key].leaf_pk) for key in sorted(branches)]

    async def conversation_columns(self, conversation_id: int) -> ConversationColumns:
        state = self.database.conversations[conversation_id]
        return (
            state.epoch,
            state.next_seq,
            decode(state.last_body),
            decode(state.last_client_tools),
        )

    async def conversation_count(self) -> int:
        return len(self.database.conversations)

    async def plant_body(self, pk: int, text: str) -> None:
        for state in self.database.conversations.values():
            if pk in state.messages:
                state.messages[pk] = replace(state.messages[pk], body=text)
                return
        raise KeyError(pk)

    async def close(self) -> None:
        pass


class SQLBackend:
    """A database at `url` (SQLite or PostgreSQL); peeks go through a store's engine."""

    def __init__(self, name: str, url: str) -> None:
        self.name = name
        self.url = url
        self._stores: list[Store] = []

    def open(self) -> StorePort:
        store = Store.from_url(self.url)
        self._stores.append(store)
        return store

    def _engine_store(self) -> Store:
        if not self._stores:
            self.open()
        return self._stores[0]

    async def message_ids(self, conversation_id: int) -> list[str]:
        async with self._engine_store().engine.connect() as conn:
            rows = await conn.scalars(
                select(Message.message_id)
                .where(Message.conversation_id == conversation_id)
                .order_by(Message.seq)
            )
            return list(rows)

    async def message_role(self, pk: int) -> str:
        async with self._engine_store().engine.connect() as conn:
            role = await conn.scalar(select(Message.role).where(Message.id == pk))
        if role is None:
            raise KeyError(pk)
        return str(role)

    async def branch_leaves(self, conversation_id: int) -> list[tuple[str, int | None]]:
        async with self._engine_store().engine.connect() as conn:
            rows = await conn.execute(
                select(Branch.name, Branch.leaf_id)
                .where(Branch.conversation_id == conversation_id)
                .order_by(Branch.id)
            )
            return [(row.name, row.leaf_id) for row in rows]

    async def conversation_columns(self, conversation_id: int) -> ConversationColumns:
        async with self._engine_store().engine.connect() as conn:
            row = (
                await conn.execute(
                    select(
                        ConversationRow.epoch,
                        ConversationRow.next_seq,
                        ConversationRow.last_body,
                        ConversationRow.last_client_tools,
                    ).where(ConversationRow.id == conversation_id)
                )
            ).one()
        return (row.epoch, row.next_seq, row.last_body, row.last_client_tools)

    async def conversation_count(self) -> int:
        async with self._engine_store().engine.connect() as conn:
            count = await conn.scalar(select(func.count()).select_from(ConversationRow))
        return int(count or 0)

    async def plant_body(self, pk: int, text: str) -> None:
        async with self._engine_store().engine.begin() as conn:
            await conn.execute(
                update(Message).where(Message.id == pk).values(body=type_coerce(text, Text))
            )

    async def close(self) -> None:
        for store in self._stores:
            await store.close()
        self._stores.clear()
