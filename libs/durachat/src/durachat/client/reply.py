"""One assistant reply, as the chat socket streams it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Final, Literal, TypeAlias, get_args

from durachat.client.errors import ClientError
from durachat.messages import StreamAccumulator
from durachat.types import JSONDict, UIChunk, UIMessage

Outcome: TypeAlias = Literal["completed", "aborted", "error", "skipped"]
"""How a reply ended."""

OUTCOMES: Final[frozenset[str]] = frozenset(get_args(Outcome))

_DEFAULT_ERROR_TEXT: Final = "Stream error"


def message_text(message: UIMessage) -> str:
    """Return the text of a UIMessage: its `text` parts, concatenated.

    Args:
        message: The message.

    Returns:
        The concatenated `text` of every `text` part; `""` if there is none.
    """
    parts = message.get("parts")
    if not isinstance(parts, list):
        return ""
    return "".join(
        part["text"]
        for part in parts
        if isinstance(part, dict)
        and part.get("type") == "text"
        and isinstance(part.get("text"), str)
    )


class Reply:
    """One assistant reply: the UI message chunks of one request, and how the request ended.

    A reply is an async iterator of the chunks (`async for chunk in reply`); every iteration
    starts from the first chunk, so a reply may be iterated several times and after it ended.
    The chunks are also assembled into the assistant message (`message()`, `text()`).

    Chunks are ordered by the frames' `seq`: duplicates (a replay after a reconnect) are
    dropped, and a gap makes the client ask the server for a replay, so every chunk is yielded
    once, in order. A replayed `start` chunk that is not a duplicate restarts the assembled
    message (a server without `seq` replays the whole stream).

    Replies are created by `ChatClient`, never directly.

    Attributes:
        request_id: The request id (the `id` of every response frame of the reply).
        observed: True if this client did not send the request and follows it: another
            client's request (a broadcast), a stream offered for resume, or a continuation
            (which the server starts, also after this client's tool results and approvals).
        continuation: True if the reply continues an earlier assistant message (after tool
            results or approvals): its chunks extend that message, under that message's id.
        outcome: `None` while the reply runs, then `"completed"`, `"aborted"` (cancelled),
            `"error"` or `"skipped"` (the server dropped the request without running it).
        error: The error the reply ended with, if any.
        replaying: True while the server is replaying stored chunks to this client.
        user_message_id: The id of the user message the reply answers (own replies only).
        branch: The branch the reply streams on, `"main"` or a branch id: the branch the
            client viewed when the reply started, or the branch the server forked for it (an
            edit or a regenerate answered on a new branch).
    """

    def __init__(
        self,
        request_id: str,
        *,
        observed: bool,
        user_message_id: str | None = None,
        canceller: Callable[[str], Awaitable[object]] | None = None,
        branch: str = "main",
    ) -> None:
        """Create a reply (`ChatClient` does).

        Args:
            request_id: The request id.
            observed: Whether another client started the request.
            user_message_id: The id of the user message the reply answers, when known.
            canceller: Sends the cancel frame for a request id.
            branch: The branch the reply streams on.
        """
        self.request_id = request_id
        self.observed = observed
        self.outcome: Outcome | None = None
        self.error: ClientError | None = None
        self.replaying = False
        self.user_message_id = user_message_id
        self.continuation = False
        self.branch = branch
        self._may_fork = False
        self._follow: asyncio.Future[Reply | None] | None = None
        self._canceller = canceller
        self._chunks: list[UIChunk] = []
        self._next_seq = 0
        self._gap = False
        self._repair_requested = False
        self._request_frame: JSONDict | None = None
        self._stale_ids: frozenset[str] = frozenset()
        self._accumulator: StreamAccumulator | None = None
        self._received = False
        self._recovering = False
        self._replayed_chunks = 0
        self._orphaned = False
        self._detached = False
        self._finished = asyncio.Event()
        self._wakeup: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def __repr__(self) -> str:
        return f"Reply(request_id={self.request_id!r}, outcome={self.outcome!r})"

    @property
    def done(self) -> bool:
        """Whether the reply has ended."""
        return self._finished.is_set()

    @property
    def message_id(self) -> str | None:
        """The assistant message id, once the first chunk arrived."""
        return self._accumulator.message_id if self._accumulator is not None else None

    @property
    def chunks(self) -> list[UIChunk]:
        """The chunks received so far (a new list)."""
        return list(self._chunks)

    def snapshot(self) -> UIMessage | None:
        """Return the assistant message as assembled so far, or None before the first chunk."""
        return self._accumulator.to_message() if self._accumulator is not None else None

    def __aiter__(self) -> AsyncIterator[UIChunk]:
        return self._iterate()

    async def _iterate(self) -> AsyncGenerator[UIChunk, None]:
        index = 0
        while True:
            if index < len(self._chunks):
                index += 1
                yield self._chunks[index - 1]
            elif self.done:
                return
            else:
                # Shielded: one cancelled consumer must not cancel the future the others wait on.
                await asyncio.shield(self._wakeup)

    async def wait(self) -> Outcome:
        """Wait for the reply to end.

        Returns:
            The outcome.
        """
        await self._finished.wait()
        if self.outcome is None:  # pragma: no cover - _finish always sets it first
            raise RuntimeError("reply finished without an outcome")
        return self.outcome

    async def message(self) -> UIMessage | None:
        """Wait for the reply to end and return the assembled assistant message.

        Returns:
            `{"id", "role": "assistant", "parts"[, "metadata"]}`, or None if the reply produced
            no chunk (for example a skipped request).
        """
        await self.wait()
        return self.snapshot()

    async def text(self) -> str:
        """Wait for the reply to end and return its text (possibly partial if it was aborted).

        Returns:
            The text of the assembled message's `text` parts.
        """
        message = await self.message()
        return message_text(message) if message is not None else ""

    async def final(self) -> Reply:
        """Wait for the reply and for the continuations the client's `on_tool_call` hook
        started after it, and return the last of them.

        With an `on_tool_call` hook, a reply that ends with client tool calls is answered by
        the hook and continued by the server; this follows those continuations to the end.

        Returns:
            The last reply: this one if no hook answered a tool call of it.
        """
        reply = self
        while True:
            await reply.wait()
            follow = reply._follow
            following = await asyncio.shield(follow) if follow is not None else None
            if following is None:
                return reply
            reply = following

    async def cancel(self) -> None:
        """Ask the server to cancel the request (`cf_agent_chat_request_cancel`)."""
        if self._canceller is not None and not self.done:
            await self._canceller(self.request_id)

    # The methods below are driven by ChatClient's reader.

    @property
    def _needs_seed(self) -> bool:
        return self._accumulator is None

    async def _started(self) -> None:
        """Wait for the first chunk or the end."""
        while not self._chunks and not self.done:
            await asyncio.shield(self._wakeup)

    def _begin_replay(self, *, recovering: bool = False) -> None:
        self.replaying = True
        self._replayed_chunks = 0
        self._recovering = recovering

    def _handle(self, frame: JSONDict, seed: UIMessage | None = None) -> bool:
        """Apply one `cf_agent_use_chat_response` frame; return True if the message changed."""
        self._received = True
        if frame.get("continuation") is True:
            self.continuation = True
        replay = frame.get("replay") is True
        body = frame.get("body")
        if frame.get("error") is True:
            text = body if isinstance(body, str) and body else _DEFAULT_ERROR_TEXT
            self.error = ClientError("stream_error", text)
            if frame.get("done") is True:
                self._finish("error")
            return False
        changed = False
        if isinstance(body, str) and body:
            if replay:
                self._replayed_chunks += 1
            changed = self._apply(body, frame, seed)
        if frame.get("replayComplete") is True:
            self.replaying = False
        if frame.get("done") is True and not replay and self.replaying:
            # A live end overtaking the replay asked for: the replay ends with its own.
            return changed
        if frame.get("done") is True:
            if replay and self._recovering and self._replayed_chunks == 0:
                # The server no longer has this stream; the transcript must tell how it ended.
                self._orphaned = True
                self.replaying = False
            else:
                self._finish(self._outcome_of(frame))
        return changed

    def _apply(self, body: str, frame: JSONDict, seed: UIMessage | None) -> bool:
        seq = frame.get("seq")
        if isinstance(seq, int) and not isinstance(seq, bool):
            if seq < self._next_seq:
                return False
            if seq > self._next_seq and frame.get("replay") is not True:
                # Chunks are missing: a replay brings them (the one under way, or one the client
                # asks for). If asking did not help, go on with what there is.
                if self.replaying:
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
            self._accumulator = None
        if self._accumulator is None:
            self._accumulator = StreamAccumulator(
                continuation=continuation, seed=seed if continuation else None
            )
        self._accumulator.apply(chunk)
        self._chunks.append(chunk)
        self._notify()
        return True

    def _outcome_of(self, frame: JSONDict) -> Outcome:
        outcome = frame.get("outcome")
        for known in get_args(Outcome):
            if outcome == known:
                result: Outcome = known
                return result
        if self.error is not None:
            return "error"
        if not self._chunks:
            return "skipped"
        return "completed"

    def _adopt(self, message: UIMessage) -> None:
        """End the reply with a message found in the transcript."""
        self._accumulator = StreamAccumulator(seed=message)
        self._finish("completed")

    def _finish(self, outcome: Outcome, error: ClientError | None = None) -> None:
        if self.done:
            return
        if error is not None:
            self.error = error
        if outcome == "error" and self.error is None:
            self.error = ClientError("stream_error", _DEFAULT_ERROR_TEXT)
        self.outcome = outcome
        self.replaying = False
        self._finished.set()
        self._notify()

    def _notify(self) -> None:
        waiter = self._wakeup
        self._wakeup = asyncio.get_running_loop().create_future()
        if not waiter.done():
            waiter.set_result(None)
