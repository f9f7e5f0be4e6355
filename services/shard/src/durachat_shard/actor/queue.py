"""The turn queue of a conversation: which queued turn runs next, skipping turns, and the
continuations that tool results and approvals schedule (docs/protocol.md#continuations)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from durachat.agent import TurnResult
from durachat.messages import new_request_id
from durachat.tools import parallel_batch_incomplete
from durachat_infra.eventlog import only
from durachat_infra.store import FencedTransaction
from durachat_shard.actor.context import ActorContext
from durachat_shard.actor.state import PendingContinuation, QueuedTurn
from durachat_shard.concurrency import Concurrency
from durachat_shard.recovery import Recovered
from durachat_shard.requests import ChatRequest

COALESCE_CONTINUATION = 0.05
"""Seconds tool results are gathered before a continuation starts (one for a whole batch)."""


class TurnQueue:
    """Decides what runs, in which order; runs nothing itself (that is the turn loop's)."""

    def __init__(self, ctx: ActorContext, concurrency: Concurrency) -> None:
        self._ctx = ctx
        self._state = ctx.state
        self._concurrency = concurrency

    def put(self, queued: QueuedTurn) -> None:
        """Queue a turn behind the others."""
        self._state.turns.put_nowait(queued)

    async def next(self) -> QueuedTurn:
        """The next turn to run, once there is one; turns that must not run are skipped on the
        way (queued before a clear, queued while the actor stops, superseded by a newer send)."""
        state = self._state
        while True:
            queued = await state.turns.get()
            if queued.generation != state.generation:
                await self.skip(queued)
                continue
            if state.stopping:
                # A hand-over leaves queued turns to the next owner, which retries them.
                if not state.checkpointing:
                    await self.skip(queued)
                continue
            if queued.debounce_until is not None:
                await asyncio.sleep(max(0.0, queued.debounce_until - time.monotonic()))
            if self._concurrency.supersedes and 0 < queued.seq < state.submits:
                # A newer send came in meanwhile; it answers everything (`latest` and kin).
                await self.skip(queued)
                continue
            if queued.generation != state.generation:
                await self.skip(queued)
                continue
            return queued

    def recovery_turn(self, recovered: Recovered) -> QueuedTurn:
        """The turn that carries out a recovery plan (its record exists already)."""
        accepted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        accepted.set_result(None)
        return QueuedTurn(
            recovered.request,
            "",
            self._state.generation,
            recovered.anchor,
            accepted,
            continuation=recovered.continuation,
            recovery=recovered,
        )

    async def skip(self, queued: QueuedTurn) -> None:
        """End a queued turn without running it: its record says `skipped`, its requester
        gets a `skipped` terminal frame."""
        request_id = queued.request.request_id

        async def settle(tx: FencedTransaction) -> None:
            await tx.update_turn(request_id, status="skipped")

        self._ctx.writes.behind(settle)
        if queued.done is not None and not queued.done.done():
            queued.done.set_result(TurnResult(request_id, "skipped"))
        self._ctx.emit.terminal(
            request_id,
            outcome="skipped",
            message_ids=queued.request.user_message_ids,
            continuation=False,
            streamed=False,
            target=only(queued.requester),
            # While another turn streams, the stream state stays that turn's.
            change_state=self._state.active is None,
        )

    async def skip_all(self) -> None:
        """Skip every queued turn."""
        while not self._state.turns.empty():
            await self.skip(self._state.turns.get_nowait())

    def schedule_continuation(self, requester: str) -> None:
        """Continue the last assistant message after tool results or approvals, once, for a
        whole batch: results arriving close together share one continuation, and it waits
        while a parallel batch still has calls without results."""
        pending = self._state.continuation
        if pending is None:
            pending = PendingContinuation(new_request_id(), requester)
            self._state.continuation = pending
            if not self._state.turn_pending:
                self._ctx.emit.pending(pending.request_id)
        elif pending.timer is not None:
            pending.timer.cancel()
        pending.timer = asyncio.get_running_loop().call_later(
            COALESCE_CONTINUATION, self._fire_continuation
        )

    def drop_continuation(self) -> None:
        """Forget a scheduled continuation, ending the pending state it announced."""
        pending, self._state.continuation = self._state.continuation, None
        if pending is None:
            return
        if pending.timer is not None:
            pending.timer.cancel()
        if not self._state.turn_pending:
            self._ctx.emit.idle(pending.request_id)

    def _fire_continuation(self) -> None:
        pending = self._state.continuation
        if pending is None:
            return
        messages = self._ctx.transcript.messages
        last = messages[-1] if messages else None
        if last is None or last.get("role") != "assistant":
            # Nothing to continue any more: end the pending state it announced.
            self.drop_continuation()
            return
        if parallel_batch_incomplete(last.get("parts") or []):
            return  # the last result of the batch re-arms it
        self._state.continuation = None
        self.put(
            QueuedTurn(
                self._continuation_request(pending.request_id),
                pending.requester,
                self._state.generation,
                None,
                self._ctx.writes.behind(self._record_continuation(pending.request_id)),
                continuation=True,
            )
        )

    def _continuation_request(self, request_id: str) -> ChatRequest:
        return ChatRequest(
            request_id=request_id,
            messages=[],
            trigger="submit-message",
            body=self._state.last_body,
            client_tools=self._state.last_client_tools,
        )

    def _record_continuation(
        self, request_id: str
    ) -> Callable[[FencedTransaction], Awaitable[None]]:
        ctx, state = self._ctx, self._state

        async def record(tx: FencedTransaction) -> None:
            await tx.begin_turn(
                request_id,
                kind="continuation",
                owner=ctx.shard_id,
                request={
                    "body": state.last_body,
                    "clientTools": state.last_client_tools,
                    "continuation": True,
                    "branch": ctx.emit.branch,
                },
            )

        return record
