"""The client package's side of a reply: the state machine that applies a request's response
frames (ordering by `seq`, replays, gaps) and ends the reply."""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Final, Literal, TypeAlias, get_args

from durachat.client.errors import ClientError
from durachat.messages import StreamAccumulator
from durachat.protocol.client_frames import ChatRequestFrame
from durachat.types import JSONDict, UIChunk, UIMessage

if TYPE_CHECKING:
    from durachat.client.reply import Reply

Outcome: TypeAlias = Literal["completed", "aborted", "error", "skipped"]
"""How a reply ended."""

OUTCOMES: Final[frozenset[str]] = frozenset(get_args(Outcome))

_DEFAULT_ERROR_TEXT: Final = "Stream error"


class ReplyControl:
    """The client package's side of a `Reply`: it applies the response frames (`handle`), ends
    the reply (`finish`, `adopt`, `reject`), and tells the package what a frame asks of it (a
    gap to repair, a stream the server no longer has).

    It keeps the reply's stream (its chunks, the assembled message, whether it ended), which
    the `Reply` reads, and writes the reply's public attributes. Every `Reply` creates its own
    control; the client package gets it from `durachat.client.reply.new_reply`, keeps it, and
    hands out `control.reply`.

    Attributes:
        reply: The reply users hold.
        chunks: The chunks received so far, in order (the list the reply iterates).
        accumulator: The assistant message assembled so far; None before the first chunk.
        finished: Set once the reply has ended.
        request_frame: (An own reply) the `cf_agent_use_chat_request` it was sent with, to
            send again if the server never got it.
        stale_ids: (An own reply) the ids of the messages the request dropped (a regenerated
            answer, the messages after an edited one): stored messages that do not answer it.
        may_fork: (An own reply) an edit or a regenerate, which the server may answer on a new
            branch.
        follow: The continuation the `on_tool_call` hook started after the reply (None once
            it is known that there is none); None while no hook answers the reply's calls.
        recovering: Replayed after a reconnect without an offer: a replay with no chunk means
            the server no longer has the stream.
    """

    def __init__(self, reply: Reply) -> None:
        """Control `reply` (a `Reply` creates its own control)."""
        self.reply = reply
        self.chunks: list[UIChunk] = []
        self.accumulator: StreamAccumulator | None = None
        self.finished = asyncio.Event()
        self.request_frame: ChatRequestFrame | None = None
        self.stale_ids: frozenset[str] = frozenset()
        self.may_fork = False
        self.follow: asyncio.Future[ReplyControl | None] | None = None
        self.recovering = False
        self._next_seq = 0
        self._gap = False
        self._repair_requested = False
        self._received = False
        self._replayed_chunks = 0
        self._orphaned = False
        self._detached = False
        self._wakeup: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def __repr__(self) -> str:
        return f"ReplyControl({self.reply!r})"

    @property
    def request_id(self) -> str:
        """The reply's request id."""
        return self.reply.request_id

    @property
    def branch(self) -> str:
        """The branch the reply streams on (`Reply.branch`)."""
        return self.reply.branch

    @branch.setter
    def branch(self, branch: str) -> None:
        self.reply.branch = branch

    @property
    def done(self) -> bool:
        """Whether the reply has ended."""
        return self.finished.is_set()

    @property
    def received(self) -> bool:
        """Whether a response frame of the reply has arrived."""
        return self._received

    @property
    def needs_seed(self) -> bool:
        """Whether no message is assembled yet (a continuation's first frame needs the message
        it extends)."""
        return self.accumulator is None

    async def changed(self) -> None:
        """Wait for the next chunk or the end."""
        # Shielded: one cancelled waiter must not cancel the future the others wait on.
        await asyncio.shield(self._wakeup)

    async def started(self) -> None:
        """Wait for the first chunk or the end."""
        while not self.chunks and not self.done:
            await self.changed()

    def new_socket(self) -> None:
        """A new socket is open: a gap on it may be repaired again."""
        self._repair_requested = False

    def begin_replay(self, *, recovering: bool = False) -> None:
        """The client acknowledged the stream: the server replays it from its first chunk.

        Args:
            recovering: Acknowledged after a reconnect without an offer (see `recovering`).
        """
        self.reply.replaying = True
        self._replayed_chunks = 0
        self.recovering = recovering

    def handle(self, frame: JSONDict, seed: UIMessage | None = None) -> bool:
        """Apply one `cf_agent_use_chat_response` frame.

        Args:
            frame: The frame.
            seed: (A continuation's first chunk) the assistant message it extends.

        Returns:
            True if the assembled message changed.
        """
        self._received = True
        if frame.get("continuation") is True:
            self.reply.continuation = True
        replay = frame.get("replay") is True
        body = frame.get("body")
        if frame.get("error") is True:
            text = body if isinstance(body, str) and body else _DEFAULT_ERROR_TEXT
            self.reply.error = ClientError("stream_error", text)
            if frame.get("done") is True:
                self.finish("error")
            return False
        changed = False
        if isinstance(body, str) and body:
            if replay:
                self._replayed_chunks += 1
            changed = self._apply(body, frame, seed)
        if frame.get("replayComplete") is True:
            self.reply.replaying = False
        if frame.get("done") is True and not replay and self.reply.replaying:
            # A live end overtaking the replay asked for: the replay ends with its own.
            return changed
        if frame.get("done") is True:
            if replay and self.recovering and self._replayed_chunks == 0:
                # The server no longer has this stream; the transcript must tell how it ended.
                self._orphaned = True
                self.reply.replaying = False
            else:
                self.finish(self._outcome_of(frame))
        return changed

    def take_gap(self) -> bool:
        """Whether the last frame showed missing chunks that a replay should bring; the gap is
        then being repaired (asked once per socket)."""
        gap, self._gap = self._gap, False
        if gap:
            self._repair_requested = True
        return gap

    def take_orphaned(self) -> bool:
        """Whether the last frame showed that the server no longer has the stream (asked once)."""
        orphaned, self._orphaned = self._orphaned, False
        return orphaned

    def adopt(self, message: UIMessage) -> None:
        """End the reply with a message found in the transcript."""
        self.accumulator = StreamAccumulator(seed=message)
        self.finish("completed")

    def finish(self, outcome: Outcome, error: ClientError | None = None) -> None:
        """End the reply (once; later calls change nothing).

        Args:
            outcome: How it ended.
            error: The error it ended with; an `error` outcome without one gets a generic
                `stream_error`.
        """
        if self.done:
            return
        reply = self.reply
        if error is not None:
            reply.error = error
        if outcome == "error" and reply.error is None:
            reply.error = ClientError("stream_error", _DEFAULT_ERROR_TEXT)
        reply.outcome = outcome
        reply.replaying = False
        self.finished.set()
        self._notify()

    def reject(self, error: ClientError) -> bool:
        """The server refused the request with `error` (a `durachat_error`).

        Returns:
            True if that ended the reply (it had received nothing); a reply that already ended
            with an error and no chunk takes `error` as its error.
        """
        if not self.done and not self._received:
            self.finish("error", error)
            return True
        if self.reply.outcome == "error" and not self.chunks:
            self.reply.error = error
        return False

    def detach(self) -> None:
        """Keep the reply out of the transcript from now on (its chat was cleared, or the
        client left its branch)."""
        self._detached = True

    def merge_into(self, messages: list[UIMessage]) -> list[UIMessage]:
        """A new transcript with the reply's assistant message in it; `messages` itself for a
        detached reply, or one with no chunk yet."""
        if self.accumulator is None or self._detached:
            return messages
        return self.accumulator.merge_into(messages)

    def _apply(self, body: str, frame: JSONDict, seed: UIMessage | None) -> bool:
        seq = frame.get("seq")
        if isinstance(seq, int) and not isinstance(seq, bool):
            if seq < self._next_seq:
                return False
            if seq > self._next_seq and frame.get("replay") is not True:
                # Chunks are missing: a replay brings them (the one under way, or one the client
                # asks for). If asking did not help, go on with what there is.
                if self.reply.replaying:
                    return False
                if not self._repair_requested:
                    self._gap = True
                    return False
            self._next_seq = seq + 1
        try:
            chunk = json.loads(body)
        except ValueError:
            return False
        if not isinstance(chunk, dict):
            return False
        continuation = frame.get("continuation") is True
        if chunk.get("type") == "start" and frame.get("replay") is True and not continuation:
            self.accumulator = None
        if self.accumulator is None:
            self.accumulator = StreamAccumulator(
                continuation=continuation, seed=seed if continuation else None
            )
        self.accumulator.apply(chunk)
        self.chunks.append(chunk)
        self._notify()
        return True

    def _outcome_of(self, frame: JSONDict) -> Outcome:
        outcome = frame.get("outcome")
        for known in get_args(Outcome):
            if outcome == known:
                result: Outcome = known
                return result
        if self.reply.error is not None:
            return "error"
        if not self.chunks:
            return "skipped"
        return "completed"

    def _notify(self) -> None:
        waiter = self._wakeup
        self._wakeup = asyncio.get_running_loop().create_future()
        if not waiter.done():
            waiter.set_result(None)
