"""The receive side of a chat: every frame the socket brings, handed to what it concerns."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

from websockets.asyncio.client import ClientConnection

from durachat.client.branch_ops import BranchOps
from durachat.client.connection import Connection
from durachat.client.correlator import Correlator, Waiter
from durachat.client.errors import ClientError
from durachat.client.reply_control import ReplyControl
from durachat.client.resume import Resumer
from durachat.client.tool_answers import ToolAnswers
from durachat.client.transcript import Transcript
from durachat.protocol import MessageType
from durachat.types import JSONDict

log = logging.getLogger(__name__)

FrameHook = Callable[[JSONDict], object]
"""Called with every frame the client receives, once the client has handled it."""


class Dispatcher:
    """Handles every frame received, in order, on the reader task.

    Replies (`cf_agent_use_chat_response`) are fed to their `ReplyControl`, which is created
    for a request this client did not send; transcripts, clears and message updates go to the
    transcript; resume frames to the resumer; branch frames to the branch operations; a
    `durachat_error`, which names no request, to the last operation sent that still waits.
    A frame that fails to be handled is logged and skipped; the `on_frame` hook sees every
    frame, after it was handled.

    Attributes:
        errors: Every `durachat_error` received, as `ClientError`s, oldest first.
    """

    def __init__(
        self,
        name: str,
        *,
        connection: Connection,
        correlator: Correlator,
        transcript: Transcript,
        resumer: Resumer,
        branch_ops: BranchOps,
        tool_answers: ToolAnswers,
        errors: list[ClientError],
        on_frame: FrameHook | None = None,
    ) -> None:
        """Dispatch to the client's parts.

        Args:
            name: The chat's name, for the logs.
            connection: Runs background tasks (settling a reply from the stored transcript).
            correlator: Knows the operation an error belongs to.
            transcript: The transcript and its replies.
            resumer: Takes the resume frames; ACKs a reply with missing chunks again.
            branch_ops: Takes the branch frames.
            tool_answers: Counts the continuations.
            errors: Where the server's errors are kept.
            on_frame: Called with every frame received.
        """
        self.errors = errors
        self._name = name
        self._connection = connection
        self._correlator = correlator
        self._transcript = transcript
        self._resumer = resumer
        self._branch_ops = branch_ops
        self._tool_answers = tool_answers
        self._on_frame = on_frame

    async def receive(self, ws: ClientConnection, raw: str) -> None:
        """Handle one text frame received on `ws`."""
        try:
            frame = json.loads(raw)
        except ValueError:
            log.debug("chat %s: ignoring a non-JSON frame", self._name)
            return
        if not isinstance(frame, dict):
            return
        try:
            await self._dispatch(ws, frame)
        except Exception:
            log.exception("chat %s: cannot handle frame %s", self._name, frame.get("type"))
        if self._on_frame is not None:
            try:
                self._on_frame(frame)
            except Exception:
                log.exception("chat %s: on_frame hook failed", self._name)

    async def _dispatch(self, ws: ClientConnection, frame: JSONDict) -> None:
        kind = frame.get("type")
        if kind == MessageType.USE_CHAT_RESPONSE:
            await self._on_response(ws, frame)
        elif kind == MessageType.CHAT_MESSAGES:
            messages = frame.get("messages")
            if isinstance(messages, list):
                self._transcript.replace([m for m in messages if isinstance(m, dict)])
            self._branch_ops.on_transcript(frame)
        elif kind == MessageType.CHAT_CLEAR:
            self._transcript.clear()
        elif kind == MessageType.MESSAGE_UPDATED:
            self._transcript.update_message(frame.get("message"))
        elif kind == MessageType.STREAM_RESUMING:
            await self._resumer.on_resuming(ws, frame)
        elif kind == MessageType.STREAM_RESUME_NONE:
            self._resumer.on_none(frame)
        elif kind == MessageType.STREAM_PENDING:
            self._resumer.on_pending(frame)
        elif kind == MessageType.ERROR:
            self._on_error(frame)
        elif kind == MessageType.BRANCH_SWITCHED:
            self._branch_ops.on_switched(frame)
        elif kind == MessageType.BRANCHES:
            self._branch_ops.on_branches(frame)
        elif kind == MessageType.BRANCH_OP:
            self._branch_ops.on_op_answer(frame)

    async def _on_response(self, ws: ClientConnection, frame: JSONDict) -> None:
        request_id = frame.get("id")
        if not isinstance(request_id, str):
            return
        transcript = self._transcript
        reply = transcript.get(request_id)
        if reply is None:
            if frame.get("done") is True or frame.get("replay") is True:
                return
            if transcript.ended_recently(request_id):
                return
            reply = transcript.observe(request_id)
        seed = None
        if frame.get("continuation") is True and reply.needs_seed:
            seed = transcript.last_assistant()
        was_continuation = reply.reply.continuation
        if reply.handle(frame, seed):
            transcript.merge(reply)
        if reply.reply.continuation and not was_continuation:
            self._tool_answers.saw_continuation(reply)
        if reply.take_gap():
            await self._resumer.ack(ws, reply)
        if reply.take_orphaned():
            self._connection.spawn(self._resumer.settle(reply))
        if reply.done:
            transcript.retire(reply)

    def _on_error(self, frame: JSONDict) -> None:
        code = frame.get("code")
        message = frame.get("message")
        error = ClientError(
            code if isinstance(code, str) else "server_error",
            message if isinstance(message, str) else "the server reported an error",
        )
        log.debug("chat %s: server error %s: %s", self._name, error.code, error.message)
        self.errors.append(error)
        # The frame names no request: it belongs to the last operation still waiting, if any.
        op = self._correlator.take_last()
        if error.code == "unknown_branch" and not (isinstance(op, Waiter) and op.kind == "switch"):
            # The socket's URL named a branch the conversation does not have (any more): the
            # connection views main.
            self._correlator.note_sent(op)
            self._branch_ops.lost_view()
            return
        if isinstance(op, Waiter):
            op.fail(error)
        elif isinstance(op, ReplyControl) and op.reject(error):
            self._transcript.retire(op)
