"""Handling a client frame (docs/architecture.md#the-path-of-a-chat-request, accept): chat
requests are accepted (edits and regenerates after a rewind), refused or answered as repeats;
transcripts, clears, cancels and tool answers are applied. One frame at a time, in arrival
order (the actor's input loop).
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Awaitable, Callable

from durachat.observability import EventType
from durachat.protocol import MAIN_BRANCH, MessageType, chat_messages_frame
from durachat.protocol.server_frames import error_frame, invalid_request_frames
from durachat.types import JSONDict, UIMessage
from durachat_infra.eventlog import only
from durachat_infra.store import FencedTransaction, Store
from durachat_shard.actor.context import ActorContext
from durachat_shard.actor.forks import Forks
from durachat_shard.actor.queue import TurnQueue
from durachat_shard.actor.state import RECENT_REQUESTS, QueuedTurn
from durachat_shard.actor.tool_answers import ToolAnswers
from durachat_shard.concurrency import Concurrency, merge_user_messages
from durachat_shard.recovery import turn_snapshot
from durachat_shard.requests import (
    ChatRequest,
    FrameError,
    check_limits,
    parse_chat_request,
    parse_messages,
)
from durachat_shard.tracing import current_span_context
from durachat_shard.transcript import Change, Reconciled

log = logging.getLogger(__name__)


class _DuplicateRequestError(Exception):
    """The database already holds a turn with this request id."""


class Admission:
    """Decides what each client frame does to the conversation."""

    def __init__(
        self,
        ctx: ActorContext,
        *,
        queue: TurnQueue,
        forks: Forks,
        tools: ToolAnswers,
        store: Store,
        concurrency: Concurrency,
        recent_requests: list[str],
    ) -> None:
        self._ctx = ctx
        self._state = ctx.state
        self._queue = queue
        self._forks = forks
        self._tools = tools
        self._store = store
        self._concurrency = concurrency
        self._merge_from: int | None = None
        """Where the run of user messages sent while busy starts (the `merge` strategy)."""
        # Request ids already accepted, newest last: a retried request is recognised without a
        # database round trip (loaded from the turns table on activation).
        self._recent: dict[str, None] = dict.fromkeys(reversed(recent_requests))
        self.on_cleared: Callable[[], None] | None = None
        """Told when the conversation was cleared (on main: every other branch is gone)."""

    async def handle(self, connection_id: str, frame: JSONDict) -> None:
        """Handle one frame (a JSON object with a string `type`); raises `FrameError` for a
        frame that cannot be handled (see `reject`)."""
        check_limits(frame)
        kind = frame.get("type")
        if kind == MessageType.USE_CHAT_REQUEST.value:
            init = frame.get("init")
            if isinstance(init, dict) and init.get("method", "POST") != "POST":
                return
            request = parse_chat_request(frame)
            request.messages = self._known_system(request.messages)
            await self._accept(connection_id, request, frame)
        elif kind == MessageType.CHAT_MESSAGES.value:
            await self._sync_transcript(connection_id, self._known_system(parse_messages(frame)))
        elif kind == MessageType.CHAT_CLEAR.value:
            await self._clear(connection_id)
        elif kind == MessageType.TOOL_RESULT.value:
            await self._tools.result(connection_id, frame)
        elif kind == MessageType.TOOL_APPROVAL.value:
            await self._tools.approval(connection_id, frame)
        elif kind == MessageType.CHAT_REQUEST_CANCEL.value:
            await self._cancel(connection_id, frame)
        else:
            raise FrameError("unsupported_frame", f"frame type {kind!r} is not supported")

    def _known_system(self, messages: list[UIMessage]) -> list[UIMessage]:
        """A client's messages with each system message replaced by the stored one of the same
        id; a system message the server did not store is refused (docs/security.md#bad-input):
        system messages carry the agent's instructions, not the user's."""
        if not any(m.get("role") == "system" for m in messages):
            return messages
        stored = {
            m.get("id"): m for m in self._ctx.transcript.messages if m.get("role") == "system"
        }
        checked: list[UIMessage] = []
        for message in messages:
            if message.get("role") != "system":
                checked.append(message)
                continue
            known = stored.get(message.get("id"))
            if known is None:
                raise FrameError("invalid_messages", "a client cannot add system messages")
            checked.append(known)
        return checked

    def reject(self, connection_id: str, frame: JSONDict, exc: FrameError) -> None:
        """Tell the sender its frame was refused (a chat request also gets its terminal
        frame, so the client settles)."""
        emit = self._ctx.emit
        request_id = frame.get("id")
        if frame.get("type") == MessageType.USE_CHAT_REQUEST.value and isinstance(request_id, str):
            for answer in invalid_request_frames(request_id, exc.message):
                emit.to(connection_id, answer)
        emit.to(connection_id, error_frame(exc.code, exc.message))

    async def _accept(self, requester: str, request: ChatRequest, frame: JSONDict) -> None:
        ctx, state = self._ctx, self._state
        if request.request_id in self._recent:
            await self._answer_repeat(requester, request)
            return
        incoming = ctx.transcript.reconcile(request.messages)
        inflight = state.inflight if state.active is not None else None
        fork = ctx.transcript.fork_of(incoming, inflight=inflight)
        if fork is not None:
            # An edit or a regenerate: the replaced path is kept as a branch and this one
            # rewinds, so the request runs here like any other.
            await self._forks.rewind(request, fork)
            incoming = ctx.transcript.reconcile(request.messages)
        self._remember(request.request_id)
        state.last_body = request.body
        state.last_client_tools = request.client_tools
        overlapping = state.turn_pending
        submit = request.trigger == "submit-message"
        if overlapping and submit and self._concurrency.strategy == "drop":
            self._drop(requester, request)
            return
        merged, change, collapsed = self._persist(request, incoming, overlapping, submit)
        messages = ctx.transcript.messages
        anchor = messages[-1]["id"] if messages else None
        # The turn starts at once; the database catches up behind it.
        accepted = ctx.writes.behind(self._record(request, anchor, change))
        ctx.sync_agent()
        if collapsed:
            # The sender's own messages changed too: everyone gets the merged transcript.
            ctx.emit.messages(ctx.transcript.messages)
        else:
            ctx.emit.messages(merged, exclude=requester)
        ctx.event(EventType.MESSAGE_REQUEST, {"requestId": request.request_id})
        queued = QueuedTurn(request, requester, state.generation, anchor, accepted)
        queued.trace = current_span_context()
        if submit:
            state.submits += 1
            queued.seq = state.submits
            if overlapping and self._concurrency.strategy == "debounce":
                queued.debounce_until = time.monotonic() + self._concurrency.debounce_ms / 1000
        self._queue.put(queued)

    def _persist(
        self, request: ChatRequest, incoming: Reconciled, overlapping: bool, submit: bool
    ) -> tuple[list[UIMessage], Change, bool]:
        """Put an accepted request's messages in the transcript, as its concurrency strategy
        says; returns the reconciled list, the change, and whether sends were merged."""
        merging = submit and self._concurrency.strategy == "merge"
        if not overlapping:
            # While a turn streams, its stream stays the one clients resume; a queued turn
            # announces itself when it starts streaming.
            self._ctx.emit.pending(request.request_id)
            self._merge_from = None
        elif merging and self._merge_from is None:
            self._merge_from = len(self._ctx.transcript.messages)
        merged, change = self._ctx.transcript.persist(incoming)
        collapsed = False
        if overlapping and merging:
            tail = self._merge_tail()
            collapsed = bool(tail)
            change.ops.extend(tail.ops)
        return merged, change, collapsed

    def _record(
        self, request: ChatRequest, anchor: str | None, change: Change
    ) -> Callable[[FencedTransaction], Awaitable[None]]:
        """The write of an accepted request: one transaction records the turn (idempotent by
        request id), the request context and its messages."""
        snapshot = turn_snapshot(request, anchor, self._ctx.emit.branch)
        shard_id = self._ctx.shard_id

        async def record(tx: FencedTransaction) -> None:
            fresh = await tx.begin_turn(
                request.request_id,
                kind="regenerate" if request.trigger == "regenerate-message" else "submit",
                owner=shard_id,
                request=snapshot,
            )
            if not fresh:
                raise _DuplicateRequestError(request.request_id)
            await tx.save_request_context(request.body, request.client_tools)
            await change.apply(tx)

        return record

    def _merge_tail(self) -> Change:
        """Collapse the user messages sent while busy into one (the `merge` strategy)."""
        messages = self._ctx.transcript.messages
        start = self._merge_from if self._merge_from is not None else len(messages)
        run = messages[start:]
        if len(run) < 2 or any(m.get("role") != "user" for m in run):
            return Change(MAIN_BRANCH)
        return self._ctx.transcript.replace_tail(len(run), merge_user_messages(run))

    def _drop(self, requester: str, request: ChatRequest) -> None:
        """Refuse an overlapping send (the `drop` strategy): nothing is stored; the sender gets
        the server's transcript back, the reply in progress included."""
        rollback = list(self._ctx.transcript.messages)
        if self._state.inflight is not None:
            rollback.append(copy.deepcopy(self._state.inflight))
        emit = self._ctx.emit
        emit.to(requester, chat_messages_frame(rollback))
        emit.terminal(
            request.request_id,
            outcome="skipped",
            message_ids=request.user_message_ids,
            continuation=False,
            streamed=False,
            target=only(requester),
            change_state=False,
        )

    def _remember(self, request_id: str) -> None:
        self._recent[request_id] = None
        if len(self._recent) > RECENT_REQUESTS:
            del self._recent[next(iter(self._recent))]

    async def _answer_repeat(self, requester: str, request: ChatRequest) -> None:
        """A request id seen before (a retry): it never runs twice; a finished one is told its
        outcome again so the retrying client can settle."""
        log.info("request %s already accepted; not running it again", request.request_id)
        record = await self._store.get_turn(self._ctx.conversation_id, request.request_id)
        if record is None or record.status in ("accepted", "running"):
            return
        self._ctx.emit.terminal(
            request.request_id,
            outcome=None if record.status == "completed" else record.status,
            message_ids=request.user_message_ids,
            continuation=False,
            streamed=False,
            target=only(requester),
            change_state=False,
        )

    async def _sync_transcript(self, connection_id: str, incoming: list[UIMessage]) -> None:
        """A client's `cf_agent_chat_messages`: its transcript is merged into this one."""
        ctx = self._ctx
        merged, change = ctx.transcript.persist(incoming)
        if change:
            await ctx.writes.write(change.apply)
        ctx.sync_agent()
        ctx.emit.messages(merged, exclude=connection_id)

    async def _clear(self, connection_id: str) -> None:
        """`cf_agent_chat_clear`: the running turn is aborted, queued ones skipped, the
        transcript emptied (on main: the whole conversation, every branch)."""
        ctx = self._ctx
        self._state.generation += 1
        self._state.abort_active()
        await self._queue.skip_all()
        self._queue.drop_continuation()
        await ctx.writes.write(ctx.transcript.clear().apply)
        ctx.sync_agent()
        ctx.emit.clear(exclude=connection_id)
        if self.on_cleared is not None:
            self.on_cleared()
        ctx.event(EventType.MESSAGE_CLEAR, {})

    async def _cancel(self, connection_id: str, frame: JSONDict) -> None:
        """`cf_agent_chat_request_cancel`: abort the request if it is the running turn."""
        request_id = frame.get("id")
        active = self._state.active
        if active is not None and active.request_id == request_id:
            active.abort.set()
            self._ctx.event(EventType.MESSAGE_CANCEL, {"requestId": request_id})
