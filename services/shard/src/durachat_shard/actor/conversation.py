"""One live conversation on its owner shard: an actor with a serial turn queue.

Inputs (client frames) are handled one at a time in arrival order, like a Durable Object's input
gate. A streaming turn runs as its own task so a cancel, a clear or a new send can reach it while
it streams; turns themselves run strictly one after another.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from durachat.agent import Agent, MessagesOrUpdate, TurnResult
from durachat.messages import new_request_id
from durachat.observability import EventType
from durachat.observability import emit as emit_event
from durachat.protocol import MessageType
from durachat.tools import (
    apply_tool_approval,
    apply_tool_result,
    parallel_batch_incomplete,
    pending_interaction,
)
from durachat.types import JSONDict, UIMessage
from durachat_infra.eventlog import only
from durachat_infra.store import (
    ConversationKey,
    FencedError,
    FencedTransaction,
    Store,
    TurnRecord,
)
from durachat_shard import metrics
from durachat_shard.actor.runner import TurnRunner
from durachat_shard.actor.state import ActorState, PendingContinuation, QueuedTurn
from durachat_shard.actor.writes import WriteChain
from durachat_shard.concurrency import Concurrency, merge_user_messages
from durachat_shard.emitter import Emitter
from durachat_shard.ledger import SqlToolLedger
from durachat_shard.recovery import (
    Incidents,
    Interrupted,
    Recovered,
    RecoveryPlanner,
    turn_snapshot,
)
from durachat_shard.requests import (
    ChatRequest,
    FrameError,
    parse_chat_request,
    parse_messages,
)
from durachat_shard.transcript import Change, Fork, Transcript

log = logging.getLogger(__name__)

T = TypeVar("T")

GENERIC_ERROR = "An error occurred."
STORE_ERROR = "The conversation could not be saved. Please try again."
FORK_ERROR = "The new branch could not be created. Please try again."

FORK_CANCEL_WAIT = 10.0
"""Seconds an edit or regenerate waits for the reply it cancels to end before forking."""


@dataclass(slots=True)
class _Inbound:
    connection_id: str
    frame: JSONDict
    handled: asyncio.Future[None]


COALESCE_CONTINUATION = 0.05
"""Seconds tool results are gathered before a continuation starts (one for a whole batch)."""

FIND_TOOL_PART_WAIT = 2.0
"""Seconds a tool result waits for the running turn to store the part it answers."""


class _DuplicateRequestError(Exception):
    """The database already holds a turn with this request id."""


RECENT_REQUESTS = 512


class ConversationActor:
    """Owns one conversation while its shard holds the lease."""

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
        self._state = ActorState(last_body=last_body, last_client_tools=last_client_tools)
        self._tasks: list[asyncio.Task[None]] = []
        self._writes = WriteChain[FencedTransaction](
            lambda: store.transaction(conversation_id, epoch), on_failure=self._write_failed_off
        )
        self._concurrency = Concurrency.parse(agent.message_concurrency)
        self._merge_from: int | None = None
        self._background: set[asyncio.Task[None]] = set()
        self.on_cleared: Callable[[], None] | None = None
        """Told when the conversation was cleared (on main: every other branch is gone)."""
        self.open_branch: Callable[[str], Awaitable[ConversationActor]] | None = None
        """The actor of another branch of this conversation (by id), activating it: where an
        edit or a regenerate is answered."""
        self._forked: dict[str, Fork] = {}
        """Requests answered on a branch forked for them, by request id (with the branch id)."""
        self._incidents = incidents or Incidents(
            store=store,
            conversation_id=conversation_id,
            tenant=key.tenant,
            agent=key.agent,
            name=key.name,
            config=agent.chat_recovery,
            redis=None,
            key_prefix="",
        )
        self._planner = RecoveryPlanner(
            key=key,
            shard_id=shard_id,
            agent=agent,
            transcript=transcript,
            emit=emitter,
            writes=self._writes,
            incidents=self._incidents,
            sync_agent=self._sync_agent,
            spawn=self._spawn,
        )
        self._runner = TurnRunner(
            agent=agent,
            transcript=transcript,
            emit=emitter,
            writes=self._writes,
            state=self._state,
            ledger=SqlToolLedger(self._write, shard_id),
            recovery=self._planner,
            sync_agent=self._sync_agent,
            event=self._event,
        )
        # Request ids already accepted, newest last: a retried request is recognised without a
        # database round trip (loaded from the turns table on activation).
        self._recent: dict[str, None] = dict.fromkeys(reversed(recent_requests or []))

    def _sync_agent(self) -> None:
        """Give the agent the transcript as it is now."""
        self.agent.messages = self.transcript.messages

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
            if self._state.active is not None:
                self._state.active.abort.set()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._state.idle.wait(), timeout)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    @property
    def busy(self) -> bool:
        """Whether a turn is running or waiting, or inputs are queued."""
        return (
            self._state.active is not None
            or not self._state.turns.empty()
            or not self._inbox.empty()
        )

    @property
    def fenced(self) -> bool:
        """True once a write was rejected: this shard no longer owns the conversation."""
        return self._state.fenced

    def step_down(self) -> None:
        """Stop acting for the conversation: another shard owns it now."""
        self._state.fenced = True
        if self._state.active is not None:
            self._state.active.abort.set()

    def submit(self, connection_id: str, frame: JSONDict) -> asyncio.Future[None]:
        """Queue a client frame (already known to be a JSON object with a string `type`);
        the future resolves once the frame has been handled (its frames are queued)."""
        self.last_active = time.monotonic()
        handled: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._inbox.put_nowait(_Inbound(connection_id, frame, handled))
        return handled

    def _write_behind(
        self, work: Callable[[FencedTransaction], Awaitable[None]]
    ) -> asyncio.Future[None]:
        """Queue a fenced write after every write queued before it; returns its outcome."""
        return self._writes.behind(work)

    def _write_failed_off(self, exc: BaseException) -> None:
        """A write of the chain failed: memory is ahead of the database, so the actor steps
        down and the conversation is re-activated from SQL on its next frame."""
        if isinstance(exc, FencedError):
            metrics.FENCED.inc()
            log.warning("conversation %s: write fenced off, stepping down", self.conversation_id)
        else:
            log.error("conversation %s: write failed, stepping down: %r", self.conversation_id, exc)
            self._state.write_failed = True
        self.step_down()

    async def settled_writes(self) -> None:
        """Wait until every write queued so far is done (or failed)."""
        await self._writes.settled()

    async def run_write(self, work: Callable[[FencedTransaction], Awaitable[T]]) -> T:
        """Run `work` in a fenced transaction of its own, after the writes queued before it,
        and return its result. Unlike the write chain, its errors are the caller's: nothing of
        it is applied, and the actor carries on (a `FencedError` still means it lost the
        conversation)."""
        return await self._writes.run(work)

    async def _write(self, work: Callable[[FencedTransaction], Awaitable[None]]) -> None:
        """A write that the caller waits for (still in order with the queued ones)."""
        await self._writes.write(work)

    async def _input_loop(self) -> None:
        while True:
            item = await self._inbox.get()
            try:
                await self._handle(item.connection_id, item.frame)
            except FrameError as exc:
                self._reject(item.connection_id, item.frame, exc)
            except FencedError:
                metrics.FENCED.inc()
                log.warning(
                    "conversation %s: write fenced off, stepping down", self.conversation_id
                )
                self._state.fenced = True
                return
            except Exception:
                log.exception("conversation %s: input failed", self.conversation_id)
            finally:
                if not item.handled.done():
                    item.handled.set_result(None)
                self._inbox.task_done()

    def _reject(self, connection_id: str, frame: JSONDict, exc: FrameError) -> None:
        request_id = frame.get("id")
        if frame.get("type") == MessageType.USE_CHAT_REQUEST.value and isinstance(request_id, str):
            self.emit.to(
                connection_id,
                {
                    "type": MessageType.USE_CHAT_RESPONSE.value,
                    "id": request_id,
                    "body": exc.message,
                    "done": True,
                    "error": True,
                    "outcome": "error",
                },
            )
        self.emit.to(
            connection_id,
            {"type": MessageType.ERROR.value, "code": exc.code, "message": exc.message},
        )

    async def _handle(self, connection_id: str, frame: JSONDict) -> None:
        kind = frame.get("type")
        if kind == MessageType.USE_CHAT_REQUEST.value:
            init = frame.get("init")
            if isinstance(init, dict) and init.get("method", "POST") != "POST":
                return
            await self._accept(connection_id, parse_chat_request(frame), frame)
        elif kind == MessageType.CHAT_MESSAGES.value:
            incoming = parse_messages(frame)
            merged, change = self.transcript.persist(incoming)
            if change:
                await self._write(change.apply)
            self.agent.messages = self.transcript.messages
            self.emit.messages(merged, exclude=connection_id)
        elif kind == MessageType.CHAT_CLEAR.value:
            await self._clear(connection_id)
        elif kind == MessageType.TOOL_RESULT.value:
            await self._tool_result(connection_id, frame)
        elif kind == MessageType.TOOL_APPROVAL.value:
            await self._tool_approval(connection_id, frame)
        elif kind == MessageType.CHAT_REQUEST_CANCEL.value:
            request_id = frame.get("id")
            if self._state.active is not None and self._state.active.request_id == request_id:
                self._state.active.abort.set()
                self._event(EventType.MESSAGE_CANCEL, {"requestId": request_id})
            elif isinstance(request_id, str) and request_id in self._forked:
                # Sent before its sender heard that the request moved to a new branch.
                await self._pass_on(self._forked[request_id].branch, connection_id, frame)
        else:
            raise FrameError("unsupported_frame", f"frame type {kind!r} is not supported")

    async def _accept(self, requester: str, request: ChatRequest, frame: JSONDict) -> None:
        if request.request_id in self._recent:
            await self._answer_repeat(requester, request)
            return
        if request.request_id in self._forked:
            # A retry: its sender goes where the request is answered.
            forked = self._forked[request.request_id]
            self.emit.view(forked.branch, reason=forked.kind, connection_id=requester)
            await self._pass_on(forked.branch, requester, frame)
            return
        incoming = self.transcript.reconcile(request.messages)
        inflight = self._state.inflight if self._state.active is not None else None
        fork = self.transcript.fork_of(incoming, inflight=inflight)
        if fork is not None:
            await self._fork(requester, request, frame, fork)
            return
        self._remember(request.request_id)
        self._state.last_body = request.body
        self._state.last_client_tools = request.client_tools
        overlapping = self._state.active is not None or not self._state.turns.empty()
        submit = request.trigger == "submit-message"
        strategy = self._concurrency.strategy
        if overlapping and submit and strategy == "drop":
            self._drop(requester, request)
            return
        if not overlapping:
            # While a turn streams, its stream stays the one clients resume; a queued turn
            # announces itself when it starts streaming.
            self.emit.pending(request.request_id)
            self._merge_from = None
        elif submit and strategy == "merge" and self._merge_from is None:
            self._merge_from = len(self.transcript.messages)
        merged, change = self.transcript.persist(incoming)
        collapsed = False
        if overlapping and submit and strategy == "merge":
            tail = self._merge_tail()
            collapsed = bool(tail)
            change.ops.extend(tail.ops)

        anchor = self.transcript.messages[-1]["id"] if self.transcript.messages else None
        snapshot = turn_snapshot(request, anchor, self.emit.branch)

        async def record(tx: FencedTransaction) -> None:
            # One transaction records the turn (idempotent by request id) and its messages.
            fresh = await tx.begin_turn(
                request.request_id,
                kind="regenerate" if request.trigger == "regenerate-message" else "submit",
                owner=self.shard_id,
                request=snapshot,
            )
            if not fresh:
                raise _DuplicateRequestError(request.request_id)
            await tx.save_request_context(request.body, request.client_tools)
            await change.apply(tx)

        # The turn starts at once; the database catches up behind it.
        accepted = self._write_behind(record)
        self.agent.messages = self.transcript.messages
        if collapsed:
            # The sender's own messages changed too: everyone gets the merged transcript.
            self.emit.messages(self.transcript.messages)
        else:
            self.emit.messages(merged, exclude=requester)
        self._event(EventType.MESSAGE_REQUEST, {"requestId": request.request_id})
        queued = QueuedTurn(request, requester, self._state.generation, anchor, accepted)
        if submit:
            self._state.submits += 1
            queued.seq = self._state.submits
            if overlapping and strategy == "debounce":
                queued.debounce_until = time.monotonic() + self._concurrency.debounce_ms / 1000
        self._state.turns.put_nowait(queued)

    async def _fork(
        self, requester: str, request: ChatRequest, frame: JSONDict, fork: Fork
    ) -> None:
        """Answer an edit or a regenerate on a new branch forked where its transcript leaves
        this path; its sender views that branch from then on. Nothing here changes: a reply
        streaming here is cancelled first and its partial kept (the client left it behind)."""
        if self.open_branch is None:
            raise FrameError("branching_unavailable", "this conversation cannot fork branches")
        below = self.transcript.messages[fork.at - 1]["id"] if fork.at else None
        if self._state.active is not None:
            self._state.active.abort.set()
            self._event(EventType.MESSAGE_CANCEL, {"requestId": self._state.active.request_id})
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._state.idle.wait(), FORK_CANCEL_WAIT)
        name = f"{fork.kind}-{uuid.uuid4().hex[:8]}"
        try:
            record = await self.run_write(
                lambda tx: tx.create_branch(
                    name,
                    from_branch=self.transcript.branch,
                    fork_message_id=below,
                    at_root=below is None,
                )
            )
            actor = await self.open_branch(str(record.id))
        except FencedError:
            raise
        except Exception as exc:
            log.warning("conversation %s: could not fork: %r", self.conversation_id, exc)
            raise FrameError("fork_failed", FORK_ERROR) from exc
        branch = str(record.id)
        self._forked[request.request_id] = replace(fork, branch=branch)
        if len(self._forked) > RECENT_REQUESTS:
            del self._forked[next(iter(self._forked))]
        # In the log before anything the new branch sends: the gateway moves the sender first.
        self.emit.view(branch, reason=fork.kind, connection_id=requester)
        self._event(
            EventType.TRANSCRIPT_FORKED,
            {"requestId": request.request_id, "branch": record.to_json(), "kind": fork.kind},
        )
        await actor.submit(requester, frame)

    async def _pass_on(self, branch: str, connection_id: str, frame: JSONDict) -> None:
        """Hand a frame to the actor of another branch (a request that forked, its retry or
        cancel)."""
        if self.open_branch is None:
            return
        actor = await self.open_branch(branch)
        await actor.submit(connection_id, frame)

    def _merge_tail(self) -> Change:
        """Collapse the user messages sent while busy into one (the `merge` strategy)."""
        messages = self.transcript.messages
        start = self._merge_from if self._merge_from is not None else len(messages)
        run = messages[start:]
        if len(run) < 2 or any(m.get("role") != "user" for m in run):
            return Change("main")
        return self.transcript.replace_tail(len(run), merge_user_messages(run))

    def _drop(self, requester: str, request: ChatRequest) -> None:
        """Refuse an overlapping send (the `drop` strategy): nothing is stored; the sender gets
        the server's transcript back, the reply in progress included."""
        rollback = list(self.transcript.messages)
        if self._state.inflight is not None:
            rollback.append(copy.deepcopy(self._state.inflight))
        self.emit.to(requester, {"type": MessageType.CHAT_MESSAGES.value, "messages": rollback})
        self.emit.terminal(
            request.request_id,
            outcome="skipped",
            message_ids=request.user_message_ids,
            continuation=False,
            streamed=False,
            target=only(requester),
            change_state=False,
        )

    async def _tool_result(self, requester: str, frame: JSONDict) -> None:
        call_id = frame.get("toolCallId")
        if not isinstance(call_id, str) or not call_id:
            raise FrameError("invalid_frame", "a tool result needs a `toolCallId`")
        client_tools = frame.get("clientTools")
        if isinstance(client_tools, list) and client_tools:
            self._state.last_client_tools = client_tools
        state = frame.get("state")
        error_text = frame.get("errorText")
        await self._change_tool_part(
            call_id,
            lambda part: apply_tool_result(
                part,
                output=frame.get("output"),
                state=state if isinstance(state, str) else None,
                error_text=error_text if isinstance(error_text, str) else None,
            ),
        )
        self._event(
            EventType.TOOL_RESULT, {"toolCallId": call_id, "toolName": frame.get("toolName")}
        )
        # A failed client tool never continues on its own (the client decides what next); but
        # any result may complete a batch whose continuation an earlier result asked for.
        if (frame.get("autoContinue") is True and state != "output-error") or (
            self._state.continuation is not None
        ):
            self._schedule_continuation(requester)

    async def _tool_approval(self, requester: str, frame: JSONDict) -> None:
        call_id = frame.get("toolCallId")
        approved = frame.get("approved")
        if not isinstance(call_id, str) or not call_id or not isinstance(approved, bool):
            raise FrameError(
                "invalid_frame", "a tool approval needs a `toolCallId` and a boolean `approved`"
            )
        await self._change_tool_part(call_id, lambda part: apply_tool_approval(part, approved))
        self._event(EventType.TOOL_APPROVAL, {"toolCallId": call_id, "approved": approved})
        if frame.get("autoContinue") is True:
            self._schedule_continuation(requester)

    async def _change_tool_part(
        self, call_id: str, change: Callable[[JSONDict], JSONDict | None]
    ) -> None:
        """Apply a tool result or approval to the part of `call_id`: store the message, tell
        every tab (`cf_agent_message_updated`). Re-applying the same change does nothing."""
        located = self._find_tool_part(call_id)
        if located is None and self._state.active is not None:
            # The turn that made the call may still be storing it.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._state.idle.wait(), FIND_TOOL_PART_WAIT)
            located = self._find_tool_part(call_id)
        if located is None:
            raise FrameError("unknown_tool_call", f"no tool call {call_id!r} in this conversation")
        message, index = located
        updated = change(message["parts"][index])
        if updated is None:
            return
        parts = list(message["parts"])
        parts[index] = updated
        new_message = {**message, "parts": parts}
        self._write_behind(self.transcript.put_reply(new_message, anchor=None).apply)
        self.agent.messages = self.transcript.messages
        self.emit.frame({"type": MessageType.MESSAGE_UPDATED.value, "message": new_message})

    def _find_tool_part(self, call_id: str) -> tuple[JSONDict, int] | None:
        for message in reversed(self.transcript.messages):
            if message.get("role") != "assistant":
                continue
            for index, part in enumerate(message.get("parts") or []):
                if isinstance(part, dict) and part.get("toolCallId") == call_id:
                    return message, index
        return None

    def _schedule_continuation(self, requester: str) -> None:
        """Continue the last assistant message after tool results or approvals, once, for a
        whole batch: results arriving close together share one continuation, and it waits
        while a parallel batch still has calls without results."""
        pending = self._state.continuation
        if pending is None:
            pending = PendingContinuation(new_request_id(), requester)
            self._state.continuation = pending
            if self._state.active is None and self._state.turns.empty():
                self.emit.pending(pending.request_id)
        elif pending.timer is not None:
            pending.timer.cancel()
        pending.timer = asyncio.get_running_loop().call_later(
            COALESCE_CONTINUATION, self._fire_continuation
        )

    def _fire_continuation(self) -> None:
        pending = self._state.continuation
        if pending is None:
            return
        last = self.transcript.messages[-1] if self.transcript.messages else None
        if last is None or last.get("role") != "assistant":
            # Nothing to continue any more: end the pending state it announced.
            self._drop_continuation()
            return
        if parallel_batch_incomplete(last.get("parts") or []):
            return  # the last result of the batch re-arms it
        self._state.continuation = None
        request_id = pending.request_id

        async def record(tx: FencedTransaction) -> None:
            await tx.begin_turn(
                request_id,
                kind="continuation",
                owner=self.shard_id,
                request={
                    "body": self._state.last_body,
                    "clientTools": self._state.last_client_tools,
                    "continuation": True,
                    "branch": self.emit.branch,
                },
            )

        request = ChatRequest(
            request_id=request_id,
            messages=[],
            trigger="submit-message",
            body=self._state.last_body,
            client_tools=self._state.last_client_tools,
        )
        self._state.turns.put_nowait(
            QueuedTurn(
                request,
                pending.requester,
                self._state.generation,
                None,
                self._write_behind(record),
                continuation=True,
            )
        )

    def _interrupted(self, queued: QueuedTurn) -> Interrupted:
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
                self._state.turns.put_nowait(self._recovery_turn(recovered))

    def _recovery_turn(self, recovered: Recovered) -> QueuedTurn:
        """The queued turn that carries out a recovery plan."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return QueuedTurn(
            recovered.request,
            "",
            self._state.generation,
            recovered.anchor,
            done,
            continuation=recovered.continuation,
            recovery=recovered,
        )

    async def stash(self, data: Any) -> None:
        """See `Agent.stash`."""
        if self._state.active is None:
            raise RuntimeError("stash() needs a running turn")
        request_id = self._state.active.request_id
        self._state.stashes[request_id] = data

        async def keep(tx: FencedTransaction) -> None:
            await tx.update_turn(request_id, stash={"data": data})

        await self._write(keep)

    async def checkpoint(self, *, timeout: float = 5.0) -> None:
        """Hand the conversation over: stop without ending the running turn, so the next owner
        continues it from the event log (and runs the queued ones)."""
        self._state.checkpointing = True
        self._state.stopping = True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._inbox.join(), timeout)
        if self._state.active is not None:
            self._state.active.abort.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._state.idle.wait(), timeout)
        await self._writes.settled()
        await self.emit.flush()

    async def persist_messages(self, messages: list[UIMessage]) -> None:
        """See `Agent.persist_messages`."""
        _, change = self.transcript.persist(messages)
        if change:
            await self._write(change.apply)
        self.agent.messages = self.transcript.messages
        self.emit.messages(self.transcript.messages)

    async def save_messages(
        self, messages: MessagesOrUpdate, *, body: JSONDict | None
    ) -> TurnResult:
        """See `Agent.save_messages`."""
        request = ChatRequest(
            request_id=new_request_id(),
            messages=[],
            trigger="submit-message",
            body=body if body is not None else self._state.last_body,
            client_tools=self._state.last_client_tools,
        )
        done: asyncio.Future[TurnResult] = asyncio.get_running_loop().create_future()

        def prepare(queued: QueuedTurn) -> None:
            current = self.transcript.messages
            wanted = messages(list(current)) if callable(messages) else messages
            _, change = self.transcript.persist(wanted)

            queued.anchor = self.transcript.messages[-1]["id"] if self.transcript.messages else None
            snapshot = turn_snapshot(request, queued.anchor, self.emit.branch)

            async def record(tx: FencedTransaction) -> None:
                await tx.begin_turn(
                    request.request_id, kind="programmatic", owner=self.shard_id, request=snapshot
                )
                await change.apply(tx)

            queued.accepted = self._write_behind(record)
            self.agent.messages = self.transcript.messages
            self.emit.messages(self.transcript.messages)

        resolved: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        resolved.set_result(None)
        self._state.turns.put_nowait(
            QueuedTurn(
                request, "", self._state.generation, None, resolved, done=done, prepare=prepare
            )
        )
        return await done

    async def continue_last_turn(self, *, body: JSONDict | None) -> TurnResult:
        """See `Agent.continue_last_turn`."""
        messages = self.transcript.messages
        if not messages or messages[-1].get("role") != "assistant":
            return TurnResult("", "skipped")
        request = ChatRequest(
            request_id=new_request_id(),
            messages=[],
            trigger="submit-message",
            body=body if body is not None else self._state.last_body,
            client_tools=self._state.last_client_tools,
        )
        done: asyncio.Future[TurnResult] = asyncio.get_running_loop().create_future()

        async def record(tx: FencedTransaction) -> None:
            await tx.begin_turn(
                request.request_id,
                kind="continuation",
                owner=self.shard_id,
                request={"body": request.body, "continuation": True, "branch": self.emit.branch},
            )

        self._state.turns.put_nowait(
            QueuedTurn(
                request,
                "",
                self._state.generation,
                None,
                self._write_behind(record),
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
                self._state.active is None
                and self._state.turns.empty()
                and self._state.continuation is None
                and not self.has_pending_interaction()
            )
            if settled:
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.05)

    def has_pending_interaction(self) -> bool:
        """See `Agent.has_pending_interaction`."""
        if self._state.inflight is not None and pending_interaction(
            self._state.inflight.get("parts") or []
        ):
            return True
        return any(
            pending_interaction(m.get("parts") or [])
            for m in self.transcript.messages
            if m.get("role") == "assistant"
        )

    def abort_request(self, request_id: str) -> bool:
        """See `Agent.abort_request`."""
        if self._state.active is not None and self._state.active.request_id == request_id:
            self._state.active.abort.set()
            return True
        return False

    def abort_all_requests(self) -> None:
        """See `Agent.abort_all_requests`."""
        if self._state.active is not None:
            self._state.active.abort.set()

    async def reset_turn_state(self) -> None:
        """See `Agent.reset_turn_state`. The aborted reply is stored, as after a cancel."""
        self.abort_all_requests()
        while not self._state.turns.empty():
            await self._skip(self._state.turns.get_nowait())
        self._drop_continuation()

    def _drop_continuation(self) -> None:
        """Forget a scheduled continuation, ending the pending state it announced."""
        pending, self._state.continuation = self._state.continuation, None
        if pending is None:
            return
        if pending.timer is not None:
            pending.timer.cancel()
        if self._state.active is None and self._state.turns.empty():
            self.emit.idle(pending.request_id)

    def _remember(self, request_id: str) -> None:
        self._recent[request_id] = None
        if len(self._recent) > RECENT_REQUESTS:
            del self._recent[next(iter(self._recent))]

    async def _answer_repeat(self, requester: str, request: ChatRequest) -> None:
        """A request id seen before (a retry): it never runs twice; a finished one is told its
        outcome again so the retrying client can settle."""
        log.info("request %s already accepted; not running it again", request.request_id)
        record = await self.store.get_turn(self.conversation_id, request.request_id)
        if record is None or record.status in ("accepted", "running"):
            return
        self.emit.terminal(
            request.request_id,
            outcome=None if record.status == "completed" else record.status,
            message_ids=request.user_message_ids,
            continuation=False,
            streamed=False,
            target=only(requester),
            change_state=False,
        )

    async def _clear(self, connection_id: str) -> None:
        self._state.generation += 1
        if self._state.active is not None:
            self._state.active.abort.set()
        while not self._state.turns.empty():
            skipped = self._state.turns.get_nowait()
            await self._skip(skipped)
        self._drop_continuation()
        await self._write(self.transcript.clear().apply)
        self.agent.messages = []
        self.emit.clear(exclude=connection_id)
        if self.on_cleared is not None:
            self.on_cleared()
        self._event(EventType.MESSAGE_CLEAR, {})

    async def _skip(self, queued: QueuedTurn) -> None:
        request_id = queued.request.request_id

        async def settle(tx: FencedTransaction) -> None:
            await tx.update_turn(request_id, status="skipped")

        self._write_behind(settle)
        if queued.done is not None and not queued.done.done():
            queued.done.set_result(TurnResult(request_id, "skipped"))
        self.emit.terminal(
            queued.request.request_id,
            outcome="skipped",
            message_ids=queued.request.user_message_ids,
            continuation=False,
            streamed=False,
            target=only(queued.requester),
            # While another turn streams, the stream state stays that turn's.
            change_state=self._state.active is None,
        )

    async def _turn_loop(self) -> None:
        while True:
            queued = await self._state.turns.get()
            if queued.generation != self._state.generation:
                await self._skip(queued)
                continue
            if self._state.stopping:
                if not self._state.checkpointing:
                    await self._skip(queued)
                continue
            if queued.debounce_until is not None:
                await asyncio.sleep(max(0.0, queued.debounce_until - time.monotonic()))
            if self._concurrency.supersedes and 0 < queued.seq < self._state.submits:
                # A newer send came in meanwhile; it answers everything (`latest` and kin).
                await self._skip(queued)
                continue
            if queued.generation != self._state.generation:
                await self._skip(queued)
                continue
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
                    # turns queued behind it.
                    await self.emit.flush()
                    plan = await self._planner.plan(self._interrupted(queued))
                    if plan is None:
                        break
                    queued = self._recovery_turn(plan)
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
                self._spawn(self._respond(result))

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _respond(self, result: TurnResult) -> None:
        try:
            await self.agent.on_chat_response(result)
        except Exception:
            log.exception("on_chat_response failed for %s", result.request_id)

    def _event(self, kind: str, payload: JSONDict) -> None:
        emit_event(
            kind, agent=self.key.agent, name=self.key.name, tenant=self.key.tenant, payload=payload
        )
