"""Branch requests over the chat's socket, one at a time, and the viewed branch as the server
moves it (docs/branching.md#websocket-a-connection-views-one-branch)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from durachat.client.connection import Connection
from durachat.client.correlator import Answer, Correlator, Waiter, WaiterKind
from durachat.client.errors import ClientError
from durachat.client.resume import Resumer
from durachat.client.transcript import Transcript
from durachat.messages import new_request_id
from durachat.protocol import MAIN_BRANCH
from durachat.protocol.client_frames import (
    BranchOp,
    BranchOpFields,
    branch_op_frame,
    branch_switch_frame,
    branches_request_frame,
)
from durachat.types import JSONDict

log = logging.getLogger(__name__)

_FORK_REASONS: Final = frozenset({"edit", "regenerate"})
"""`durachat_branch_switched` reasons that move the sender's request to a new branch."""


@dataclass(slots=True)
class _Request:
    """The branch request waiting for its answer."""

    waiter: Waiter
    follow_delete: bool
    """(An op) it deletes the viewed branch: it ends once the client is moved to `main`."""
    switched: bool = False
    """(A switch) `durachat_branch_switched` arrived; the transcript that follows ends it.
    (An op that follows a delete) the move to `main` arrived; its transcript follows."""


class BranchOps:
    """The branch requests (`durachat_branches`, `durachat_branch_switch`,
    `durachat_branch_op`), sent one at a time and answered through the correlator, and the
    view changes the server announces (`durachat_branch_switched`, a branch's id in
    `durachat_branches`, `unknown_branch`)."""

    def __init__(
        self,
        name: str,
        *,
        connection: Connection,
        correlator: Correlator,
        transcript: Transcript,
        resumer: Resumer,
    ) -> None:
        """Send on `connection`, and move the view of `transcript`.

        Args:
            name: The chat's name, for the logs.
            connection: The socket.
            correlator: Where the requests wait for their answers.
            transcript: The transcript and its replies, and the viewed branch.
            resumer: Forgets a stream offered on a branch the client left.
        """
        self._name = name
        self._connection = connection
        self._correlator = correlator
        self._transcript = transcript
        self._resumer = resumer
        self._lock = asyncio.Lock()
        self._current: _Request | None = None

    async def list_branches(self, timeout: float) -> JSONDict:
        """Send `durachat_branches` and return the answer (`{"branches", "viewing"}`)."""
        return await self._request(branches_request_frame(), "list", timeout)

    async def switch(self, branch: str, timeout: float) -> None:
        """Send `durachat_branch_switch` and return once the branch's transcript arrived."""
        await self._request(branch_switch_frame(branch), "switch", timeout)

    async def operate(
        self, op: BranchOp, fields: BranchOpFields, timeout: float, *, follow_delete: bool = False
    ) -> JSONDict:
        """Send a `durachat_branch_op` and return the body of its 2xx answer.

        Args:
            op: The operation (`siblings`, `create`, `rename`, `delete`, `fork`).
            fields: Its fields.
            timeout: How long to wait, in seconds.
            follow_delete: It deletes the viewed branch: wait for the move to `main` too.

        Raises:
            ClientError: the answer's `code` and `status` for a refusal (`server_error` if it
                has none); `timeout`; `disconnected`; `closed`.
        """
        op_id = new_request_id()
        frame = branch_op_frame(op_id, op, fields)
        answer = await self._request(frame, "op", timeout, key=op_id, follow_delete=follow_delete)
        status, body = answer.get("status"), answer.get("body")
        if not isinstance(body, dict):
            body = {}
        if not isinstance(status, int) or not 200 <= status < 300:
            code, message = body.get("code"), body.get("message")
            raise ClientError(
                code if isinstance(code, str) else "server_error",
                message if isinstance(message, str) else f"the server answered {op} with {status}",
                status=status if isinstance(status, int) else None,
            )
        return body

    async def _request(
        self,
        frame: Mapping[str, Any],
        kind: WaiterKind,
        timeout: float,
        *,
        key: str | None = None,
        follow_delete: bool = False,
    ) -> JSONDict:
        async with self._lock:
            with self._correlator.waiting(kind, key or new_request_id()) as waiter:
                request = _Request(waiter, follow_delete)
                self._current = request
                try:
                    return await self._answer(request, frame, timeout)
                finally:
                    if self._current is request:
                        self._current = None

    async def _answer(
        self, request: _Request, frame: Mapping[str, Any], timeout: float
    ) -> JSONDict:
        await self._connection.send(frame)
        answer: JSONDict | None = None
        moved = False
        try:
            async with asyncio.timeout(timeout):
                # The move to main may come before the answer or after it.
                while answer is None or (
                    request.follow_delete and _succeeded(answer) and not moved
                ):
                    got = await request.waiter.next()
                    if got.kind == "moved":
                        moved = True
                    elif answer is None:
                        answer = got.frame if got.frame is not None else {}
                return answer
        except TimeoutError:
            if answer is not None:
                raise ClientError(
                    "timeout",
                    f"the branch was deleted, but the server did not move the client "
                    f"to main in {timeout}s",
                ) from None
            raise ClientError(
                "timeout", f"the server did not answer {frame['type']} in {timeout}s"
            ) from None

    # What the server sends

    def on_branches(self, frame: JSONDict) -> None:
        """`durachat_branches`: the answer to a listing; `viewing` names the viewed branch."""
        viewing = frame.get("viewing")
        if isinstance(viewing, (str, int)) and not isinstance(viewing, bool):
            self._known_as(str(viewing))
        for waiter in self._correlator.of_kind("list"):
            waiter.answer(Answer("answer", frame))

    def on_op_answer(self, frame: JSONDict) -> None:
        """`durachat_branch_op`: the answer to the op with its `id`."""
        op_id = frame.get("id")
        # Matched by id: the answer to an operation that timed out may still come.
        waiter = self._correlator.find(op_id, "op") if isinstance(op_id, str) else None
        if waiter is not None:
            waiter.answer(Answer("answer", frame))

    def on_transcript(self, frame: JSONDict) -> None:
        """A `cf_agent_chat_messages` arrived (and is the transcript now)."""
        request = self._current
        if request is not None and request.switched:
            # The transcript that follows `durachat_branch_switched`: the switch is done.
            if request.waiter.kind == "switch":
                request.waiter.answer(Answer("answer", frame))
            else:
                request.waiter.answer(Answer("moved"))

    def on_switched(self, frame: JSONDict) -> None:
        """`durachat_branch_switched`: the connection views another branch from now on."""
        branch = frame.get("branch")
        if not isinstance(branch, (str, int)) or isinstance(branch, bool):
            return
        new = str(branch)
        reason = frame.get("reason")
        log.debug("chat %s: now on branch %s (%s)", self._name, new, reason)
        if reason in _FORK_REASONS:
            # The server forked one of our requests: its reply streams on the new branch.
            # It is sent before anything of the reply, so the reply has received nothing yet.
            viewed = self._transcript.branch
            fresh = [
                r
                for r in self._transcript.replies
                if not r.reply.observed and not r.received and r.branch == viewed
            ]
            moved = next((r for r in fresh if r.may_fork), fresh[0] if fresh else None)
            if moved is not None:
                moved.branch = new
        self._view(new)
        request = self._current
        if request is None:
            return
        if request.waiter.kind == "switch" and reason not in _FORK_REASONS and reason != "deleted":
            # Our switch (`reason: "switch"`; servers before reasons sent none).
            request.switched = True
        elif request.follow_delete and reason == "deleted" and new == MAIN_BRANCH:
            # Our delete of the viewed branch moved us; main's transcript follows.
            request.switched = True

    def lost_view(self) -> None:
        """The server does not know the branch the socket's URL named: it views main."""
        if self._transcript.branch == MAIN_BRANCH:
            return
        log.info(
            "chat %s: no branch %s (any more); viewing main", self._name, self._transcript.branch
        )
        self._view(MAIN_BRANCH)
        if self._connection.started and not self._connection.closing:
            self._connection.spawn(self._reload())

    def _view(self, branch: str) -> None:
        self._transcript.view(branch)
        self._resumer.keep_offered_on(branch)

    def _known_as(self, branch: str) -> None:
        """The viewed branch, as the server names it (a branch named at connect time becomes
        its id), with the replies streaming on it."""
        old = self._transcript.branch
        if branch == old:
            return
        self._resumer.rename_offered(old, branch)
        self._transcript.rename_view(branch)

    async def _reload(self) -> None:
        with contextlib.suppress(ClientError):
            await self._transcript.reload(self._connection.fetch_history)


def _succeeded(answer: JSONDict) -> bool:
    """Whether a `durachat_branch_op` answer has a 2xx status."""
    status = answer.get("status")
    return isinstance(status, int) and 200 <= status < 300
