"""Running one turn: from the start of its stream to its terminal frame.

A turn (docs/architecture.md#the-path-of-a-chat-request, step 4) opens its stream in the event
log, streams the agent's chunks (`ChunkPump`) raced against its abort event, and then, in one
transaction of the write chain, stores the reply and settles its record. The terminal frame is
sent only once that transaction has committed, so a client that has it finds the reply stored.
A turn whose model stream stalls, or that is cut off by a hand-over, is not ended here: it is
left to recovery (docs/recovery.md).
"""

from __future__ import annotations

import asyncio
import copy
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import cast

from opentelemetry import trace

from durachat.agent import Turn, TurnResult, TurnStatusName
from durachat.messages import ReplyAssembler, new_assistant_id, repair_transcript
from durachat.models import ModelError
from durachat.observability import EventType
from durachat.protocol import MAIN_BRANCH
from durachat.tools import ToolLedger
from durachat.types import JSONDict, UIChunk, UIMessage
from durachat_infra.store import TurnStatus
from durachat_shard import metrics
from durachat_shard.actor.ports import (
    RecoveryHooks,
    TurnAgent,
    TurnSink,
    TurnTransaction,
    TurnWrites,
)
from durachat_shard.actor.pump import ChunkPump, StreamStalledError, close_stream
from durachat_shard.actor.state import ActiveTurn, ActorState, QueuedTurn
from durachat_shard.recovery import Splice
from durachat_shard.requests import ChatRequest, client_tool_names
from durachat_shard.tracing import TRACER, parent_of, traceparent
from durachat_shard.transcript import Change, Transcript

log = logging.getLogger(__name__)

GENERIC_ERROR = "An error occurred."
STORE_ERROR = "The conversation could not be saved. Please try again."


@dataclass(slots=True)
class _Stream:
    """The reply a turn builds and where its stream starts."""

    assembler: ReplyAssembler
    continuation: bool
    seq: int
    splice: Splice | None


@dataclass(slots=True)
class _Ending:
    """How the stream ended."""

    outcome: TurnStatus = "completed"
    error: str | None = None
    stalled: bool = False


class TurnRunner:
    """Runs the turns of one conversation (on one branch), one at a time."""

    def __init__(
        self,
        *,
        agent: TurnAgent,
        transcript: Transcript,
        emit: TurnSink,
        writes: TurnWrites,
        state: ActorState,
        ledger: ToolLedger,
        recovery: RecoveryHooks,
        sync_agent: Callable[[], None],
        event: Callable[[str, JSONDict], None],
        agent_name: str = "",
    ) -> None:
        self._agent = agent
        self._transcript = transcript
        self._emit = emit
        self._writes = writes
        self._state = state
        self._ledger = ledger
        self._recovery = recovery
        self._sync_agent = sync_agent
        self._event = event
        self._agent_name = agent_name
        self._model_errors = metrics.MODEL_ERRORS.labels(agent_name)

    async def run(self, queued: QueuedTurn) -> TurnResult | None:
        """Run one turn; None when it was interrupted (its stream stalled, or the shard is
        handing the conversation over) and is left to recovery.

        The turn is the state's active turn from here on; the caller clears it when the turn
        (and any recovery of it that follows at once) is over. It runs in a `chat.turn` span
        (docs/observability.md#traces), the child of the span that accepted it, or of the
        `chat.recovery` span of the incident it recovers.
        """
        began = time.monotonic()
        span = self._span(queued)
        result: TurnResult | None = None
        try:
            with trace.use_span(span, end_on_exit=False):
                result = await self._run(queued, traceparent(span))
            return result
        finally:
            outcome = "interrupted" if result is None else result.status
            metrics.TURN_DURATION.labels(outcome).observe(time.monotonic() - began)
            if span.is_recording():
                span.set_attribute("durachat.outcome", outcome)
                if outcome == "error":
                    span.set_status(trace.StatusCode.ERROR, result.error if result else None)
                span.end()

    def _span(self, queued: QueuedTurn) -> trace.Span:
        recovered = queued.recovery
        parent = queued.trace
        if recovered is not None and recovered.incident.span.is_recording():
            parent = recovered.incident.span.get_span_context()
        return TRACER.start_span(
            "chat.turn",
            context=parent_of(parent),
            attributes={
                "durachat.request_id": queued.request.request_id,
                "durachat.agent": self._agent_name,
                "durachat.continuation": queued.continuation,
                "durachat.recovered": recovered is not None,
            },
        )

    async def _run(self, queued: QueuedTurn, turn_traceparent: str | None) -> TurnResult | None:
        request = queued.request
        abort = asyncio.Event()
        self._state.active = ActiveTurn(request.request_id, abort)
        self._repair(request)
        seen = self._model_messages(queued)
        stream = self._open(queued, turn_traceparent)
        turn = Turn(
            request_id=request.request_id,
            messages=seen,
            body=request.body,
            abort=abort,
            continuation=stream.continuation or stream.splice is not None,
            client_tools=request.client_tools,
            trigger=request.trigger,
            ledger=self._ledger,
        )
        self._state.inflight = stream.assembler.message
        self._event(
            EventType.TURN_STARTED,
            {
                "requestId": request.request_id,
                "continuation": turn.continuation,
                "recovered": queued.recovery is not None,
            },
        )
        ending = await self._stream(turn, stream)
        if ending.stalled:
            log.warning("request %s: the model stream stalled", request.request_id)
            timeout_ms = int(self._agent.stream_stall_timeout * 1000)
            self._event(
                "chat:stream:stalled", {"requestId": request.request_id, "timeoutMs": timeout_ms}
            )
            return None
        if ending.outcome == "aborted" and self._state.checkpointing:
            # Handed over mid-stream: the next owner continues it from the log.
            return None
        self._judge(ending, stream, queued)
        return await self._settle(queued, stream, ending)

    def _repair(self, request: ChatRequest) -> None:
        """Settle tool calls a crash or an abandoned turn left without a result, so the model
        never sees a call without an answer; approvals and client calls still pending stay."""
        waiting = client_tool_names(self._agent.tools, request.client_tools)
        repaired, changed = repair_transcript(self._transcript.messages, client_tool_names=waiting)
        if not changed:
            return
        change = Change(MAIN_BRANCH)
        for index in changed:
            change.ops.extend(self._transcript.put_reply(repaired[index], anchor=None).ops)
        self._writes.behind(change.apply)
        self._sync_agent()
        self._emit.messages(self._transcript.messages)

    def _model_messages(self, queued: QueuedTurn) -> list[UIMessage]:
        """The transcript the model sees."""
        if queued.recovery is not None:
            return list(queued.recovery.messages)
        if queued.continuation:
            return list(self._transcript.messages)
        return self._model_view(queued.anchor)

    def _model_view(self, anchor: str | None) -> list[UIMessage]:
        """The transcript a new turn answers: up to its own user message (`anchor`), which
        comes last. Replies to earlier messages that were stored after it (they streamed while
        it waited in the queue) go before it; messages sent after it are the next turns'."""
        messages = self._transcript.messages
        at = self._transcript.index_of(anchor) if anchor is not None else None
        if at is None:
            return list(messages)
        later = [m for m in messages[at + 1 :] if m.get("role") == "assistant"]
        return [*messages[:at], *later, messages[at]]

    def _open(self, queued: QueuedTurn, turn_traceparent: str | None) -> _Stream:
        """Open the turn's stream in the log (a recovered one goes on where it broke off);
        its start entry carries the turn's traceparent."""
        request_id = queued.request.request_id
        recovered = queued.recovery
        if recovered is not None and recovered.assembler is not None:
            # Continue the interrupted stream: same request, same flags, the next `seq`.
            assembler = recovered.assembler
            if not recovered.live:
                self._emit.stream_start(
                    request_id, continuation=assembler.continuation, traceparent=turn_traceparent
                )
            return _Stream(assembler, assembler.continuation, recovered.next_seq, recovered.splice)
        continuation = queued.continuation
        messages = self._transcript.messages
        if continuation and messages and messages[-1].get("role") == "assistant":
            # A continuation appends to the last assistant message.
            base = copy.deepcopy(messages[-1])
        else:
            base = {"id": new_assistant_id(), "role": "assistant", "parts": []}
        self._emit.stream_start(
            request_id,
            continuation=continuation,
            base=(str(base["id"]), len(base["parts"])) if continuation else None,
            traceparent=turn_traceparent,
        )
        splice = recovered.splice if recovered is not None else None
        return _Stream(ReplyAssembler(base, continuation=continuation), continuation, 0, splice)

    async def _stream(self, turn: Turn, stream: _Stream) -> _Ending:
        """Pump the agent's stream until it ends, fails, stalls or the turn is aborted."""
        chunks: AsyncIterator[UIChunk] = self._agent.on_chat_message(turn)
        pump = ChunkPump(
            request_id=turn.request_id,
            assembler=stream.assembler,
            emit=self._emit,
            seq=stream.seq,
            splice=stream.splice,
            stall_after=self._agent.stream_stall_timeout,
            on_approval=self._keep_approval,
            on_event=self._event,
        )
        ending = _Ending()
        # Two waiters per turn rather than per chunk: the chunk loop stays tight and a cancel
        # still interrupts it between (or during) chunks.
        pumping = asyncio.create_task(pump.run(chunks))
        aborting = asyncio.create_task(turn.abort.wait())
        try:
            await asyncio.wait({pumping, aborting}, return_when=asyncio.FIRST_COMPLETED)
            if not pumping.done():
                pumping.cancel()
            try:
                await pumping
            except asyncio.CancelledError:
                if not turn.abort.is_set():
                    raise
            if turn.abort.is_set():
                ending.outcome = "aborted"
        except StreamStalledError:
            ending.stalled = True
        except ModelError as exc:
            log.info("model error in %s: %s", turn.request_id, exc)
            self._model_errors.inc()
            ending.error = exc.public_message or GENERIC_ERROR
        except Exception:
            log.exception("agent failed in %s", turn.request_id)
            ending.error = GENERIC_ERROR
        finally:
            aborting.cancel()
            if not pumping.done():
                pumping.cancel()
            await close_stream(chunks)
        return ending

    def _keep_approval(self, reply: UIMessage) -> None:
        """Store the reply as it stands when it asks for a tool approval."""
        change = self._transcript.put_reply(copy.deepcopy(reply), anchor=None)
        self._writes.behind(change.apply)

    def _judge(self, ending: _Ending, stream: _Stream, queued: QueuedTurn) -> None:
        """Decide how a turn that ran to its end ended; an error is reported at once."""
        if ending.outcome == "aborted" and self._state.write_failed and ending.error is None:
            # Stopped because the database refused a write: that is an error, not a cancel.
            ending.error = STORE_ERROR
        if ending.error is None and stream.assembler.error_text is not None:
            ending.error = GENERIC_ERROR
        if ending.error is not None:
            ending.outcome = "error"
            self._emit.error(
                queued.request.request_id,
                ending.error,
                message_ids=self._message_ids(queued, stream),
                continuation=stream.continuation,
            )
        metrics.TURNS.labels(ending.outcome).inc()

    async def _settle(self, queued: QueuedTurn, stream: _Stream, ending: _Ending) -> TurnResult:
        """Store the reply and settle the turn in one transaction, then end its stream."""
        request_id = queued.request.request_id
        recovered = queued.recovery
        reply = stream.assembler.message
        cleared = queued.generation != self._state.generation
        stored = stream.assembler.has_parts and not cleared
        # A reply goes at the end of the path, after any message sent while it streamed: that
        # is where every client (and the reference) shows it, live and after a reload.
        change = self._transcript.put_reply(reply, anchor=None) if stored else None
        limit = self._agent.max_persisted_messages
        trimmed = self._transcript.trim(limit) if limit else Change(MAIN_BRANCH)
        outcome, error = ending.outcome, ending.error

        async def settle(tx: TurnTransaction) -> None:
            if change is not None:
                await change.apply(tx)
            await trimmed.apply(tx)
            await tx.update_turn(
                request_id, status=outcome, message_id=str(reply["id"]), error=error
            )
            if recovered is not None:
                await self._recovery.settle(recovered, outcome)(tx)

        # The reply is durable before anyone is told the turn is over.
        try:
            await self._writes.write(settle)
        except Exception as exc:
            log.warning("request %s: could not store the reply: %r", request_id, exc)
            stored = False
            if outcome != "aborted":
                outcome = "error"
                self._emit.error(
                    request_id,
                    GENERIC_ERROR,
                    message_ids=self._message_ids(queued, stream),
                    continuation=stream.continuation,
                )
        if stored:
            self._sync_agent()
            # The requester of a new turn has the reply under the same id already; after a
            # continuation every tab gets the transcript.
            exclude = None if stream.continuation else queued.requester
            self._emit.messages(self._transcript.messages, exclude=exclude)
        return self._finish(queued, stream, outcome, error, reply if stored else None)

    def _finish(
        self,
        queued: QueuedTurn,
        stream: _Stream,
        outcome: TurnStatus,
        error: str | None,
        stored: UIMessage | None,
    ) -> TurnResult:
        request_id = queued.request.request_id
        if queued.recovery is not None:
            # Tabs learn the recovery is over before the terminal frame (docs/protocol.md).
            self._recovery.finished(queued.recovery, outcome, stream.assembler.message)
        self._emit.terminal(
            request_id,
            outcome=None if outcome == "completed" else outcome,
            message_ids=self._message_ids(queued, stream),
            continuation=stream.continuation,
            streamed=True,
        )
        self._event(
            "message:error" if outcome == "error" else "message:response",
            {"requestId": request_id, "status": outcome} | ({"error": error} if error else {}),
        )
        self._event(
            EventType.TURN_FAILED if outcome == "error" else EventType.TURN_FINISHED,
            {
                "requestId": request_id,
                "outcome": outcome,
                "messageId": str(stream.assembler.message["id"]),
            }
            | ({"error": error} if error else {}),
        )
        # A turn ends completed, aborted or error, all of which are `TurnResult` statuses.
        return TurnResult(
            request_id,
            cast(TurnStatusName, outcome),
            error=error,
            message=copy.deepcopy(stored) if stored is not None else None,
            continuation=stream.continuation,
        )

    @staticmethod
    def _message_ids(queued: QueuedTurn, stream: _Stream) -> list[str] | None:
        """The `messageIds` of the turn's frames: the sends it answers (none for a
        continuation)."""
        return None if stream.continuation else queued.request.user_message_ids
