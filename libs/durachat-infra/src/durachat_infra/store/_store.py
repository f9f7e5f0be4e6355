"""`Store`: conversations, transcripts and turns in SQLite or PostgreSQL."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from operator import attrgetter
from typing import Any, TypeVar

from sqlalchemy import (
    Integer,
    Row,
    Text,
    insert,
    literal,
    null,
    select,
    type_coerce,
    update,
)
from sqlalchemy import cast as sql_cast
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.orm import aliased
from sqlalchemy.sql.elements import ColumnElement

from durachat.protocol import MAIN_BRANCH, BranchRef
from durachat_infra.store import _branches
from durachat_infra.store._engine import (
    begin_when_free,
    connect,
    translate_errors,
)
from durachat_infra.store._records import (
    BranchRecord,
    Conversation,
    ConversationKey,
    Siblings,
    StoredMessage,
)
from durachat_infra.store._safe_json import stored_message
from durachat_infra.store._statements import (
    FIND_CONVERSATION,
    INSERT_BRANCH,
    TENANT_EXISTS,
    insert_conversation,
    params,
)
from durachat_infra.store._store_turns import TurnReads
from durachat_infra.store._tenants import TenantStore
from durachat_infra.store._transaction import FencedTransaction, fence
from durachat_infra.store._webhooks import WebhookStore
from durachat_infra.store.errors import (
    ConversationExistsError,
    FencedError,
    StoreError,
    UnknownBranchError,
    UnknownConversationError,
    UnknownTenantError,
)
from durachat_infra.store.models import Branch, Message
from durachat_infra.store.models import Conversation as ConversationRow

logger = logging.getLogger(__name__)

T = TypeVar("T")


class Store(TurnReads, TenantStore, WebhookStore):
    """The SQL store of tenants and their keys, conversations, their message trees, branches and
    turns.

    All writes to a conversation's content go through `transaction`, which is fenced by the
    conversation's epoch (docs/architecture.md#ownership); `claim` raises the epoch for a new
    owner. Reads are not fenced. Every method may raise `DatabaseUnavailableError` (retryable)
    or `StoreError`.

    The store owns its engine: `close` disposes it. Use it as an async context manager or call
    `close` at shutdown.

    Example:
        ```python
        async with Store.from_url("sqlite:///var/durachat.db") as store:
            conv = await store.get_or_create_conversation(ConversationKey("default", "chat", "c1"))
            await store.claim(conv.id, epoch)
            async with store.transaction(conv.id, epoch) as tx:
                [pk] = await tx.insert_chain(None, [{"id": "m1", "role": "user", "parts": []}])
                await tx.set_leaf("main", pk)
        ```
    """

    async def get_or_create_conversation(
        self, key: ConversationKey, *, epoch: int = 0
    ) -> Conversation:
        """Return the conversation `key`, creating it (with its `main` branch, at fencing epoch
        `epoch`) if needed.

        Safe against concurrent creation of the same key from several processes: exactly one
        row is created and every caller gets it.

        Raises:
            UnknownTenantError: `key.tenant` does not exist.
        """
        # Most calls find an existing conversation: read first, so they do not queue for the
        # SQLite write lock.
        found = await self.find_conversation(key)
        if found is not None:
            return found

        if epoch < 0:
            raise ValueError("epoch must not be negative")

        async def create(conn: AsyncConnection) -> Conversation:
            created = await _insert_conversation(conn, key, epoch)
            if created is None:
                # Someone else created it meanwhile; their transaction has committed (the insert
                # waited for it), so a fresh read sees the row and its main branch.
                found = await _find(conn, key)
                if found is None:
                    raise StoreError(f"conversation {key} vanished while being created")
                return found
            await conn.execute(INSERT_BRANCH, params(cid=created, branch=MAIN_BRANCH))
            return Conversation(id=created, key=key, epoch=epoch, created=True)

        return await self._run_write("get or create conversation", create)

    async def find_conversation(self, key: ConversationKey) -> Conversation | None:
        """Return the conversation `key`, or `None` if it does not exist."""
        return await self._run_lookup("find conversation", lambda conn: _find(conn, key))

    async def claim(self, conversation_id: int, epoch: int, *, fresh: bool = False) -> None:
        """Raise the conversation's fencing epoch to `epoch` for a new owner.

        Idempotent: claiming the current epoch again succeeds, unless `fresh` says the epoch
        was just handed out for a new tenure (then it must be newer than any stored one, or
        two owners could share it). Waits for a transaction of the previous owner that is in
        progress; once `claim` returns, every transaction under an older epoch is rejected with
        `FencedError`.

        Raises:
            FencedError: the stored epoch is already greater than `epoch` (or equal, `fresh`).
            StoreError: the conversation does not exist.
        """
        if epoch < 0:
            raise ValueError("epoch must not be negative")

        async def raise_epoch(conn: AsyncConnection) -> None:
            raised = await conn.execute(
                update(ConversationRow)
                .where(ConversationRow.id == conversation_id, ConversationRow.epoch < epoch)
                .values(epoch=epoch)
            )
            if raised.rowcount == 1:
                return
            current = await conn.scalar(
                select(ConversationRow.epoch).where(ConversationRow.id == conversation_id)
            )
            if current is None:
                raise StoreError(f"conversation {conversation_id} does not exist")
            if current > epoch or (fresh and current == epoch):
                logger.warning(
                    "rejected claim of conversation %s at epoch %s (stored epoch %s)",
                    conversation_id,
                    epoch,
                    current,
                )
                raise FencedError(conversation_id, epoch, current)

        await self._run_write("claim conversation", raise_epoch)

    async def load_path(
        self, conversation_id: int, branch: str = MAIN_BRANCH
    ) -> list[StoredMessage]:
        """Return the messages on `branch`, root first.

        The cost grows with the length of the path, not with the size of the conversation.

        Returns:
            The path from the root to the branch's leaf; `[]` if the branch does not exist or is
            empty.
        """
        leaf = (
            select(Branch.leaf_id)
            .where(Branch.conversation_id == conversation_id, Branch.name == branch)
            .scalar_subquery()
        )
        async with self._read("load path") as conn:
            rows = await _path(conn, leaf)
        return [_stored(conversation_id, row) for row in rows]

    async def transcript(
        self, key: ConversationKey, branch: str = MAIN_BRANCH
    ) -> list[dict[str, Any]]:
        """Return the UIMessages on `branch` of conversation `key`, root first.

        Read-only: an unknown conversation or branch gives `[]` and creates nothing.
        """
        leaf = (
            select(Branch.leaf_id)
            .join(ConversationRow, ConversationRow.id == Branch.conversation_id)
            .where(
                ConversationRow.tenant_id == key.tenant,
                ConversationRow.agent == key.agent,
                ConversationRow.name == key.name,
                Branch.name == branch,
            )
            .scalar_subquery()
        )
        async with self._read("load transcript") as conn:
            rows = await _path(conn, leaf)
        return [_stored(key, row).message for row in rows]

    async def list_branches(self, conversation_id: int) -> list[BranchRecord]:
        """Every branch of the conversation, oldest first (`main` first); `[]` if the
        conversation does not exist."""
        async with self._read("list branches") as conn:
            return await _branches.list_records(conn, conversation_id)

    async def get_branch(self, conversation_id: int, branch: BranchRef) -> BranchRecord | None:
        """One branch, by id (`int`) or name (`str`); `None` if the conversation has no such
        branch."""
        async with self._read("get branch") as conn:
            return await _branches.get_record(conn, conversation_id, branch)

    async def branch_path(
        self, conversation_id: int, branch: BranchRef
    ) -> list[StoredMessage] | None:
        """The messages on a branch (by id or name), root first.

        Like `load_path`, but tells an unknown branch (`None`) from an empty one (`[]`). The
        cost grows with the length of the path, not with the size of the conversation.
        """
        async with self._read("load branch path") as conn:
            found = await _branches.resolve(conn, conversation_id, branch)
            if found is None:
                return None
            if found.leaf_id is None:
                return []
            rows = await _path(conn, literal(found.leaf_id))
        return [_stored(conversation_id, row) for row in rows]

    async def siblings(
        self, conversation_id: int, message_id: str, branch: BranchRef | None = None
    ) -> Siblings | None:
        """The alternatives of a message: the UIMessage ids of every child of its parent (every
        root, for a root), oldest first, the message's index, and for each the branch that
        shows it (`Siblings.shown_on`).

        A UIMessage id may occur more than once (an edit keeps its message's id). The message
        is looked for on `branch`'s path (nearest its leaf) when one is named; otherwise, or
        when it is not there, it is the only message with that id in the conversation. With
        no branch named, an id that occurs more than once is looked for on `main`.

        Returns:
            The siblings, or `None` if no such message is found.

        Raises:
            UnknownBranchError: the conversation has no such branch.
            AmbiguousMessageError: no branch was named, the id occurs more than once, and
                none of its occurrences is on `main`.
        """
        async with self._read("list siblings") as conn:
            return await _branches.find_siblings(conn, conversation_id, message_id, branch)

    async def fork_conversation(
        self, source: ConversationKey, branch: BranchRef, target: ConversationKey
    ) -> Conversation:
        """Copy the path of `branch` of conversation `source` into a new conversation `target`,
        as its `main`.

        The copies keep their UIMessage ids and bodies and get new rows and sequence numbers
        (`0..n-1`); the new conversation starts at epoch 0, with no turns and no request
        context. One transaction: either the whole fork exists afterwards or nothing does.
        Not fenced: the source is only read, and the target is new.

        Raises:
            UnknownConversationError: `source` does not exist.
            UnknownBranchError: `source` has no such branch.
            UnknownTenantError: `target.tenant` does not exist.
            ConversationExistsError: `target` exists already.
        """
        async with self._write("fork conversation") as conn:
            origin = await _find(conn, source)
            if origin is None:
                raise UnknownConversationError(source)
            found = await _branches.resolve(conn, origin.id, branch)
            if found is None:
                raise UnknownBranchError(origin.id, branch)
            created = await _insert_conversation(conn, target)
            if created is None:
                raise ConversationExistsError(target)
            leaf = await _copy_path(conn, found.leaf_id, created)
            await conn.execute(
                insert(Branch).values(conversation_id=created, name=MAIN_BRANCH, leaf_id=leaf)
            )
            return Conversation(id=created, key=target, epoch=0)

    @contextlib.asynccontextmanager
    async def transaction(
        self, conversation_id: int, epoch: int
    ) -> AsyncIterator[FencedTransaction]:
        """Open a fenced write transaction on a conversation.

        Usage: `async with store.transaction(conv_id, epoch) as tx: ...`. See
        `FencedTransaction` for the guarantees. On SQLite the transaction holds the database's
        write lock from its start (`BEGIN IMMEDIATE`), so keep it short: no model calls inside.

        Raises:
            FencedError: on entry, if the conversation's epoch is not `epoch`; nothing is applied.
            StoreError: the conversation does not exist, or an operation in the block failed
                (everything is rolled back).
        """
        async with self._gate.hold(), self._fenced(conversation_id, epoch) as tx:
            yield tx

    async def run_transaction(
        self, conversation_id: int, epoch: int, work: Callable[[FencedTransaction], Awaitable[T]]
    ) -> T:
        """Run `work` in a fenced write transaction on a conversation and return its result.

        The same guarantees and errors as `transaction`. On SQLite, writes queued this way by
        the coroutines of one process share turns of the write lock (see `_gate`): prefer it on
        hot paths. `work` should only run statements on `tx`; once started it completes even if
        the caller is cancelled.
        """

        async def run() -> T:
            async with self._fenced(conversation_id, epoch) as tx:
                return await work(tx)

        return await self._gate.run(run)

    @contextlib.asynccontextmanager
    async def _fenced(self, conversation_id: int, epoch: int) -> AsyncIterator[FencedTransaction]:
        action = f"transaction on conversation {conversation_id}"
        async with connect(self._writer, action) as conn:
            with translate_errors(action):
                await begin_when_free(conn)
                await fence(conn, conversation_id, epoch)
            tx = FencedTransaction(conn, conversation_id, epoch)
            try:
                yield tx
            finally:
                failed = tx._finish()
            if failed:
                raise StoreError(f"{action}: rolled back because an operation in it failed")
            with translate_errors(action):
                await conn.commit()


async def _insert_conversation(
    conn: AsyncConnection, key: ConversationKey, epoch: int = 0
) -> int | None:
    """Insert the conversation's row (without branches) at fencing epoch `epoch`; its id, or
    None if it exists.

    Raises:
        UnknownTenantError: `key.tenant` does not exist.
    """
    if await conn.scalar(TENANT_EXISTS, params(tenant=key.tenant)) is None:
        raise UnknownTenantError(key.tenant)
    created: int | None = await conn.scalar(
        insert_conversation(conn.dialect),
        params(tenant=key.tenant, agent=key.agent, name=key.name, epoch=epoch),
    )
    return created


async def _find(conn: AsyncConnection, key: ConversationKey) -> Conversation | None:
    row = (
        await conn.execute(
            FIND_CONVERSATION, params(tenant=key.tenant, agent=key.agent, name=key.name)
        )
    ).first()
    return None if row is None else Conversation(id=row.id, key=key, epoch=row.epoch)


async def _path(conn: AsyncConnection, leaf: ColumnElement[Any]) -> list[Row[Any]]:
    """Return the message rows from the root down to `leaf` (a scalar: the leaf's key or NULL).

    Walks up from the leaf with a recursive CTE, one primary-key lookup per step, so the cost
    follows the length of the path, not the size of the conversation.
    """
    up = _branches.up_from(leaf, "path")
    result = await conn.execute(
        select(
            Message.id,
            Message.message_id,
            Message.parent_id,
            Message.seq,
            Message.role,
            # The text as stored: `_stored` decodes each body on its own, so one bad row
            # cannot fail the read of the others.
            type_coerce(Message.body, Text).label("body"),
            up.c.depth,
        ).join(up, up.c.id == Message.id)
    )
    # Ordered here rather than with ORDER BY: the database would sort whole rows, bodies
    # included (PostgreSQL spills long paths to disk), where sorting the depths is enough.
    return sorted(result, key=attrgetter("depth"), reverse=True)


def _stored(conversation: object, row: Row[Any]) -> StoredMessage:
    """A message row as handed out; a body that cannot be read as stored is quarantined: what
    can be kept of it is handed out instead, and the row is reported (`durachat-admin repair`
    rewrites such rows, docs/operations.md#stored-data-that-cannot-be-read)."""
    message, problem = stored_message(row.body, row.message_id, row.role)
    if problem is not None:
        logger.warning(
            "quarantined message %s (row %s) of conversation %s: %s",
            row.message_id,
            row.id,
            conversation,
            problem,
        )
    return StoredMessage(
        pk=row.id,
        message_id=row.message_id,
        parent_pk=row.parent_id,
        seq=row.seq,
        message=message,
        quarantined=None if problem is None else str(problem),
    )


async def _copy_path(conn: AsyncConnection, leaf_pk: int | None, target: int) -> int | None:
    """Copy the path ending at `leaf_pk` into conversation `target` (which has no messages yet)
    as a chain with sequence numbers `0..n-1`; return the copy of the leaf.

    Done in SQL (no body passes through Python): the rows are copied with `INSERT ... SELECT`,
    then each copy is linked to the copy with the sequence number before it.
    """
    length = len(await _branches.path_ids(conn, leaf_pk))
    if not length:
        return None
    up = _branches.up_from(literal(leaf_pk), "copied")
    await conn.execute(
        insert(Message).from_select(
            ["conversation_id", "message_id", "parent_id", "seq", "role", "body"],
            select(
                literal(target, Message.conversation_id.type),
                Message.message_id,
                sql_cast(null(), Message.parent_id.type),
                literal(length - 1, Integer) - up.c.depth,
                Message.role,
                Message.body,
            ).join(up, up.c.id == Message.id),
        )
    )
    previous = aliased(Message)
    await conn.execute(
        update(Message)
        .where(Message.conversation_id == target, Message.seq > 0)
        .values(
            parent_id=select(previous.id)
            .where(previous.conversation_id == target, previous.seq == Message.seq - 1)
            .scalar_subquery()
        )
    )
    await conn.execute(
        update(ConversationRow).where(ConversationRow.id == target).values(next_seq=length)
    )
    leaf: int | None = await conn.scalar(
        select(Message.id).where(Message.conversation_id == target, Message.seq == length - 1)
    )
    return leaf
