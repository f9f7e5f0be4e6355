"""Moving one turn's chunks from the agent's stream to the conversation's event log.

Every chunk goes through the turn's `ReplyAssembler` (the server's copy of the reply) and is
written with the next `seq`. The first chunk clients get is always `start`, carrying the reply's
id. A recovered turn's stream first goes through its `Splice`, so it reads as the rest of the
stream that was interrupted.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable

from durachat.messages import ReplyAssembler
from durachat.observability import EventType
from durachat.types import JSONDict, UIChunk, UIMessage
from durachat_shard import metrics
from durachat_shard.actor.ports import TurnSink
from durachat_shard.recovery import Splice

log = logging.getLogger(__name__)

_CHUNKS = metrics.CHUNKS


class StreamStalledError(Exception):
    """The model stream was silent for longer than the agent's `stream_stall_timeout`."""


class ChunkPump:
    """Pumps one turn's stream; `seq` is the number the next chunk gets."""

    def __init__(
        self,
        *,
        request_id: str,
        assembler: ReplyAssembler,
        emit: TurnSink,
        seq: int,
        splice: Splice | None,
        stall_after: float,
        on_approval: Callable[[UIMessage], None],
        on_event: Callable[[str, JSONDict], None] | None = None,
    ) -> None:
        self._request_id = request_id
        self._assembler = assembler
        self._emit = emit
        self.seq = seq
        self._splice = splice
        self._stall_after = stall_after
        self._on_approval = on_approval
        self._on_event = on_event
        # A spliced stream continues one clients have seen start already.
        self._started = splice is not None
        self._began = time.monotonic()

    async def run(self, stream: AsyncIterator[UIChunk]) -> None:
        """Pump until the stream ends or the reply carries an error; raises
        `StreamStalledError` when the stream stays silent too long."""
        # One deadline for the whole turn, pushed back at each chunk: a `wait_for` per chunk
        # would run every chunk's wait in a task of its own (docs/benchmarks.md).
        watch = asyncio.timeout(None)
        try:
            async with watch:
                await self._pump(stream.__aiter__(), watch)
        except TimeoutError:
            if watch.expired():
                raise StreamStalledError from None
            raise

    async def _pump(self, chunks: AsyncIterator[UIChunk], watch: asyncio.Timeout) -> None:
        loop = asyncio.get_running_loop()
        stall_after = self._stall_after
        while True:
            if stall_after > 0:
                watch.reschedule(loop.time() + stall_after)
            try:
                chunk = await anext(chunks)
            except StopAsyncIteration:
                return
            if self._splice is not None:
                spliced = self._splice(chunk)
                if spliced is None:
                    continue
                chunk = spliced
            if not self._started:
                self._start(chunk)
            self._pass(chunk)
            if self._assembler.error_text is not None:
                return

    def _start(self, first: UIChunk) -> None:
        self._started = True
        metrics.TIME_TO_FIRST_CHUNK.observe(time.monotonic() - self._began)
        if first.get("type") != "start":
            # Every reply opens with `start`, which carries the server's message id.
            self._send(self._assembler.process({"type": "start"}))

    def _pass(self, chunk: UIChunk) -> None:
        out = self._assembler.process(chunk)
        self._send(out)
        if out is not None and out["type"] == "tool-approval-request":
            # Stored at once, so a reload shows the approval to answer.
            self._on_approval(self._assembler.message)
        if out is not None and self._on_event is not None:
            self._tool_event(out)

    def _tool_event(self, chunk: UIChunk) -> None:
        """Tell the event feed about a tool call or an approval asked for
        (docs/observability.md#subscribing-to-events)."""
        assert self._on_event is not None
        kind = chunk["type"]
        if kind == "tool-input-available":
            payload: JSONDict = {
                "requestId": self._request_id,
                "toolCallId": chunk.get("toolCallId"),
                "toolName": chunk.get("toolName"),
            }
            self._on_event(EventType.TOOL_CALL, payload)
        elif kind == "tool-approval-request":
            payload = {
                "requestId": self._request_id,
                "toolCallId": chunk.get("toolCallId"),
                "approvalId": chunk.get("approvalId"),
            }
            self._on_event(EventType.TOOL_APPROVAL_REQUESTED, payload)

    def _send(self, chunk: UIChunk | None) -> None:
        if chunk is None:
            return
        continuation = self._assembler.continuation
        self._emit.chunk(self._request_id, self.seq, chunk, continuation=continuation)
        _CHUNKS.inc()
        self.seq += 1


async def close_stream(stream: AsyncIterator[UIChunk]) -> None:
    """Close an agent's stream (an async generator runs its `finally` blocks)."""
    aclose = getattr(stream, "aclose", None)
    if aclose is not None:
        try:
            await aclose()
        except Exception:
            log.debug("closing the agent stream failed", exc_info=True)
