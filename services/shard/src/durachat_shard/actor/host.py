"""What the shard offers an agent (`durachat.agent.AgentHost`, docs/agents.md): the
programmatic API an agent calls on its own conversation."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from durachat.agent import MessagesOrUpdate, TurnResult
from durachat.messages import new_request_id
from durachat.tools import pending_interaction
from durachat.types import JSONDict, UIMessage
from durachat_infra.store import FencedTransaction
from durachat_shard.actor.context import ActorContext
from durachat_shard.actor.queue import TurnQueue
from durachat_shard.actor.state import QueuedTurn
from durachat_shard.recovery import turn_snapshot
from durachat_shard.requests import ChatRequest

STABLE_POLL = 0.05
"""Seconds between two looks at the conversation in `wait_until_stable`."""


class HostApi:
    """`AgentHost` for one conversation (on one branch); see the methods of the same names on
    `durachat.Agent`."""

    def __init__(self, ctx: ActorContext, queue: TurnQueue) -> None:
        self._ctx = ctx
        self._state = ctx.state
        self._queue = queue

    async def persist_messages(self, messages: list[UIMessage]) -> None:
        """See `Agent.persist_messages`."""
        ctx = self._ctx
        _, change = ctx.transcript.persist(messages)
        if change:
            await ctx.writes.write(change.apply)
        ctx.sync_agent()
        ctx.emit.messages(ctx.transcript.messages)

    async def save_messages(
        self, messages: MessagesOrUpdate, *, body: JSONDict | None
    ) -> TurnResult:
        """See `Agent.save_messages`. The messages are saved when the turn reaches the front
        of the queue, so an update function sees the transcript the turns before left."""
        ctx = self._ctx
        request = self._request(body)
        done: asyncio.Future[TurnResult] = asyncio.get_running_loop().create_future()

        def prepare(queued: QueuedTurn) -> None:
            current = ctx.transcript.messages
            wanted = messages(list(current)) if callable(messages) else messages
            _, change = ctx.transcript.persist(wanted)
            after = ctx.transcript.messages
            queued.anchor = after[-1]["id"] if after else None
            snapshot = turn_snapshot(request, queued.anchor, ctx.emit.branch)

            async def record(tx: FencedTransaction) -> None:
                await tx.begin_turn(
                    request.request_id, kind="programmatic", owner=ctx.shard_id, request=snapshot
                )
                await change.apply(tx)

            queued.accepted = ctx.writes.behind(record)
            ctx.sync_agent()
            ctx.emit.messages(ctx.transcript.messages)

        resolved: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        resolved.set_result(None)
        self._queue.put(
            QueuedTurn(
                request, "", self._state.generation, None, resolved, done=done, prepare=prepare
            )
        )
        return await done

    async def continue_last_turn(self, *, body: JSONDict | None) -> TurnResult:
        """See `Agent.continue_last_turn`."""
        ctx = self._ctx
        messages = ctx.transcript.messages
        if not messages or messages[-1].get("role") != "assistant":
            return TurnResult("", "skipped")
        request = self._request(body)
        done: asyncio.Future[TurnResult] = asyncio.get_running_loop().create_future()

        async def record(tx: FencedTransaction) -> None:
            await tx.begin_turn(
                request.request_id,
                kind="continuation",
                owner=ctx.shard_id,
                request={"body": request.body, "continuation": True, "branch": ctx.emit.branch},
            )

        self._queue.put(
            QueuedTurn(
                request,
                "",
                self._state.generation,
                None,
                ctx.writes.behind(record),
                continuation=True,
                done=done,
            )
        )
        return await done

    async def wait_until_stable(self, timeout: float | None) -> bool:
        """See `Agent.wait_until_stable`."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            settled = (
                not self._state.turn_pending
                and self._state.continuation is None
                and not self.has_pending_interaction()
            )
            if settled:
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False
            await asyncio.sleep(STABLE_POLL)

    def has_pending_interaction(self) -> bool:
        """See `Agent.has_pending_interaction`."""
        inflight = self._state.inflight
        if inflight is not None and pending_interaction(inflight.get("parts") or []):
            return True
        return any(
            pending_interaction(m.get("parts") or [])
            for m in self._ctx.transcript.messages
            if m.get("role") == "assistant"
        )

    def abort_request(self, request_id: str) -> bool:
        """See `Agent.abort_request`."""
        active = self._state.active
        if active is not None and active.request_id == request_id:
            active.abort.set()
            return True
        return False

    def abort_all_requests(self) -> None:
        """See `Agent.abort_all_requests`."""
        self._state.abort_active()

    async def reset_turn_state(self) -> None:
        """See `Agent.reset_turn_state`. The aborted reply is stored, as after a cancel."""
        self.abort_all_requests()
        await self._queue.skip_all()
        self._queue.drop_continuation()

    async def stash(self, data: Any) -> None:
        """See `Agent.stash`."""
        active = self._state.active
        if active is None:
            raise RuntimeError("stash() needs a running turn")
        request_id = active.request_id
        self._state.stashes[request_id] = data

        async def keep(tx: FencedTransaction) -> None:
            await tx.update_turn(request_id, stash={"data": data})

        await self._ctx.writes.write(keep)

    def _request(self, body: JSONDict | None) -> ChatRequest:
        """A programmatic request: the last request's body fields unless `body` is given."""
        return ChatRequest(
            request_id=new_request_id(),
            messages=[],
            trigger="submit-message",
            body=body if body is not None else self._state.last_body,
            client_tools=self._state.last_client_tools,
        )
