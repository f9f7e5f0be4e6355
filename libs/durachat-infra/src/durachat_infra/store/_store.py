"""`Store`: conversations, transcripts and turns in SQLite or PostgreSQL."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime
from operator import attrgetter
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar, cast

from sqlalchemy import (
    Integer,
    Row,
    delete,
    insert,
    literal,
    null,
    select,
    update,
)
from sqlalchemy import cast as sql_cast
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.orm import aliased
from sqlalchemy.sql.elements import ColumnElement

from durachat_infra.store import _branches
from durachat_infra.store._engine import (
    BEGIN_OPTION,
    begin_when_free,
    connect,
    create_engine,
    insert_new,
    install_sqlite_hooks,
    sqlite_writer_engine,
    translate_errors,
)
from durachat_infra.store._gate import WriteGate
from durachat_infra.store._records import (
    MAIN_BRANCH,
    OPEN_TURN_STATUSES,
    BranchRecord,
    BranchRef,
    Conversation,
    ConversationKey,
    IncidentRecord,
    OpenTurn,
    Siblings,
    StoredMessage,
    TurnKind,
    TurnRecord,
    TurnStatus,
)
from durachat_infra.store._transaction import FencedTransaction, fence
from durachat_infra.store._types import utcnow
from durachat_infra.store.errors import (
    ConversationExistsError,
    FencedError,
    StoreError,
    UnknownBranchError,
    UnknownConversationError,
    UnknownTenantError,
)
from durachat_infra.store.models import Branch, Message, RecoveryIncident, Tenant, Turn
from durachat_infra.store.models import Conversation as ConversationRow

logger = logging.getLogger(__name__)

T = TypeVar("T")

_SUPPORTED_DIALECTS = ("sqlite", "postgresql")


class Store:
    """The SQL store of conversations, their message trees, branches and turns.

    All writes to a conversation's content go through `transaction`, which is fenced by the
    conversation's epoch (DESIGN §4); `claim` raises the epoch for a new owner. Reads are not
    fenced. Every method may raise `DatabaseUnavailableError` (retryable) or `StoreError`.

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

    def __init__(self, engine: AsyncEngine) -> None:
        """Wrap `engine` (SQLite via aiosqlite or PostgreSQL via asyncpg).

        Prefer `from_url`. An engine passed here must not have opened connections yet, so that
        every SQLite connection gets the store's setup (foreign keys, WAL, busy timeout).

        Raises:
            ValueError: the engine is for another database.
        """
        if engine.dialect.name not in _SUPPORTED_DIALECTS:
            raise ValueError(f"unsupported database {engine.dialect.name!r}")
        install_sqlite_hooks(engine)
        self._engine = engine
        database = engine.url.database
        sqlite_file = engine.url.get_backend_name() == "sqlite" and bool(database)
        # On SQLite, writers run their statements on the loop's thread so that the write lock
        # is held only for the SQL's time (see `_sqlite_inloop`); reads stay on `engine`.
        self._writer_engine = sqlite_writer_engine(engine) if sqlite_file else engine
        # Writers take SQLite's write lock when they begin (see `_engine._on_begin`).
        self._writer = self._writer_engine.execution_options(**{BEGIN_OPTION: "IMMEDIATE"})
        self._gate = WriteGate(Path(database).resolve() if sqlite_file and database else None)

    @classmethod
    def from_url(cls, url: str, *, echo: bool = False) -> Store:
        """Create a store for a database URL.

        Args:
            url: `sqlite:///path` or `postgresql://user:pass@host/db`; the async drivers
                (`+aiosqlite`, `+asyncpg`) are filled in when missing.
            echo: log every SQL statement.

        Raises:
            ValueError: unsupported URL, or in-memory SQLite.
        """
        return cls(create_engine(url, echo=echo))

    @property
    def engine(self) -> AsyncEngine:
        """The underlying engine."""
        return self._engine

    async def close(self) -> None:
        """Close every pooled connection. The store must not be used afterwards."""
        await self._engine.dispose()
        if self._writer_engine is not self._engine:
            await self._writer_engine.dispose()
        self._gate.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def get_or_create_conversation(self, key: ConversationKey) -> Conversation:
        """Return the conversation `key`, creating it (with its `main` branch) if needed.

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

        async def create(conn: AsyncConnection) -> Conversation:
            created = await _insert_conversation(conn, key)
            if created is None:
                # Someone else created it meanwhile; their transaction has committed (the insert
                # waited for it), so a fresh read sees the row and its main branch.
                found = await _find(conn, key)
                if found is None:
                    raise StoreError(f"conversation {key} vanished while being created")
                return found
            await conn.execute(insert(Branch).values(conversation_id=created, name=MAIN_BRANCH))
            return Conversation(id=created, key=key, epoch=0)

        return await self._run_write("get or create conversation", create)

    async def find_conversation(self, key: ConversationKey) -> Conversation | None:
        """Return the conversation `key`, or `None` if it does not exist."""
        async with self._read("find conversation") as conn:
            return await _find(conn, key)

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
        return [
            StoredMessage(
                pk=row.id,
                message_id=row.message_id,
                parent_pk=row.parent_id,
                seq=row.seq,
                message=row.body,
            )
            for row in rows
        ]

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
        return [row.body for row in rows]

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
        return [
            StoredMessage(
                pk=row.id,
                message_id=row.message_id,
                parent_pk=row.parent_id,
                seq=row.seq,
                message=row.body,
            )
            for row in rows
        ]

    async def siblings(
        self, conversation_id: int, message_id: str, branch: BranchRef = MAIN_BRANCH
    ) -> Siblings | None:
        """The alternatives of a message as seen from a branch: the UIMessage ids of every
        child of its parent (every root, for a root), oldest first, and the message's index.

        The message is looked for on the branch's path (nearest the leaf if its id occurs twice
        there), since a UIMessage id may occur on several branches.

        Returns:
            The siblings, or `None` if the message is not on the branch's path.

        Raises:
            UnknownBranchError: the conversation has no such branch.
        """
        async with self._read("list siblings") as conn:
            found = await _branches.resolve(conn, conversation_id, branch)
            if found is None:
                raise UnknownBranchError(conversation_id, branch)
            spot = await _branches.occurrence(conn, found.leaf_id, message_id)
            if spot is None:
                return None
            return await _branches.siblings_of(conn, conversation_id, *spot)

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

    async def recent_request_ids(self, conversation_id: int, *, limit: int = 256) -> list[str]:
        """Request ids of the conversation's newest turns, newest first (for fast dedupe)."""
        async with self._read("recent turns") as conn:
            rows = await conn.execute(
                select(Turn.request_id)
                .where(Turn.conversation_id == conversation_id)
                .order_by(Turn.id.desc())
                .limit(limit)
            )
            return [str(r[0]) for r in rows]

    async def get_turn(self, conversation_id: int, request_id: str) -> TurnRecord | None:
        """Return the turn `request_id` of the conversation, or `None`."""
        async with self._read("get turn") as conn:
            row = (
                await conn.execute(
                    select(*_TURN_COLUMNS).where(
                        Turn.conversation_id == conversation_id, Turn.request_id == request_id
                    )
                )
            ).first()
        return None if row is None else _turn_record(row)

    async def open_turns(self, conversation_id: int) -> list[TurnRecord]:
        """The conversation's turns that have not ended (`accepted` or `running`), oldest
        first: after a new owner claims a conversation, the ones its former owner left."""
        async with self._read("open turns") as conn:
            rows = await conn.execute(
                select(*_TURN_COLUMNS)
                .where(
                    Turn.conversation_id == conversation_id,
                    Turn.status.in_(OPEN_TURN_STATUSES),
                )
                .order_by(Turn.id)
            )
            return [_turn_record(row) for row in rows]

    async def all_open_turns(self, *, limit: int = 1000) -> list[OpenTurn]:
        """Open turns of every conversation, oldest first (the orphan scan of the jobs
        service; the `(status, heartbeat_at)` index serves it)."""
        async with self._read("all open turns") as conn:
            rows = await conn.execute(
                select(
                    *_TURN_COLUMNS,
                    ConversationRow.id.label("conv_id"),
                    ConversationRow.tenant_id,
                    ConversationRow.agent,
                    ConversationRow.name,
                )
                .join(ConversationRow, ConversationRow.id == Turn.conversation_id)
                .where(Turn.status.in_(OPEN_TURN_STATUSES))
                .order_by(Turn.id)
                .limit(limit)
            )
            return [
                OpenTurn(
                    row.conv_id,
                    ConversationKey(row.tenant_id, row.agent, row.name),
                    _turn_record(row),
                )
                for row in rows
            ]

    async def heartbeat_turns(self, owner: str) -> int:
        """Mark every open turn of `owner` as alive now; returns how many there are.

        Not fenced: a heartbeat only says the process is alive. Whether it still owns a
        conversation is the lease's business (the orphan scan checks both).
        """

        async def beat(conn: AsyncConnection) -> int:
            result = await conn.execute(
                update(Turn)
                .where(Turn.owner == owner, Turn.status.in_(OPEN_TURN_STATUSES))
                .values(heartbeat_at=utcnow())
            )
            return int(result.rowcount)

        return await self._run_write("heartbeat turns", beat)

    async def get_incident(self, conversation_id: int, incident_id: str) -> IncidentRecord | None:
        """Return a recovery incident, or `None`."""
        async with self._read("get incident") as conn:
            row = (
                await conn.execute(
                    select(
                        RecoveryIncident.incident_id,
                        RecoveryIncident.request_id,
                        RecoveryIncident.status,
                        RecoveryIncident.attempt,
                        RecoveryIncident.data,
                        RecoveryIncident.updated_at,
                    ).where(
                        RecoveryIncident.conversation_id == conversation_id,
                        RecoveryIncident.incident_id == incident_id,
                    )
                )
            ).first()
        if row is None:
            return None
        return IncidentRecord(
            row.incident_id, row.request_id, row.status, row.attempt, row.data or {}, row.updated_at
        )

    async def sweep_incidents(self, before: datetime) -> int:
        """Delete recovery incidents untouched since `before`; returns how many."""
        async with self._write("sweep incidents") as conn:
            result = await conn.execute(
                delete(RecoveryIncident).where(RecoveryIncident.updated_at < before)
            )
            return int(result.rowcount)

    async def load_request_context(
        self, conversation_id: int
    ) -> tuple[dict[str, Any] | None, list[Any] | None]:
        """Return `(last_body, last_client_tools)` as saved by `save_request_context`.

        `(None, None)` if nothing was saved (or the conversation does not exist).
        """
        async with self._read("load request context") as conn:
            row = (
                await conn.execute(
                    select(ConversationRow.last_body, ConversationRow.last_client_tools).where(
                        ConversationRow.id == conversation_id
                    )
                )
            ).first()
        if row is None:
            return None, None
        return row.last_body, row.last_client_tools

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

    @contextlib.asynccontextmanager
    async def _read(self, action: str) -> AsyncIterator[AsyncConnection]:
        async with connect(self._engine, action) as conn:
            with translate_errors(action):
                yield conn

    @contextlib.asynccontextmanager
    async def _write(self, action: str) -> AsyncIterator[AsyncConnection]:
        async with self._gate.hold(), self._unfenced(action) as conn:
            yield conn

    async def _run_write(self, action: str, work: Callable[[AsyncConnection], Awaitable[T]]) -> T:
        """`_write` for statements only, queued to share a turn of the write lock."""

        async def run() -> T:
            async with self._unfenced(action) as conn:
                return await work(conn)

        return await self._gate.run(run)

    @contextlib.asynccontextmanager
    async def _unfenced(self, action: str) -> AsyncIterator[AsyncConnection]:
        async with connect(self._writer, action) as conn:
            with translate_errors(action):
                await begin_when_free(conn)
                yield conn
                await conn.commit()


async def _insert_conversation(conn: AsyncConnection, key: ConversationKey) -> int | None:
    """Insert the conversation's row (without branches); its id, or None if it exists.

    Raises:
        UnknownTenantError: `key.tenant` does not exist.
    """
    if await conn.scalar(select(Tenant.id).where(Tenant.id == key.tenant)) is None:
        raise UnknownTenantError(key.tenant)
    created: int | None = await conn.scalar(
        insert_new(
            conn,
            ConversationRow,
            ["tenant_id", "agent", "name"],
            tenant_id=key.tenant,
            agent=key.agent,
            name=key.name,
        ).returning(ConversationRow.id)
    )
    return created


async def _find(conn: AsyncConnection, key: ConversationKey) -> Conversation | None:
    row = (
        await conn.execute(
            select(ConversationRow.id, ConversationRow.epoch).where(
                ConversationRow.tenant_id == key.tenant,
                ConversationRow.agent == key.agent,
                ConversationRow.name == key.name,
            )
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
            Message.id, Message.message_id, Message.parent_id, Message.seq, Message.body, up.c.depth
        ).join(up, up.c.id == Message.id)
    )
    # Ordered here rather than with ORDER BY: the database would sort whole rows, bodies
    # included (PostgreSQL spills long paths to disk), where sorting the depths is enough.
    return sorted(result, key=attrgetter("depth"), reverse=True)


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


_TURN_COLUMNS = (
    Turn.request_id,
    Turn.kind,
    Turn.status,
    Turn.owner,
    Turn.epoch,
    Turn.message_id,
    Turn.request,
    Turn.stash,
    Turn.error,
    Turn.heartbeat_at,
    Turn.created_at,
)


def _turn_record(row: Row[Any]) -> TurnRecord:
    return TurnRecord(
        request_id=row.request_id,
        kind=cast(TurnKind, row.kind),
        status=cast(TurnStatus, row.status),
        owner=row.owner,
        epoch=row.epoch,
        message_id=row.message_id,
        request=row.request,
        stash=row.stash,
        error=row.error,
        heartbeat_at=row.heartbeat_at,
        created_at=row.created_at,
    )
