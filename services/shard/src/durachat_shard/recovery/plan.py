"""Deciding what happens to an interrupted turn (docs/recovery.md#how-it-works).

`RecoveryPlanner.plan` rebuilds the partial reply from the event log, classifies the turn
(`retry` or `continue`), counts the attempt against the incident's budget, asks the agent, and
then either ends the turn here (its reply was complete, it waits for a human, the budget is
spent, the agent declined) or stores the partial and returns the plan of the turn that
continues it. The actor queues that turn ahead of everything else; once it has run, the runner
closes the incident through `settle` and `finished`.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from durachat.agent import Agent
from durachat.messages import ReplyAssembler, new_assistant_id
from durachat.recovery import (
    Evaluation,
    RecoveryContext,
    RecoveryKind,
    RecoveryOptions,
    SealReason,
    has_settled_tool_results,
    incident_id,
    partial_text,
)
from durachat.tools import pending_client_interaction
from durachat.types import JSONDict, UIMessage
from durachat_infra.eventlog import LogEntry, StreamState
from durachat_infra.store import ConversationKey, FencedTransaction, TurnStatus
from durachat_shard.emitter import Emitter
from durachat_shard.recovery.endings import RecoveryEndings, RecoveryWrites, Write, chain
from durachat_shard.recovery.incidents import Incident, Incidents, IncidentWriter
from durachat_shard.recovery.stream import RebuiltStream, Splice, rebuild_stream
from durachat_shard.recovery.turns import Interrupted, Recovered
from durachat_shard.requests import ChatRequest, client_tool_names
from durachat_shard.tracing import parse_traceparent
from durachat_shard.transcript import Transcript

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Found:
    """What the event log holds of an interrupted turn."""

    rebuilt: RebuiltStream
    continuation: bool
    assembler: ReplyAssembler | None
    partial: UIMessage | None
    message_ids: list[str] | None
    """The `messageIds` of its frames (None for a continuation)."""

    @property
    def parts(self) -> list[JSONDict]:
        return list(self.partial["parts"]) if self.partial is not None else []

    @property
    def finished(self) -> bool:
        """The whole reply reached the log; only storing it was lost."""
        return self.partial is not None and any(
            c.get("type") == "finish" for c in self.rebuilt.chunks
        )


class RecoveryPlanner:
    """Plans the recovery of one conversation's interrupted turns (on one branch)."""

    def __init__(
        self,
        *,
        key: ConversationKey,
        shard_id: str,
        agent: Agent,
        transcript: Transcript,
        emit: Emitter,
        writes: RecoveryWrites,
        incidents: Incidents,
        sync_agent: Callable[[], None],
        spawn: Callable[[Coroutine[Any, Any, None]], None],
    ) -> None:
        self._shard_id = shard_id
        self._agent = agent
        self._transcript = transcript
        self._emit = emit
        self._writes = writes
        self._incidents = incidents
        self._sync_agent = sync_agent
        self._spawn = spawn
        self._endings = RecoveryEndings(
            key=key,
            shard_id=shard_id,
            agent=agent,
            transcript=transcript,
            emit=emit,
            writes=writes,
            incidents=incidents,
            sync_agent=sync_agent,
        )

    async def plan(
        self,
        interrupted: Interrupted,
        *,
        entries: list[LogEntry] | None = None,
        state: StreamState | None = None,
    ) -> Recovered | None:
        """Decide what happens to an interrupted turn; returns the plan of the turn that
        continues (or retries) it, or None when recovery ends here (the turn is settled and its
        stream closed). `entries` and `state` are the log as read already, if it was."""
        if entries is None or state is None:
            entries = await self._emit.history()
            state = await self._emit.state()
        found = self._rebuild(interrupted, entries)
        kind = await self._classify(interrupted, found)
        if kind is None:
            return None
        user_ids = interrupted.user_message_ids
        incident, evaluation = await self._incidents.open(
            incident_id(interrupted.root, user_ids[-1] if user_ids else interrupted.anchor),
            request_id=interrupted.request_id,
            root=interrupted.root,
            kind=kind,
            progress=found.rebuilt.progress,
            interrupted=parse_traceparent(found.rebuilt.traceparent),
        )
        ctx = self._context(interrupted, found, incident, kind)
        sealed = await self._seal_reason(evaluation, ctx)
        if await self._stop_before_asking(interrupted, found, incident, ctx, sealed):
            return None
        options = await self._on_recovery(ctx)
        keep = options.persist or has_settled_tool_results(found.parts)
        # Only a partial that is kept enters the transcript (memory and SQL alike).
        store_partial = self._store_partial(found.partial) if keep else None
        if not options.continue_turn:
            await self._endings.decline(
                interrupted.request_id,
                store_partial,
                incident,
                message_ids=found.message_ids,
                continuation=found.continuation,
            )
            return None
        await self._take_over(interrupted.request_id, incident, store_partial)
        return self._recovered(
            interrupted, found, incident, kind, state=state, text_before=len(ctx.partial_text)
        )

    def settle(
        self, recovered: Recovered, outcome: TurnStatus
    ) -> Callable[[IncidentWriter], Awaitable[None]]:
        """The write that closes the incident of a recovered turn that ran to its end (made in
        the transaction that settles the turn)."""
        return self._incidents.record(
            recovered.incident, "completed" if outcome != "error" else "failed"
        )

    def finished(self, recovered: Recovered, outcome: TurnStatus, reply: UIMessage) -> None:
        """A recovered turn ran to its end: publish it, and count its text against the
        tenant's budget."""
        incident = recovered.incident
        if outcome == "error":
            self._incidents.event("chat:recovery:failed", incident)
        else:
            self._incidents.event("chat:recovery:completed", incident)
        self._emit.recovering(incident.root_request_id, active=False)
        used = len(partial_text(list(reply.get("parts") or []))) - recovered.text_before
        self._spawn(self._incidents.charge(used))

    # What the log holds.

    def _rebuild(self, interrupted: Interrupted, entries: list[LogEntry]) -> _Found:
        rebuilt = rebuild_stream(entries, interrupted.request_id)
        continuation = interrupted.continuation or rebuilt.continuation
        assembler: ReplyAssembler | None = None
        if rebuilt.stream_id:
            assembler = ReplyAssembler(self._recovery_base(rebuilt), continuation=continuation)
            for chunk in rebuilt.chunks:
                assembler.process(chunk)
        partial = assembler.message if assembler is not None and rebuilt.chunks else None
        message_ids = None if continuation else interrupted.user_message_ids
        return _Found(rebuilt, continuation, assembler, partial, message_ids)

    def _recovery_base(self, rebuilt: RebuiltStream) -> UIMessage:
        """The message an interrupted stream was building on: for a continuation, the
        assistant message as it was when the stream started; else a new one."""
        if rebuilt.continuation and rebuilt.base_id is not None:
            index = self._transcript.index_of(rebuilt.base_id)
            if index is not None:
                base = copy.deepcopy(self._transcript.messages[index])
                base["parts"] = list(base.get("parts") or [])[: rebuilt.base_parts]
                return base
            return {"id": rebuilt.base_id, "role": "assistant", "parts": []}
        return {"id": new_assistant_id(), "role": "assistant", "parts": []}

    def _unanswered(self, anchor: str | None) -> bool:
        """Whether the user message `anchor` is still in the transcript without a reply."""
        index = self._transcript.index_of(anchor) if anchor is not None else None
        if index is None:
            return False
        messages = self._transcript.messages
        if messages[index].get("role") != "user":
            return False
        return index + 1 == len(messages) or messages[index + 1].get("role") != "assistant"

    async def _classify(self, interrupted: Interrupted, found: _Found) -> RecoveryKind | None:
        """`continue` a partial reply (or a continuation), `retry` a turn that streamed nothing
        while its message is still unanswered; None when the turn is ended here instead (its
        reply was complete in the log, or there is nothing left to answer)."""
        if found.finished:
            await self._endings.complete(
                interrupted.request_id,
                self._store_partial(found.partial),
                message_ids=found.message_ids,
                continuation=found.continuation,
            )
            return None
        if found.partial is not None or found.continuation:
            return "continue"
        if self._unanswered(interrupted.anchor):
            return "retry"
        await self._endings.skip(
            interrupted.request_id, message_ids=found.message_ids, continuation=found.continuation
        )
        return None

    # The budget and the agent's say.

    def _context(
        self, interrupted: Interrupted, found: _Found, incident: Incident, kind: RecoveryKind
    ) -> RecoveryContext:
        parts = found.parts
        return RecoveryContext(
            incident_id=incident.incident_id,
            recovery_root_request_id=interrupted.root,
            request_id=interrupted.request_id,
            attempt=incident.state.attempt,
            max_attempts=self._agent.chat_recovery.max_attempts,
            recovery_kind=kind,
            stream_id=found.rebuilt.stream_id,
            partial_text=partial_text(parts),
            partial_parts=copy.deepcopy(parts),
            recovery_data=interrupted.stash,
            messages=copy.deepcopy(self._transcript.messages),
            last_body=interrupted.body,
            last_client_tools=interrupted.client_tools,
            created_at=interrupted.created_at,
        )

    async def _seal_reason(self, evaluation: Evaluation, ctx: RecoveryContext) -> SealReason | None:
        """Why the incident is sealed now, if it is: the budget, the configuration, the agent
        (asked on every attempt after the first), then the tenant's token budget."""
        sealed = evaluation.sealed
        if sealed is None and not self._agent.chat_recovery.enabled:
            sealed = "recovery_aborted"
        if sealed is None and not evaluation.first and not await self._keep_recovering(ctx):
            sealed = "recovery_aborted"
        if sealed is None and await self._incidents.tenant_budget_spent():
            sealed = "tenant_budget_exceeded"
        return sealed

    async def _stop_before_asking(
        self,
        interrupted: Interrupted,
        found: _Found,
        incident: Incident,
        ctx: RecoveryContext,
        sealed: SealReason | None,
    ) -> bool:
        """End the turn before the agent is asked, if it waits for a human (parked) or its
        incident is sealed (exhausted); returns whether it was ended."""
        waiting = client_tool_names(self._agent.tools, interrupted.client_tools)
        if found.partial is not None and pending_client_interaction(found.parts, waiting):
            await self._endings.park(
                interrupted.request_id,
                self._store_partial(found.partial),
                incident,
                message_ids=found.message_ids,
                continuation=found.continuation,
            )
            return True
        if sealed is not None:
            store_partial = self._store_partial(found.partial)
            await self._endings.exhaust(
                incident, ctx, sealed, store_partial, continuation=found.continuation
            )
            return True
        return False

    async def _keep_recovering(self, ctx: RecoveryContext) -> bool:
        try:
            return bool(await self._agent.should_keep_recovering(ctx))
        except Exception:
            log.exception("should_keep_recovering failed; recovering anyway")
            return True

    async def _on_recovery(self, ctx: RecoveryContext) -> RecoveryOptions:
        try:
            return await self._agent.on_chat_recovery(ctx)
        except Exception:
            log.exception("on_chat_recovery failed; using the defaults")
            return RecoveryOptions()

    # Where recovery goes on.

    async def _take_over(
        self, request_id: str, incident: Incident, store_partial: Write | None
    ) -> None:
        """Store the partial and make this shard the turn's owner; tell every tab."""

        async def take_over(tx: FencedTransaction) -> None:
            await tx.update_turn(request_id, owner=self._shard_id)

        await self._writes.write(
            chain(store_partial, take_over, self._incidents.record(incident, "scheduled"))
        )
        self._incidents.event("chat:recovery:scheduled", incident)
        self._emit.recovering(incident.root_request_id, active=True)
        self._sync_agent()

    def _recovered(
        self,
        interrupted: Interrupted,
        found: _Found,
        incident: Incident,
        kind: RecoveryKind,
        *,
        state: StreamState,
        text_before: int,
    ) -> Recovered:
        request = ChatRequest(
            request_id=interrupted.request_id,
            messages=[],
            trigger=interrupted.trigger,
            body=interrupted.body,
            client_tools=interrupted.client_tools,
            # Its frames carry the sends it answers, as the interrupted turn's would have.
            sent_ids=interrupted.user_message_ids,
        )
        partial = found.partial
        live = state.status == "streaming" and state.request == interrupted.request_id
        anchor = interrupted.anchor
        return Recovered(
            request=request,
            anchor=anchor if kind == "retry" or not found.continuation else None,
            continuation=found.continuation,
            incident=incident,
            assembler=found.assembler if partial is not None else None,
            splice=Splice(found.rebuilt.chunks) if partial is not None else None,
            next_seq=found.rebuilt.next_seq,
            live=live and partial is not None,
            messages=self._recovery_messages(partial, anchor),
            text_before=text_before,
        )

    def _recovery_messages(self, partial: UIMessage | None, anchor: str | None) -> list[UIMessage]:
        """The transcript a recovered turn's model sees: up to the message it answers, then
        the partial reply (which a model with assistant prefill continues)."""
        messages = list(self._transcript.messages)
        if partial is not None:
            index = self._transcript.index_of(str(partial["id"]))
            if index is not None:
                return [*messages[:index], copy.deepcopy(partial)]
        at = self._transcript.index_of(anchor) if anchor is not None else None
        head = messages if at is None else messages[: at + 1]
        return head if partial is None else [*head, copy.deepcopy(partial)]

    # Writes.

    def _store_partial(self, partial: UIMessage | None) -> Write | None:
        """Put a partial reply in the transcript; returns the write that stores it."""
        if partial is None:
            return None
        return self._transcript.put_reply(copy.deepcopy(partial), anchor=None).apply
