"""`FencedTransaction`: the only way to write to a conversation."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from typing import Any, Final

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.orm import aliased

from durachat_infra.store import _branches
from durachat_infra.store._engine import insert_new, translate_errors
from durachat_infra.store._records import (
    MAIN_BRANCH,
    TURN_KINDS,
    TURN_STATUSES,
    BranchRecord,
    BranchRef,
    ToolCallRecord,
    TurnKind,
    TurnStatus,
    check_branch_name,
)
from durachat_infra.store._types import utcnow
from durachat_infra.store.errors import (
    BranchExistsError,
    FencedError,
    MainBranchError,
    StoreError,
    UnknownBranchError,
    UnknownMessageError,
)
from durachat_infra.store.models import (
    Branch,
    Conversation,
    Message,
    RecoveryIncident,
    ToolExecution,
    Turn,
)

logger = logging.getLogger(__name__)

_IN_CHUNK: Final = 1000
"""Ids per `IN (...)` list; both drivers cap bound parameters (SQLite 32766, asyncpg 32767)."""


class FencedTransaction:
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

    Attributes:
        conversation_id: the conversation written to.
        epoch: the fencing epoch the transaction holds.
    """

    def __init__(self, conn: AsyncConnection, conversation_id: int, epoch: int) -> None:
        self._conn = conn
        self.conversation_id = conversation_id
        self.epoch = epoch
        self._closed = False
        self._failed = False

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
        rows = [_columns(message) for message in messages]
        if not rows:
            return []
        async with self._op("insert messages") as conn:
            if parent_pk is not None:
                await self._require_messages(conn, [parent_pk])
            end = (
                await conn.execute(
                    update(Conversation)
                    .where(Conversation.id == self.conversation_id)
                    .values(next_seq=Conversation.next_seq + len(rows))
                    .returning(Conversation.next_seq)
                )
            ).scalar_one()
            # One INSERT per message: each row's parent is the key the previous one just got.
            pks: list[int] = []
            parent = parent_pk
            for seq, row in enumerate(rows, start=end - len(rows)):
                pk: int = (
                    await conn.execute(
                        insert(Message)
                        .values(
                            conversation_id=self.conversation_id, parent_id=parent, seq=seq, **row
                        )
                        .returning(Message.id)
                    )
                ).scalar_one()
                pks.append(pk)
                parent = pk
            return pks

    async def update_message(self, pk: int, message: dict[str, Any]) -> None:
        """Replace the stored UIMessage of row `pk` (its `message_id` and `role` follow the body).

        Raises:
            ValueError: `message` has no string `id` or `role`.
            StoreError: `pk` is not a message of this conversation.
        """
        row = _columns(message)
        async with self._op("update message") as conn:
            result = await conn.execute(
                update(Message)
                .where(Message.id == pk, Message.conversation_id == self.conversation_id)
                .values(**row)
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
            which = Branch.id == branch if isinstance(branch, int) else Branch.name == branch
            moved = await conn.execute(
                update(Branch)
                .where(Branch.conversation_id == self.conversation_id, which)
                .values(leaf_id=leaf_pk, updated_at=utcnow())
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
                update(Conversation)
                .where(Conversation.id == self.conversation_id)
                .values(last_body=last_body, last_client_tools=last_client_tools)
            )

    async def begin_turn(
        self, request_id: str, *, kind: TurnKind, owner: str, request: dict[str, Any] | None
    ) -> bool:
        """Record a new turn with status `accepted` under this transaction's epoch.

        Requests are idempotent by id: if a turn with `request_id` exists, nothing changes.

        Returns:
            `True` if the turn was recorded, `False` if it already existed.

        Raises:
            ValueError: unknown `kind` or empty `request_id`.
        """
        if not request_id:
            raise ValueError("request_id must not be empty")
        if kind not in TURN_KINDS:
            raise ValueError(f"unknown turn kind {kind!r}; expected one of {sorted(TURN_KINDS)}")
        async with self._op("begin turn") as conn:
            inserted = await conn.execute(
                insert_new(
                    conn,
                    Turn,
                    ["conversation_id", "request_id"],
                    conversation_id=self.conversation_id,
                    request_id=request_id,
                    kind=kind,
                    status="accepted",
                    owner=owner,
                    epoch=self.epoch,
                    request=request,
                ).returning(Turn.id)
            )
            return inserted.first() is not None

    async def update_turn(
        self,
        request_id: str,
        *,
        status: TurnStatus | None = None,
        message_id: str | None = None,
        error: str | None = None,
        heartbeat: bool = False,
        stash: dict[str, Any] | None = None,
        owner: str | None = None,
    ) -> None:
        """Update the turn `request_id`; arguments left at `None`/`False` keep their value.

        Args:
            request_id: the turn to update.
            status: the new status.
            message_id: the assistant message the turn produces.
            error: the error message of a failed turn.
            heartbeat: set `heartbeat_at` to now.
            stash: replace the recovery stash.
            owner: take the turn over for another shard; also records this transaction's epoch
                as the turn's epoch (recovery by a new owner).

        Raises:
            ValueError: unknown `status`.
            StoreError: there is no turn `request_id` in this conversation.
        """
        if status is not None and status not in TURN_STATUSES:
            raise ValueError(
                f"unknown turn status {status!r}; expected one of {sorted(TURN_STATUSES)}"
            )
        values: dict[str, Any] = {"updated_at": utcnow()}
        if status is not None:
            values["status"] = status
        if message_id is not None:
            values["message_id"] = message_id
        if error is not None:
            values["error"] = error
        if heartbeat:
            values["heartbeat_at"] = values["updated_at"]
        if stash is not None:
            values["stash"] = stash
        if owner is not None:
            values["owner"] = owner
            values["epoch"] = self.epoch
        async with self._op("update turn") as conn:
            result = await conn.execute(
                update(Turn)
                .where(Turn.conversation_id == self.conversation_id, Turn.request_id == request_id)
                .values(**values)
            )
            if result.rowcount != 1:
                raise StoreError(f"no turn {request_id!r} in conversation {self.conversation_id}")

    async def create_branch(
        self,
        name: str,
        *,
        from_branch: BranchRef = MAIN_BRANCH,
        fork_message_id: str | None = None,
        at_root: bool = False,
    ) -> BranchRecord:
        """Create the branch `name`, forked from `from_branch` at one of its messages.

        The new branch's leaf is the fork message, so its transcript starts as the path of
        `from_branch` up to and including that message; what is written to it afterwards hangs
        below the fork message. `from_branch` is recorded as its parent branch and the fork
        message as its fork point. Nothing else changes.

        Args:
            name: unique in the conversation (see `check_branch_name`).
            from_branch: the branch forked from, by id or name.
            fork_message_id: the UIMessage id of a message on `from_branch`'s path; `None`
                forks at its leaf (an empty `from_branch` gives an empty branch).
            at_root: fork above the first message instead: the new branch starts empty, and
                what is written to it becomes a new root (an edit of the first message).

        Raises:
            ValueError: `name` is not a valid branch name.
            UnknownBranchError: there is no `from_branch`.
            UnknownMessageError: the message is not on `from_branch`'s path.
            BranchExistsError: the name is taken.
        """
        check_branch_name(name)
        async with self._op("create branch") as conn:
            cid = self.conversation_id
            source = await _branches.resolve(conn, cid, from_branch)
            if source is None:
                raise UnknownBranchError(cid, from_branch)
            fork_pk = None if at_root else source.leaf_id
            if fork_message_id is not None and not at_root:
                spot = await _branches.occurrence(conn, source.leaf_id, fork_message_id)
                if spot is None:
                    raise UnknownMessageError(cid, fork_message_id, from_branch)
                fork_pk = spot[0]
            created = await conn.scalar(
                insert_new(
                    conn,
                    Branch,
                    ["conversation_id", "name"],
                    conversation_id=cid,
                    name=name,
                    leaf_id=fork_pk,
                    parent_branch_id=source.id,
                    fork_message_id=fork_pk,
                ).returning(Branch.id)
            )
            if created is None:
                raise BranchExistsError(cid, name)
            return await self._record(conn, created)

    async def rename_branch(self, branch: BranchRef, name: str) -> BranchRecord:
        """Rename a branch (by id or name); renaming it to its own name changes nothing.

        Raises:
            ValueError: `name` is not a valid branch name.
            UnknownBranchError: there is no such branch.
            MainBranchError: the branch is `main`.
            BranchExistsError: the name is taken.
        """
        check_branch_name(name)
        async with self._op("rename branch") as conn:
            cid = self.conversation_id
            found = await _branches.resolve(conn, cid, branch)
            if found is None:
                raise UnknownBranchError(cid, branch)
            if found.name != name:
                if found.name == MAIN_BRANCH:
                    raise MainBranchError(cid, "rename")
                # The conversation's row is locked by the fence: no one else can take the
                # name between this check and the update.
                taken = await conn.scalar(
                    select(Branch.id).where(Branch.conversation_id == cid, Branch.name == name)
                )
                if taken is not None:
                    raise BranchExistsError(cid, name)
                await conn.execute(update(Branch).where(Branch.id == found.id).values(name=name))
            return await self._record(conn, found.id)

    async def delete_branch(self, branch: BranchRef) -> int:
        """Delete a branch (by id or name) and the messages only it reaches.

        What goes is the part of the branch's path that no other branch's path reaches (a
        tail of it), with everything hanging below that part (alternatives abandoned there by
        a regenerate or an edit). Messages another branch reaches stay, and so does everything
        off this branch's path. Branches forked from it get its parent branch as theirs.

        Returns:
            How many messages were deleted.

        Raises:
            UnknownBranchError: there is no such branch.
            MainBranchError: the branch is `main`.
        """
        async with self._op("delete branch") as conn:
            cid = self.conversation_id
            found = await _branches.resolve(conn, cid, branch)
            if found is None:
                raise UnknownBranchError(cid, branch)
            if found.name == MAIN_BRANCH:
                raise MainBranchError(cid, "delete")
            await conn.execute(
                update(Branch)
                .where(Branch.conversation_id == cid, Branch.parent_branch_id == found.id)
                .values(parent_branch_id=found.parent_branch_id)
            )
            await conn.execute(delete(Branch).where(Branch.id == found.id))
            if found.leaf_id is None:
                return 0
            return await _branches.prune_above(conn, cid, found.leaf_id)

    async def trim_path(self, branch: BranchRef, keep: int) -> int:
        """Keep only the newest `keep` messages of a branch's path (`max_persisted_messages`
        along a branch).

        The oldest message kept becomes a root, so every branch whose path runs through it is
        cut too. Of the messages cut off, those another branch still reaches stay (they remain
        that branch's history); the rest are deleted, with everything hanging below them.

        Returns:
            How many messages were deleted.

        Raises:
            ValueError: `keep` is less than 1.
            UnknownBranchError: there is no such branch.
        """
        if keep < 1:
            raise ValueError("keep must be at least 1")
        async with self._op("trim branch path") as conn:
            cid = self.conversation_id
            found = await _branches.resolve(conn, cid, branch)
            if found is None:
                raise UnknownBranchError(cid, branch)
            path = await _branches.path_ids(conn, found.leaf_id)
            if len(path) <= keep:
                return 0
            first_kept = path[len(path) - keep]
            await conn.execute(
                update(Message).where(Message.id == first_kept).values(parent_id=None)
            )
            return await _branches.prune_above(conn, cid, path[len(path) - keep - 1])

    async def record_tool_call(
        self, tool_call_id: str, *, tool_name: str, input: Any, owner: str
    ) -> ToolCallRecord | None:
        """Enter a server tool call in the ledger as `running`, before it runs.

        Returns:
            `None` if the call is new (it may run now), else the call's existing record, which
            is left as it is: a completed call is never run again.
        """
        async with self._op("record tool call") as conn:
            inserted = await conn.execute(
                insert_new(
                    conn,
                    ToolExecution,
                    ["conversation_id", "tool_call_id"],
                    conversation_id=self.conversation_id,
                    tool_call_id=tool_call_id,
                    tool_name=tool_name,
                    status="running",
                    input=input,
                    owner=owner,
                    epoch=self.epoch,
                ).returning(ToolExecution.id)
            )
            if inserted.first() is not None:
                return None
            row = (
                await conn.execute(
                    select(
                        ToolExecution.tool_name,
                        ToolExecution.status,
                        ToolExecution.output,
                        ToolExecution.error,
                    ).where(
                        ToolExecution.conversation_id == self.conversation_id,
                        ToolExecution.tool_call_id == tool_call_id,
                    )
                )
            ).one()
        return ToolCallRecord(tool_call_id, row.tool_name, row.status, row.output, row.error)

    async def finish_tool_call(
        self, tool_call_id: str, *, output: Any = None, error: str | None = None
    ) -> None:
        """Record how a server tool call ended: its output, or `error`."""
        async with self._op("finish tool call") as conn:
            await conn.execute(
                update(ToolExecution)
                .where(
                    ToolExecution.conversation_id == self.conversation_id,
                    ToolExecution.tool_call_id == tool_call_id,
                )
                .values(
                    status="error" if error is not None else "completed",
                    output=output,
                    error=error,
                    updated_at=utcnow(),
                )
            )

    async def save_incident(
        self, incident_id: str, *, request_id: str, status: str, attempt: int, data: dict[str, Any]
    ) -> None:
        """Create or replace the recovery incident `incident_id`."""
        async with self._op("save incident") as conn:
            inserted = await conn.execute(
                insert_new(
                    conn,
                    RecoveryIncident,
                    ["conversation_id", "incident_id"],
                    conversation_id=self.conversation_id,
                    incident_id=incident_id,
                    request_id=request_id,
                    status=status,
                    attempt=attempt,
                    data=data,
                ).returning(RecoveryIncident.id)
            )
            if inserted.first() is not None:
                return
            await conn.execute(
                update(RecoveryIncident)
                .where(
                    RecoveryIncident.conversation_id == self.conversation_id,
                    RecoveryIncident.incident_id == incident_id,
                )
                .values(
                    request_id=request_id,
                    status=status,
                    attempt=attempt,
                    data=data,
                    updated_at=utcnow(),
                )
            )

    @contextlib.asynccontextmanager
    async def _op(self, action: str) -> AsyncIterator[AsyncConnection]:
        if self._closed:
            raise StoreError(f"{action}: the transaction is over")
        if self._failed:
            raise StoreError(f"{action}: an earlier operation failed; the transaction rolls back")
        try:
            with translate_errors(action):
                yield self._conn
        except BaseException:
            self._failed = True
            raise

    def _finish(self) -> bool:
        """Close the transaction to further calls; tell whether an operation in it failed."""
        self._closed = True
        return self._failed

    async def _record(self, conn: AsyncConnection, branch_id: int) -> BranchRecord:
        record = await _branches.get_record(conn, self.conversation_id, branch_id)
        if record is None:
            raise StoreError(f"branch {branch_id} vanished in conversation {self.conversation_id}")
        return record

    async def _require_messages(self, conn: AsyncConnection, pks: list[int]) -> None:
        found = await conn.scalar(
            select(func.count())
            .select_from(Message)
            .where(Message.conversation_id == self.conversation_id, Message.id.in_(pks))
        )
        if found != len(set(pks)):
            raise StoreError(
                f"message(s) {sorted(set(pks))} not (all) in conversation {self.conversation_id}"
            )


async def fence(conn: AsyncConnection, conversation_id: int, epoch: int) -> None:
    """Check the fence and lock the conversation for the rest of the transaction on `conn`.

    Raises:
        FencedError: the stored epoch differs from `epoch`.
        StoreError: the conversation does not exist.
    """
    matched = await conn.execute(
        update(Conversation)
        .where(Conversation.id == conversation_id, Conversation.epoch == epoch)
        .values(updated_at=utcnow())
    )
    if matched.rowcount == 1:
        return
    current = await conn.scalar(
        select(Conversation.epoch).where(Conversation.id == conversation_id)
    )
    if current is None:
        raise StoreError(f"conversation {conversation_id} does not exist")
    logger.warning(
        "rejected a write to conversation %s under epoch %s (stored epoch %s)",
        conversation_id,
        epoch,
        current,
    )
    raise FencedError(conversation_id, epoch, current)


async def _ancestors(conn: AsyncConnection, pk: int) -> set[int]:
    """Return `pk` and the keys of all its ancestors."""
    up = select(Message.id, Message.parent_id).where(Message.id == pk).cte("up", recursive=True)
    parent = aliased(Message)
    up = up.union_all(select(parent.id, parent.parent_id).where(parent.id == up.c.parent_id))
    return set((await conn.scalars(select(up.c.id))).all())


def _columns(message: dict[str, Any]) -> dict[str, Any]:
    """Return the message row's derived columns, validating the UIMessage's `id` and `role`."""
    message_id = message.get("id") if isinstance(message, dict) else None
    role = message.get("role") if isinstance(message, dict) else None
    if not isinstance(message_id, str) or not message_id:
        raise ValueError(f"message needs a non-empty string 'id': {message!r:.200}")
    if not isinstance(role, str) or not role:
        raise ValueError(f"message {message_id!r} needs a non-empty string 'role'")
    return {"message_id": message_id, "role": role, "body": message}
