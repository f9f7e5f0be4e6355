"""`FencedTransaction`: the only way to write to a conversation."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from sqlalchemy import delete, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.orm import aliased

from durachat.protocol import MAIN_BRANCH, BranchRef
from durachat_infra.store import _statements as statements
from durachat_infra.store._branch_writes import BranchWrites
from durachat_infra.store._record_writes import RecordWrites
from durachat_infra.store._records import message_columns
from durachat_infra.store._transaction_core import fence
from durachat_infra.store._types import utcnow
from durachat_infra.store.errors import StoreError, UnknownBranchError
from durachat_infra.store.models import Branch, Conversation, Message

__all__ = ["FencedTransaction", "fence"]

_IN_CHUNK: Final = 1000
"""Ids per `IN (...)` list; both drivers cap bound parameters (SQLite 32766, asyncpg 32767)."""


class FencedTransaction(BranchWrites, RecordWrites):
    """One SQL transaction of writes to one conversation, valid only under its fencing epoch.

    Obtained from `Store.transaction`. When it starts it bumps the conversation's `updated_at`
    under the condition `epoch = :epoch`; that both checks the fence and takes the conversation's
    row lock (PostgreSQL) or the database write lock (SQLite), so a `Store.claim` by a new owner
    waits until this transaction ends, and every later transaction of the old owner is rejected.

    Everything in it commits together when the `async with` block exits normally. An exception
    escaping the block rolls everything back. If a method raises, the transaction is spoiled even
    if the caller catches the exception: later calls raise `StoreError`, and so does leaving the
    block, which rolls back instead of committing (PostgreSQL would otherwise silently turn the
    commit of a failed transaction into a rollback).

    The writes come in three groups: the message tree and request context (here), branches
    (`BranchWrites`) and turns, tool calls and recovery incidents (`RecordWrites`).

    Attributes:
        conversation_id: the conversation written to.
        epoch: the fencing epoch the transaction holds.
    """

    async def insert_chain(
        self, parent_pk: int | None, messages: Sequence[dict[str, Any]]
    ) -> list[int]:
        """Insert `messages` as a chain hanging from `parent_pk`.

        The first message's parent is `parent_pk` (`None` makes it a root), each next message's
        parent is the one before it. Sequence numbers are allocated in order from the
        conversation's counter. No branch is moved: call `set_leaf` for that.

        Args:
            parent_pk: the row to attach the chain to, or `None`.
            messages: UIMessages; each needs a string `id` and `role`.

        Returns:
            The new rows' keys, in the order of `messages`.

        Raises:
            ValueError: a message has no string `id` or `role`.
            StoreError: `parent_pk` is not a message of this conversation.
        """
        rows = [message_columns(message) for message in messages]
        if not rows:
            return []
        async with self._op("insert messages") as conn:
            if parent_pk is not None:
                await self._require_messages(conn, [parent_pk])
            cid = self.conversation_id
            end = (
                await conn.execute(
                    statements.ALLOCATE_SEQ, statements.params(cid=cid, count=len(rows))
                )
            ).scalar_one()
            # One INSERT per message: each row's parent is the key the previous one just got.
            pks: list[int] = []
            parent = parent_pk
            for seq, row in enumerate(rows, start=end - len(rows)):
                pk: int = (
                    await conn.execute(
                        statements.INSERT_MESSAGE,
                        statements.params(cid=cid, parent=parent, seq=seq, **row),
                    )
                ).scalar_one()
                pks.append(pk)
                self._inserted.add(pk)
                parent = pk
            return pks

    async def update_message(self, pk: int, message: dict[str, Any]) -> None:
        """Replace the stored UIMessage of row `pk` (its `message_id` and `role` follow the body).

        Raises:
            ValueError: `message` has no string `id` or `role`.
            StoreError: `pk` is not a message of this conversation.
        """
        row = message_columns(message)
        async with self._op("update message") as conn:
            result = await conn.execute(
                statements.UPDATE_MESSAGE, statements.params(pk=pk, cid=self.conversation_id, **row)
            )
            if result.rowcount != 1:
                raise StoreError(f"message {pk} is not in conversation {self.conversation_id}")

    async def reparent(self, pk: int, parent_pk: int | None) -> None:
        """Move row `pk` (with its subtree) under `parent_pk`, or make it a root with `None`.

        Raises:
            StoreError: either row is not in this conversation, or `parent_pk` is `pk` or one of
                its descendants (the tree would get a cycle).
        """
        async with self._op("reparent message") as conn:
            await self._require_messages(conn, [pk] if parent_pk is None else [pk, parent_pk])
            if parent_pk is not None and pk in await _ancestors(conn, parent_pk):
                raise StoreError(f"cannot move message {pk} under its own descendant {parent_pk}")
            await conn.execute(
                update(Message)
                .where(Message.id == pk, Message.conversation_id == self.conversation_id)
                .values(parent_id=parent_pk)
            )

    async def set_leaf(self, branch: BranchRef, leaf_pk: int | None) -> None:
        """Point `branch` (a name, or an id) at `leaf_pk`; a branch named that is created if
        it does not exist.

        The branch's transcript becomes the path from the root to `leaf_pk`; messages below or
        beside that path stay in the tree. `None` empties the branch.

        Raises:
            ValueError: `branch` is empty.
            StoreError: `leaf_pk` is not a message of this conversation.
            UnknownBranchError: no branch has the id `branch`.
        """
        if branch == "":
            raise ValueError("branch name must not be empty")
        async with self._op("set branch leaf") as conn:
            if leaf_pk is not None:
                await self._require_messages(conn, [leaf_pk])
            moved = await conn.execute(
                statements.MOVE_BRANCH_BY_ID
                if isinstance(branch, int)
                else statements.MOVE_BRANCH_BY_NAME,
                statements.params(
                    cid=self.conversation_id, branch=branch, leaf=leaf_pk, now=utcnow()
                ),
            )
            if moved.rowcount == 0:
                if isinstance(branch, int):
                    raise UnknownBranchError(self.conversation_id, branch)
                await conn.execute(
                    insert(Branch).values(
                        conversation_id=self.conversation_id, name=branch, leaf_id=leaf_pk
                    )
                )

    async def delete_messages(self, pks: Sequence[int]) -> None:
        """Delete rows `pks`; keys that are not messages of this conversation are ignored.

        Branches whose leaf (or fork point) is deleted are left pointing at nothing (`NULL`).
        The caller must first move any surviving message that points at a deleted one.

        Raises:
            StoreError: a surviving message still has a deleted one as parent.
        """
        ids = sorted(set(pks))
        if not ids:
            return
        self._inserted.difference_update(ids)
        chunks = [ids[i : i + _IN_CHUNK] for i in range(0, len(ids), _IN_CHUNK)]
        async with self._op("delete messages") as conn:
            if len(chunks) > 1:
                # Foreign keys are checked per statement: unlink the doomed rows from each other
                # first, so a parent and its child may fall into different chunks.
                for chunk in chunks:
                    await conn.execute(
                        update(Message)
                        .where(
                            Message.conversation_id == self.conversation_id,
                            Message.id.in_(chunk),
                            Message.parent_id.is_not(None),
                        )
                        .values(parent_id=None)
                    )
            for chunk in chunks:
                await conn.execute(
                    delete(Message).where(
                        Message.conversation_id == self.conversation_id, Message.id.in_(chunk)
                    )
                )

    async def clear(self) -> None:
        """Delete every message and every branch but `main` (left empty), and the request context.

        Turns are kept: a retried request must still be recognised. Sequence numbers keep
        counting up from where they were.
        """
        async with self._op("clear conversation") as conn:
            cid = self.conversation_id
            await conn.execute(
                delete(Branch).where(Branch.conversation_id == cid, Branch.name != MAIN_BRANCH)
            )
            await conn.execute(delete(Message).where(Message.conversation_id == cid))
            await conn.execute(
                update(Conversation)
                .where(Conversation.id == cid)
                .values(last_body=None, last_client_tools=None)
            )

    async def save_request_context(
        self, last_body: dict[str, Any] | None, last_client_tools: list[Any] | None
    ) -> None:
        """Store the last request body and client tool schemas (used to rerun a turn)."""
        async with self._op("save request context") as conn:
            await conn.execute(
                statements.SAVE_REQUEST_CONTEXT,
                statements.params(
                    cid=self.conversation_id,
                    last_body=last_body,
                    last_client_tools=last_client_tools,
                ),
            )


async def _ancestors(conn: AsyncConnection, pk: int) -> set[int]:
    """Return `pk` and the keys of all its ancestors."""
    up = select(Message.id, Message.parent_id).where(Message.id == pk).cte("up", recursive=True)
    parent = aliased(Message)
    up = up.union_all(select(parent.id, parent.parent_id).where(parent.id == up.c.parent_id))
    return set((await conn.scalars(select(up.c.id))).all())
