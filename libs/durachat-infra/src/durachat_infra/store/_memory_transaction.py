"""`MemoryTransaction`: the in-memory adapter's fenced transaction.

It works on a copy of its conversation, which `MemoryStore.transaction` puts in place of the
original when the block ends normally; an error anywhere leaves the original untouched. The same
checks as `FencedTransaction` run in the same order, so both raise the same errors.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any

from durachat.protocol import MAIN_BRANCH, BranchRef
from durachat_infra.store._memory_data import (
    BranchRow,
    ConversationState,
    IncidentRow,
    MemoryDatabase,
    MessageRow,
    ToolRow,
    TurnRow,
    branch_record,
    decode,
    encode,
    occurrence,
    path,
    prune_above,
    remove_messages,
    resolve,
)
from durachat_infra.store._records import (
    TURN_KINDS,
    TURN_STATUSES,
    BranchRecord,
    ToolCallRecord,
    TurnKind,
    TurnStatus,
    check_branch_name,
    message_columns,
)
from durachat_infra.store._types import utcnow
from durachat_infra.store.errors import (
    BranchExistsError,
    MainBranchError,
    StoreError,
    UnknownBranchError,
    UnknownMessageError,
)


class MemoryTransaction:
    """Writes to one conversation of a `MemoryDatabase`, applied together when the transaction
    commits (see `durachat_infra.store.port.TransactionPort` for the contract).

    Attributes:
        conversation_id: the conversation written to.
        epoch: the fencing epoch the transaction holds.
    """

    def __init__(self, database: MemoryDatabase, state: ConversationState, epoch: int) -> None:
        self._database = database
        self.state = state
        """The conversation as this transaction has changed it so far."""
        self.conversation_id = state.id
        self.epoch = epoch
        self._closed = False
        self._failed = False

    async def insert_chain(
        self, parent_pk: int | None, messages: Sequence[dict[str, Any]]
    ) -> list[int]:
        """Insert `messages` as a chain below `parent_pk`; returns the new keys in order."""
        columns = [message_columns(message) for message in messages]
        if not columns:
            return []
        with self._op("insert messages") as state:
            if parent_pk is not None:
                self._require(state, [parent_pk])
            pks: list[int] = []
            parent = parent_pk
            for column in columns:
                pk = self._database.next_id("message")
                state.messages[pk] = MessageRow(
                    pk=pk,
                    message_id=column["message_id"],
                    parent_pk=parent,
                    seq=state.next_seq,
                    role=column["role"],
                    body=_body(column["body"]),
                )
                state.next_seq += 1
                pks.append(pk)
                parent = pk
            return pks

    async def update_message(self, pk: int, message: dict[str, Any]) -> None:
        """Replace the UIMessage of row `pk`."""
        column = message_columns(message)
        with self._op("update message") as state:
            row = state.messages.get(pk)
            if row is None:
                raise StoreError(f"message {pk} is not in conversation {self.conversation_id}")
            state.messages[pk] = replace(
                row, message_id=column["message_id"], role=column["role"], body=_body(message)
            )

    async def reparent(self, pk: int, parent_pk: int | None) -> None:
        """Move row `pk` with its subtree under `parent_pk` (`None`: make it a root)."""
        with self._op("reparent message") as state:
            self._require(state, [pk] if parent_pk is None else [pk, parent_pk])
            if parent_pk is not None and pk in {row.pk for row in path(state, parent_pk)}:
                raise StoreError(f"cannot move message {pk} under its own descendant {parent_pk}")
            state.messages[pk] = replace(state.messages[pk], parent_pk=parent_pk)

    async def set_leaf(self, branch: BranchRef, leaf_pk: int | None) -> None:
        """Point a branch at `leaf_pk`, creating a branch of that name if there is none."""
        if branch == "":
            raise ValueError("branch name must not be empty")
        with self._op("set branch leaf") as state:
            if leaf_pk is not None:
                self._require(state, [leaf_pk])
            found = (
                state.branches.get(branch)
                if isinstance(branch, int)
                else next((row for row in state.branches.values() if row.name == branch), None)
            )
            now = utcnow()
            if found is not None:
                state.branches[found.id] = replace(found, leaf_pk=leaf_pk, updated_at=now)
                return
            if isinstance(branch, int):
                raise UnknownBranchError(self.conversation_id, branch)
            created = self._database.next_id("branch")
            state.branches[created] = BranchRow(created, branch, leaf_pk, None, None, now, now)

    async def delete_messages(self, pks: Sequence[int]) -> None:
        """Delete rows `pks` of this conversation; refuses to orphan a surviving row."""
        if not pks:
            return
        with self._op("delete messages") as state:
            doomed = {pk for pk in pks if pk in state.messages}
            for row in state.messages.values():
                if row.pk not in doomed and row.parent_pk in doomed:
                    raise StoreError(
                        f"delete messages: message {row.pk} would be left below deleted message "
                        f"{row.parent_pk}"
                    )
            remove_messages(state, doomed)

    async def clear(self) -> None:
        """Delete every message, every branch but `main`, and the request context."""
        with self._op("clear conversation") as state:
            state.branches = {
                row.id: replace(row, leaf_pk=None, fork_pk=None)
                for row in state.branches.values()
                if row.name == MAIN_BRANCH
            }
            state.messages = {}
            state.last_body = state.last_client_tools = None

    async def save_request_context(
        self, last_body: dict[str, Any] | None, last_client_tools: list[Any] | None
    ) -> None:
        """Store the last request body and client tool schemas."""
        with self._op("save request context") as state:
            state.last_body = encode(last_body, "save request context")
            state.last_client_tools = encode(last_client_tools, "save request context")

    async def begin_turn(
        self, request_id: str, *, kind: TurnKind, owner: str, request: dict[str, Any] | None
    ) -> bool:
        """Record turn `request_id` as `accepted`; `False` if it exists already."""
        if not request_id:
            raise ValueError("request_id must not be empty")
        if kind not in TURN_KINDS:
            raise ValueError(f"unknown turn kind {kind!r}; expected one of {sorted(TURN_KINDS)}")
        with self._op("begin turn") as state:
            if request_id in state.turns:
                return False
            state.turns[request_id] = TurnRow(
                order=self._database.next_id("turn"),
                request_id=request_id,
                kind=kind,
                status="accepted",
                owner=owner,
                epoch=self.epoch,
                message_id=None,
                request=encode(request, "begin turn"),
                stash=None,
                error=None,
                heartbeat_at=None,
                created_at=utcnow(),
            )
            return True

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
        """Change what is given of turn `request_id`."""
        if status is not None and status not in TURN_STATUSES:
            raise ValueError(
                f"unknown turn status {status!r}; expected one of {sorted(TURN_STATUSES)}"
            )
        with self._op("update turn") as state:
            row = state.turns.get(request_id)
            if row is None:
                raise StoreError(f"no turn {request_id!r} in conversation {self.conversation_id}")
            changes: dict[str, Any] = {}
            if status is not None:
                changes["status"] = status
            if message_id is not None:
                changes["message_id"] = message_id
            if error is not None:
                changes["error"] = error
            if heartbeat:
                changes["heartbeat_at"] = utcnow()
            if stash is not None:
                changes["stash"] = encode(stash, "update turn")
            if owner is not None:
                changes["owner"] = owner
                changes["epoch"] = self.epoch
            state.turns[request_id] = replace(row, **changes)

    async def create_branch(
        self,
        name: str,
        *,
        from_branch: BranchRef = MAIN_BRANCH,
        fork_message_id: str | None = None,
        at_root: bool = False,
        keep_leaf: bool = False,
    ) -> BranchRecord:
        """Create branch `name` forked from `from_branch` at one of its messages (with
        `keep_leaf`, at `from_branch`'s leaf, the message being only its fork point)."""
        check_branch_name(name)
        with self._op("create branch") as state:
            cid = self.conversation_id
            source = resolve(state, from_branch)
            if source is None:
                raise UnknownBranchError(cid, from_branch)
            fork_pk = None if at_root else source.leaf_pk
            if fork_message_id is not None and not at_root:
                spot = occurrence(state, source.leaf_pk, fork_message_id)
                if spot is None:
                    raise UnknownMessageError(cid, fork_message_id, from_branch)
                fork_pk = spot.pk
            if resolve(state, name) is not None:
                raise BranchExistsError(cid, name)
            now = utcnow()
            leaf = source.leaf_pk if keep_leaf else fork_pk
            row = BranchRow(
                self._database.next_id("branch"), name, leaf, source.id, fork_pk, now, now
            )
            state.branches[row.id] = row
            return branch_record(state, row)

    async def rename_branch(self, branch: BranchRef, name: str) -> BranchRecord:
        """Rename a branch; refuses `main` and taken names."""
        check_branch_name(name)
        with self._op("rename branch") as state:
            cid = self.conversation_id
            found = resolve(state, branch)
            if found is None:
                raise UnknownBranchError(cid, branch)
            if found.name != name:
                if found.name == MAIN_BRANCH:
                    raise MainBranchError(cid, "rename")
                if resolve(state, name) is not None:
                    raise BranchExistsError(cid, name)
                found = replace(found, name=name, updated_at=utcnow())
                state.branches[found.id] = found
            return branch_record(state, found)

    async def delete_branch(self, branch: BranchRef) -> int:
        """Delete a branch and the messages only it reaches; returns how many went."""
        with self._op("delete branch") as state:
            cid = self.conversation_id
            found = resolve(state, branch)
            if found is None:
                raise UnknownBranchError(cid, branch)
            if found.name == MAIN_BRANCH:
                raise MainBranchError(cid, "delete")
            now = utcnow()
            for row in list(state.branches.values()):
                if row.parent_branch_id == found.id:
                    state.branches[row.id] = replace(
                        row, parent_branch_id=found.parent_branch_id, updated_at=now
                    )
            del state.branches[found.id]
            if found.leaf_pk is None:
                return 0
            return prune_above(state, found.leaf_pk)

    async def trim_path(self, branch: BranchRef, keep: int) -> int:
        """Keep the newest `keep` messages of a branch's path; returns how many went."""
        if keep < 1:
            raise ValueError("keep must be at least 1")
        with self._op("trim branch path") as state:
            found = resolve(state, branch)
            if found is None:
                raise UnknownBranchError(self.conversation_id, branch)
            rows = path(state, found.leaf_pk)
            if len(rows) <= keep:
                return 0
            first_kept = rows[len(rows) - keep]
            state.messages[first_kept.pk] = replace(first_kept, parent_pk=None)
            return prune_above(state, rows[len(rows) - keep - 1].pk)

    async def record_tool_call(
        self, tool_call_id: str, *, tool_name: str, input: Any, owner: str
    ) -> ToolCallRecord | None:
        """Enter a tool call as `running`; `None` if new, else its record, unchanged."""
        with self._op("record tool call") as state:
            row = state.tools.get(tool_call_id)
            if row is not None:
                return ToolCallRecord(
                    row.tool_call_id, row.tool_name, row.status, decode(row.output), row.error
                )
            state.tools[tool_call_id] = ToolRow(
                tool_call_id=tool_call_id,
                tool_name=tool_name,
                status="running",
                input=encode(input, "record tool call"),
                output=None,
                error=None,
                owner=owner,
                epoch=self.epoch,
            )
            return None

    async def finish_tool_call(
        self, tool_call_id: str, *, output: Any = None, error: str | None = None
    ) -> None:
        """Record how a tool call ended; a call never recorded is left alone."""
        with self._op("finish tool call") as state:
            row = state.tools.get(tool_call_id)
            if row is not None:
                state.tools[tool_call_id] = replace(
                    row,
                    status="error" if error is not None else "completed",
                    output=encode(output, "finish tool call"),
                    error=error,
                )

    async def save_incident(
        self, incident_id: str, *, request_id: str, status: str, attempt: int, data: dict[str, Any]
    ) -> None:
        """Create or replace a recovery incident."""
        with self._op("save incident") as state:
            state.incidents[incident_id] = IncidentRow(
                incident_id, request_id, status, attempt, encode(data, "save incident"), utcnow()
            )

    def finish(self) -> bool:
        """Close the transaction to further calls; tell whether an operation in it failed."""
        self._closed = True
        return self._failed

    @contextlib.contextmanager
    def _op(self, action: str) -> Iterator[ConversationState]:
        if self._closed:
            raise StoreError(f"{action}: the transaction is over")
        if self._failed:
            raise StoreError(f"{action}: an earlier operation failed; the transaction rolls back")
        try:
            yield self.state
        except BaseException:
            self._failed = True
            raise

    def _require(self, state: ConversationState, pks: list[int]) -> None:
        if any(pk not in state.messages for pk in pks):
            raise StoreError(
                f"message(s) {sorted(set(pks))} not (all) in conversation {self.conversation_id}"
            )


def _body(message: dict[str, Any]) -> str:
    body = encode(message, "store message")
    assert body is not None
    return body
