"""Branch writes of a fenced transaction: create, rename, delete, and trim a branch's path."""

from __future__ import annotations

from sqlalchemy import delete, select, update

from durachat.protocol import MAIN_BRANCH, BranchRef
from durachat_infra.store import _branches
from durachat_infra.store._engine import insert_new
from durachat_infra.store._records import BranchRecord, check_branch_name
from durachat_infra.store._transaction_core import TransactionCore
from durachat_infra.store.errors import (
    BranchExistsError,
    MainBranchError,
    UnknownBranchError,
    UnknownMessageError,
)
from durachat_infra.store.models import Branch, Message


class BranchWrites(TransactionCore):
    """The branch operations of `FencedTransaction` (see docs/branching.md)."""

    async def create_branch(
        self,
        name: str,
        *,
        from_branch: BranchRef = MAIN_BRANCH,
        fork_message_id: str | None = None,
        at_root: bool = False,
        keep_leaf: bool = False,
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
            keep_leaf: the new branch's leaf is `from_branch`'s leaf instead, and the fork
                message only its recorded fork point: it keeps the path below the fork point
                that an edit or a regenerate is about to replace on `from_branch`.

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
                    leaf_id=source.leaf_id if keep_leaf else fork_pk,
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
