"""One live conversation (on one branch) on its owner shard: `ConversationActor`, its lifecycle
and its two loops.

Inputs (client frames) are handled one at a time in arrival order, like a Durable Object's input
gate (`Admission`). Turns run strictly one after another (`TurnRunner`), each streaming in a task
of its own so a cancel, a clear or a new send can reach it while it streams
(docs/architecture.md#ownership, "Actor and turn queue"). Every change is made in memory first and
made durable by the write chain (`WriteChain`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import TypeVar

from opentelemetry import context as otel_context
from opentelemetry import trace

from durachat.agent import Agent, TurnResult
from durachat.types import JSONDict
from durachat_infra.store import (
    ConversationKey,
    FencedError,
    FencedTransaction,
    Store,
    TurnRecord,
)
from durachat_shard import metrics
from durachat_shard.actor.admission import Admission
from durachat_shard.actor.context import ActorContext
from durachat_shard.actor.forks import Forks
from durachat_shard.actor.host import HostApi
from durachat_shard.actor.queue import TurnQueue
from durachat_shard.actor.runner import TurnRunner
from durachat_shard.actor.state import ActorState, QueuedTurn
from durachat_shard.actor.tool_answers import ToolAnswers
from durachat_shard.actor.writes import WriteChain
from durachat_shard.concurrency import Concurrency
from durachat_shard.emitter import Emitter
from durachat_shard.ledger import SqlToolLedger
from durachat_shard.recovery import Incidents, Interrupted, RecoveryPlanner, turn_snapshot
from durachat_shard.requests import FrameError
from durachat_shard.tracing import TRACER
from durachat_shard.transcript import Transcript

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(slots=True)
class _Inbound:
    connection_id: str
    frame: JSONDict
    handled: asyncio.Future[None]
    trace: otel_context.Context | None = None


class ConversationActor:
    """Owns one conversation (on one branch) while its shard holds the lease.

    Construction gives the agent the transcript (`Agent.messages`); the shard then makes
    `host` the agent's host, sets the `on_cleared` hook, calls `recover`
    with the turns a former owner left open, and `start`.
    """

    def __init__(
        self,
        *,
        conversation_id: int,
        key: ConversationKey,
        epoch: int,
        shard_id: str,
        agent: Agent,
        transcript: Transcript,
        store: Store,
        emitter: Emitter,
        recent_requests: list[str] | None = None,
        last_body: JSONDict | None = None,
        last_client_tools: list[JSONDict] | None = None,
        incidents: Incidents | None = None,
    ) -> None:
        self.conversation_id = conversation_id
        self.key = key
        self.epoch = epoch
        self.shard_id = shard_id
        self.agent = agent
        self.transcript = transcript
        self.store = store
        self.emit = emitter
        self.last_active = time.monotonic()
        self._inbox: asyncio.Queue[_Inbound] = asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] = []
        self._state = ActorState(last_body=last_body, last_client_tools=last_client_tools)
        self._writes = WriteChain[FencedTransaction](
            partial(store.run_transaction, conversation_id, epoch),
            on_failure=self._write_failed,
        )
        ctx = ActorContext(
            conversation_id, key, shard_id, agent, transcript, emitter, self._writes, self._state
        )
        self._ctx = ctx
        ctx.sync_agent()
        concurrency = Concurrency.parse(agent.message_concurrency)
        self._queue = TurnQueue(ctx, concurrency)
        self._forks = Forks(ctx)
        self._admission = Admission(
            ctx,
            queue=self._queue,
            forks=self._forks,
            tools=ToolAnswers(ctx, self._queue),
            store=store,
            concurrency=concurrency,
            recent_requests=recent_requests or [],
        )
        self.host = HostApi(ctx, self._queue)
        """What the agent is given as its host (`Agent.host`)."""
        incidents = incidents or _incidents_without_budget(store, conversation_id, key, agent)
        self._planner = RecoveryPlanner(
            key=key,
            shard_id=shard_id,
            agent=agent,
            transcript=transcript,
            emit=emitter,
            writes=self._writes,
            incidents=incidents,
            sync_agent=ctx.sync_agent,
            spawn=ctx.spawn,
        )
        self._runner = TurnRunner(
            agent=agent,
            transcript=transcript,
            emit=emitter,
            writes=self._writes,
            state=self._state,
            ledger=SqlToolLedger(self._writes.write, shard_id),
            recovery=self._planner,
            sync_agent=ctx.sync_agent,
            event=ctx.event,
            agent_name=key.agent,
        )

    @property
    def on_cleared(self) -> Callable[[], None] | None:
        """Told when the conversation was cleared (on main: every other branch is gone)."""
        return self._admission.on_cleared

    @on_cleared.setter
    def on_cleared(self, hook: Callable[[], None] | None) -> None:
        self._admission.on_cleared = hook

    # Lifecycle.

    async def recover(self, turns: list[TurnRecord]) -> None:
        """Take over the turns a former owner left unfinished and queue their recovery,
        oldest first. Call before `start`, so recovery runs ahead of any new input."""
        if not turns:
            return
        entries = await self.emit.history()
        state = await self.emit.state()
        for record in turns:
            recovered = await self._planner.plan(
                Interrupted.of_record(record), entries=entries, state=state
            )
            if recovered is not None:
                self._queue.put(self._queue.recovery_turn(recovered))

    def start(self) -> None:
        """Start handling inputs and turns."""
        self._tasks = [
            asyncio.create_task(self._input_loop(), name=f"conv-{self.conversation_id}-inputs"),
            asyncio.create_task(self._turn_loop(), name=f"conv-{self.conversation_id}-turns"),
        ]

    async def stop(self, *, timeout: float = 5.0) -> None:
        """Stop: handle the inputs already received, end the running turn cleanly (aborted, its
        partial reply stored and its stream closed), skip queued turns, then stop the tasks."""
        self._state.stopping = True
        if not self._state.fenced:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._inbox.join(), timeout)
            self._state.abort_active()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._state.idle.wait(), timeout)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def checkpoint(self, *, timeout: float = 5.0) -> None:
        """Hand the conversation over: stop without ending the running turn, so the next owner
        continues it from the event log (and runs the queued ones)."""
        self._state.checkpointing = True
        self._state.stopping = True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._inbox.join(), timeout)
        self._state.abort_active()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._state.idle.wait(), timeout)
        await self._writes.settled()
        await self.emit.flush()

    @property
    def busy(self) -> bool:
        """Whether a turn is running or waiting, or inputs are queued."""
        return self._state.turn_pending or not self._inbox.empty()

    @property
    def fenced(self) -> bool:
        """True once a write was rejected: this shard no longer owns the conversation."""
        return self._state.fenced

    def step_down(self) -> None:
        """Stop acting for the conversation: another shard owns it now."""
        self._state.fenced = True
        self._state.abort_active()

    def submit(
        self,
        connection_id: str,
        frame: JSONDict,
        *,
        trace_context: otel_context.Context | None = None,
    ) -> asyncio.Future[None]:
        """Queue a client frame (already known to be a JSON object with a string `type`);
        the future resolves once the frame has been handled (its frames are queued).
        `trace_context` is the trace the frame came with: its handling is a `chat.accept`
        span in it (docs/observability.md#traces)."""
        self.last_active = time.monotonic()
        handled: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._inbox.put_nowait(_Inbound(connection_id, frame, handled, trace_context))
        return handled

    # Writes.

    async def settled_writes(self) -> None:
        """Wait until every write queued so far is done (or failed)."""
        await self._writes.settled()

    async def run_write(self, work: Callable[[FencedTransaction], Awaitable[T]]) -> T:
        """Run `work` in a fenced transaction of its own, after the writes queued before it,
        and return its result. Unlike the write chain, its errors are the caller's: nothing of
        it is applied, and the actor carries on (a `FencedError` still means it lost the
        conversation)."""
        return await self._writes.run(work)

    def _write_failed(self, exc: BaseException) -> None:
        """A write of the chain failed: memory is ahead of the database, so the actor steps
        down and the conversation is re-activated from SQL on its next frame."""
        if isinstance(exc, FencedError):
            metrics.FENCED.inc()
            log.warning("conversation %s: write fenced off, stepping down", self.conversation_id)
        else:
            log.error("conversation %s: write failed, stepping down: %r", self.conversation_id, exc)
            self._state.write_failed = True
        self.step_down()

    # The loops.

    async def _input_loop(self) -> None:
        while True:
            item = await self._inbox.get()
            span = None if item.trace is None else self._accept_span(item)
            token = None if span is None else otel_context.attach(trace.set_span_in_context(span))
            try:
                await self._admission.handle(item.connection_id, item.frame)
            except FrameError as exc:
                self._admission.reject(item.connection_id, item.frame, exc)
            except FencedError:
                metrics.FENCED.inc()
                log.warning(
                    "conversation %s: write fenced off, stepping down", self.conversation_id
                )
                self._state.fenced = True
                return
            except Exception:
                log.exception("conversation %s: input failed", self.conversation_id)
                # Whatever could not be handled is answered: a chat request gets its terminal
                # frame, so its client never waits for it (docs/protocol.md#errors).
                self._admission.reject(
                    item.connection_id,
                    item.frame,
                    FrameError("internal_error", "The frame could not be handled."),
                )
            finally:
                if span is not None and token is not None:
                    otel_context.detach(token)
                    span.end()
                if not item.handled.done():
                    item.handled.set_result(None)
                self._inbox.task_done()

    def _accept_span(self, item: _Inbound) -> trace.Span:
        """The span of handling a traced frame (accepting a chat request)."""
        return TRACER.start_span(
            "chat.accept",
            context=item.trace,
            kind=trace.SpanKind.SERVER,
            attributes={
                "durachat.frame.type": str(item.frame.get("type")),
                "durachat.request_id": str(item.frame.get("id") or ""),
                "durachat.agent": self.key.agent,
                "durachat.tenant": self.key.tenant,
                "durachat.conversation_id": self.conversation_id,
            },
        )

    async def _turn_loop(self) -> None:
        while True:
            queued = await self._queue.next()
            self._state.idle.clear()
            result: TurnResult | None = TurnResult(
                queued.request.request_id, "error", "the turn failed"
            )
            try:
                if queued.prepare is not None:
                    queued.prepare(queued)
                result = await self._runner.run(queued)
                while result is None and not self._state.stopping and not self._state.fenced:
                    # The model stream stalled: recover the turn here and now, ahead of the
                    # turns queued behind it (docs/recovery.md#stalled-model-streams).
                    await self.emit.flush()
                    plan = await self._planner.plan(self._stalled(queued))
                    if plan is None:
                        break
                    queued = self._queue.recovery_turn(plan)
                    result = await self._runner.run(queued)
            except FencedError:
                metrics.FENCED.inc()
                log.warning("conversation %s: turn fenced off", self.conversation_id)
                self._state.fenced = True
                return
            except Exception:
                log.exception("conversation %s: turn failed", self.conversation_id)
            finally:
                self._state.active = None
                self._state.inflight = None
                self._state.idle.set()
                self.last_active = time.monotonic()
                if queued.done is not None and not queued.done.done():
                    queued.done.set_result(
                        result or TurnResult(queued.request.request_id, "aborted")
                    )
            if result is not None:
                # Outside the turn: the hook may start turns of its own without waiting on
                # itself.
                self._ctx.spawn(self._respond(result))

    def _stalled(self, queued: QueuedTurn) -> Interrupted:
        """A turn of this tenure whose stream stalled, as recovery sees it."""
        snapshot = turn_snapshot(queued.request, queued.anchor, self.emit.branch)
        if queued.recovery is not None:
            snapshot["root"] = queued.recovery.incident.root_request_id
        return Interrupted(
            queued.request.request_id,
            snapshot,
            queued.continuation,
            self._state.stashes.get(queued.request.request_id),
            time.time(),
        )

    async def _respond(self, result: TurnResult) -> None:
        try:
            await self.agent.on_chat_response(result)
        except Exception:
            log.exception("on_chat_response failed for %s", result.request_id)


def _incidents_without_budget(
    store: Store, conversation_id: int, key: ConversationKey, agent: Agent
) -> Incidents:
    """Recovery incidents for an actor given no `Incidents`: no tenant token budget (that
    needs Redis)."""
    return Incidents(
        store=store,
        conversation_id=conversation_id,
        tenant=key.tenant,
        agent=key.agent,
        name=key.name,
        config=agent.chat_recovery,
        redis=None,
        key_prefix="",
    )
