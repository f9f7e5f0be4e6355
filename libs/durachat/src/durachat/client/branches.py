"""`ChatClient`'s branch methods: list, view and change the conversation's branches over the
chat's socket (docs/client.md#branches)."""

from __future__ import annotations

import asyncio
from typing import Final

from durachat.client.branch_ops import BranchOps
from durachat.client.errors import ClientError
from durachat.client.transcript import Transcript
from durachat.client.urls import branch_query, is_branch
from durachat.protocol import MAIN_BRANCH, BranchRef
from durachat.protocol.client_frames import BranchOpFields
from durachat.types import JSONDict

_BRANCH_WAIT: Final = 30.0
"""How long the branch operations (`branches`, `switch_branch`, `siblings`, …) wait for the
server's answer by default."""


class BranchMethods:
    """`ChatClient`'s branch methods."""

    _branch_ops: BranchOps
    _transcript: Transcript

    async def branches(self, *, timeout: float = _BRANCH_WAIT) -> list[JSONDict]:
        """List the conversation's branches (`durachat_branches`).

        Also updates `branch` from the server's `viewing`.

        Args:
            timeout: How long to wait for the answer, in seconds.

        Returns:
            The branches, oldest first (`main` first), as `{"id", "name", "leaf_message_id",
            "parent_branch_id", "fork_message_id", "created_at", "updated_at"}`; `[]` for a
            conversation that has no message yet.

        Raises:
            ClientError: the server's error (`database_unavailable`); `timeout`;
                `disconnected` if the socket dropped while waiting; `closed`.
        """
        answer = await self._branch_ops.list_branches(timeout)
        listed = answer.get("branches")
        return [b for b in listed if isinstance(b, dict)] if isinstance(listed, list) else []

    async def switch_branch(self, branch: BranchRef, *, timeout: float = _BRANCH_WAIT) -> None:
        """View another branch (`durachat_branch_switch`).

        Returns once the server switched and sent the branch's transcript, which is then
        `messages`. A reply streaming on that branch is offered for resume, as on connect
        (`on_reply`, `resume`). Replies still running on the branch left end at once with the
        error `left_branch` (they go on on the server).

        Args:
            branch: The branch's id or name (`main` for main).
            timeout: How long to wait for the server, in seconds.

        Raises:
            ClientError: `unknown_branch` if the conversation has no such branch (the client
                keeps viewing its branch); `timeout`; `disconnected`; `closed`.
        """
        await self._branch_ops.switch(branch_query(branch) or MAIN_BRANCH, timeout)

    async def siblings(
        self, message_id: str, *, branch: BranchRef | None = None, timeout: float = _BRANCH_WAIT
    ) -> tuple[list[str], int]:
        """The alternatives of a message, for a "2 / 3" picker (`durachat_branch_op` `siblings`).

        Args:
            message_id: A UIMessage id: on the branch's path (the occurrence nearest the leaf,
                if the id occurs twice there), or anywhere when it is unique in the
                conversation.
            branch: The branch whose path holds the message (id or name); the viewed one by
                default.
            timeout: How long to wait for the answer, in seconds.

        Returns:
            The ids of every child of the message's parent (every root, for a root), oldest
            first, the message included; and the message's index among them. A picker shows
            `index + 1` / `len(ids)`.

        Raises:
            ClientError: `unknown_message` if the message is not on the branch's path;
                `unknown_branch`; `database_unavailable`; `timeout`; `disconnected`; `closed`.
                `status` is the HTTP status of the server's answer.
        """
        fields: BranchOpFields = {"messageId": message_id}
        if branch is not None:
            fields["branch"] = _op_branch(branch)
        body = await self._branch_ops.operate("siblings", fields, timeout)
        ids, index = body.get("siblings"), body.get("index")
        if (
            not isinstance(ids, list)
            or not all(isinstance(i, str) for i in ids)
            or not isinstance(index, int)
            or isinstance(index, bool)
        ):
            raise ClientError("server_error", f"the server answered siblings with {body!r}")
        return list(ids), index

    async def alternatives(
        self, message_id: str, *, branch: BranchRef | None = None, timeout: float = _BRANCH_WAIT
    ) -> tuple[list[JSONDict], int]:
        """The alternatives of a message with the branch that shows each, for a picker that
        switches: `switch_branch(alternatives[i]["branch"])` views the i-th one.

        Returns:
            `{"message_id", "branch", "branch_name"}` per sibling, oldest first (`branch` is
            `"main"`, a branch id, or None when no branch reaches it), and the message's index.

        Raises:
            ClientError: as `siblings`; `server_error` from a server without `alternatives`.
        """
        fields: BranchOpFields = {"messageId": message_id}
        if branch is not None:
            fields["branch"] = _op_branch(branch)
        body = await self._branch_ops.operate("siblings", fields, timeout)
        found, index = body.get("alternatives"), body.get("index")
        if (
            not isinstance(found, list)
            or not all(isinstance(a, dict) for a in found)
            or not isinstance(index, int)
            or isinstance(index, bool)
        ):
            raise ClientError("server_error", f"the server answered siblings with {body!r}")
        return [dict(a) for a in found], index

    async def create_branch(
        self,
        name: str,
        *,
        at: str | None = None,
        from_branch: BranchRef | None = None,
        timeout: float = _BRANCH_WAIT,
    ) -> JSONDict:
        """Create a branch (`durachat_branch_op` `create`). The client keeps viewing its branch.

        Args:
            name: The new branch's name, unique in the conversation (1 to 200 characters, not
                digits only).
            at: The UIMessage id on `from_branch`'s path to fork at; its leaf by default.
            from_branch: The branch to fork from (id or name); the viewed one by default.
            timeout: How long to wait for the answer, in seconds.

        Returns:
            The new branch, as `branches` lists it (`{"id", "name", "leaf_message_id",
            "parent_branch_id", "fork_message_id", "created_at", "updated_at"}`).

        Raises:
            ClientError: `branch_exists` if the name is taken; `invalid_branch_name`;
                `unknown_branch`; `unknown_message` if `at` is not on the branch's path;
                `unavailable`; `timeout`; `disconnected`; `closed`.
        """
        fields: BranchOpFields = {"name": name}
        if at is not None:
            fields["at"] = at
        if from_branch is not None:
            fields["from_branch"] = _op_branch(from_branch)
        return await self._branch_ops.operate("create", fields, timeout)

    async def rename_branch(
        self, branch: BranchRef, name: str, *, timeout: float = _BRANCH_WAIT
    ) -> JSONDict:
        """Rename a branch (`durachat_branch_op` `rename`). Its id, which `branch` reports,
        does not change.

        Args:
            branch: The branch to rename (id or name).
            name: Its new name.
            timeout: How long to wait for the answer, in seconds.

        Returns:
            The renamed branch, as `branches` lists it.

        Raises:
            ClientError: `branch_exists` if the name is taken; `main_branch` for `main`;
                `unknown_branch`; `invalid_branch_name`; `unavailable`; `timeout`;
                `disconnected`; `closed`.
        """
        fields: BranchOpFields = {"branch": _op_branch(branch), "name": name}
        return await self._branch_ops.operate("rename", fields, timeout)

    async def delete_branch(self, branch: BranchRef, *, timeout: float = _BRANCH_WAIT) -> int:
        """Delete a branch and the messages only it reaches (`durachat_branch_op` `delete`).

        A reply streaming on it is cancelled first. If this client views the branch, the server
        moves it to `main`: this returns once it has, so `branch` is then `"main"` and
        `messages` is `main`'s transcript.

        Args:
            branch: The branch to delete (id or name).
            timeout: How long to wait for the server (the answer, and the move to `main`), in
                seconds.

        Returns:
            How many messages were deleted.

        Raises:
            ClientError: `main_branch` for `main`; `unknown_branch`; `unavailable`; `timeout`
                (also when the branch was deleted but the move to `main` did not arrive in
                time); `disconnected`; `closed`.
        """
        ref = _op_branch(branch)
        deadline = asyncio.get_running_loop().time() + timeout
        viewed = self._transcript.branch
        follow = False
        if MAIN_BRANCH not in (viewed, ref):
            if ref.isdigit() and ref.isascii():
                follow = ref == viewed
            else:
                # A name: whether it is the viewed branch takes its id (the answer has none).
                listed = await self.branches(timeout=timeout)
                follow = any(
                    is_branch(record, ref) and is_branch(record, self._transcript.branch)
                    for record in listed
                )
        remaining = max(deadline - asyncio.get_running_loop().time(), 0.0)
        body = await self._branch_ops.operate(
            "delete", {"branch": ref}, remaining, follow_delete=follow
        )
        deleted = body.get("deleted_messages")
        if not isinstance(deleted, int) or isinstance(deleted, bool):
            raise ClientError("server_error", f"the server answered delete with {body!r}")
        return deleted

    async def fork_conversation(
        self, name: str, *, branch: BranchRef | None = None, timeout: float = _BRANCH_WAIT
    ) -> JSONDict:
        """Copy a branch into a new conversation, as its `main` (`durachat_branch_op` `fork`).

        The new conversation has the same agent; connect to it with
        `ChatClient.connect(base_url, agent, name)`.

        Args:
            name: The new conversation's name; it must not exist.
            branch: The branch to copy (id or name); the viewed one by default.
            timeout: How long to wait for the answer, in seconds.

        Returns:
            `{"agent", "name"}` of the new conversation.

        Raises:
            ClientError: `conversation_exists` if it exists; `unknown_branch`; `unavailable`;
                `timeout`; `disconnected`; `closed`.
        """
        fields: BranchOpFields = {"name": name}
        if branch is not None:
            fields["branch"] = _op_branch(branch)
        return await self._branch_ops.operate("fork", fields, timeout)


def _op_branch(branch: BranchRef) -> str:
    """A branch as a `durachat_branch_op` names it: its id or name (`""` means `main`)."""
    return branch_query(branch) or MAIN_BRANCH
