"""One assistant reply, as the chat socket streams it (`Reply`, what users hold; the client
package drives it through its `ReplyControl`)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable

from durachat.client.errors import ClientError
from durachat.client.reply_control import OUTCOMES, Outcome, ReplyControl
from durachat.protocol import MAIN_BRANCH
from durachat.types import UIChunk, UIMessage

__all__ = ["OUTCOMES", "Outcome", "Reply", "message_text"]


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
        branch: str = MAIN_BRANCH,
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
        self._canceller = canceller
        self._control = ReplyControl(self)

    def __repr__(self) -> str:
        return f"Reply(request_id={self.request_id!r}, outcome={self.outcome!r})"

    @property
    def done(self) -> bool:
        """Whether the reply has ended."""
        return self._control.finished.is_set()

    @property
    def message_id(self) -> str | None:
        """The assistant message id, once the first chunk arrived."""
        accumulator = self._control.accumulator
        return accumulator.message_id if accumulator is not None else None

    @property
    def chunks(self) -> list[UIChunk]:
        """The chunks received so far (a new list)."""
        return list(self._control.chunks)

    def snapshot(self) -> UIMessage | None:
        """Return the assistant message as assembled so far, or None before the first chunk."""
        accumulator = self._control.accumulator
        return accumulator.to_message() if accumulator is not None else None

    def __aiter__(self) -> AsyncIterator[UIChunk]:
        return self._iterate()

    async def _iterate(self) -> AsyncGenerator[UIChunk, None]:
        chunks = self._control.chunks
        index = 0
        while True:
            if index < len(chunks):
                index += 1
                yield chunks[index - 1]
            elif self.done:
                return
            else:
                await self._control.changed()

    async def wait(self) -> Outcome:
        """Wait for the reply to end.

        Returns:
            The outcome.
        """
        await self._control.finished.wait()
        if self.outcome is None:  # pragma: no cover - finish always sets it first
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
        control = self._control
        while True:
            await control.reply.wait()
            follow = control.follow
            following = await asyncio.shield(follow) if follow is not None else None
            if following is None:
                return control.reply
            control = following

    async def cancel(self) -> None:
        """Ask the server to cancel the request (`cf_agent_chat_request_cancel`)."""
        if self._canceller is not None and not self.done:
            await self._canceller(self.request_id)


def new_reply(
    request_id: str,
    *,
    observed: bool,
    user_message_id: str | None = None,
    canceller: Callable[[str], Awaitable[object]] | None = None,
    branch: str = MAIN_BRANCH,
) -> ReplyControl:
    """Create a reply and return its control; the client package keeps the control and hands
    out `control.reply`.

    Args: as for `Reply`.
    """
    reply = Reply(
        request_id,
        observed=observed,
        user_message_id=user_message_id,
        canceller=canceller,
        branch=branch,
    )
    return reply._control
