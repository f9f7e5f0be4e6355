"""The ways recovery ends an interrupted turn without running it again (docs/recovery.md): its
reply was complete in the log, there is nothing left to answer, it waits for a human, the agent
declined, or the budget is spent. Each settles the turn in SQL and closes its stream."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from durachat.agent import Agent
from durachat.observability import emit as emit_event
from durachat.recovery import ExhaustedContext, RecoveryContext, SealReason
from durachat_infra.store import ConversationKey, FencedTransaction, TurnStatus
from durachat_shard.emitter import Emitter
from durachat_shard.recovery.incidents import (
    Incident,
    Incidents,
    end_recovery_span,
    on_recovery_span,
)
from durachat_shard.transcript import Transcript

log = logging.getLogger(__name__)

Write = Callable[[FencedTransaction], Awaitable[None]]


class RecoveryWrites(Protocol):
    """The conversation's write chain, as recovery uses it."""

    async def write(self, work: Write) -> None: ...


def chain(*writes: Write | None) -> Write:
    """One write doing `writes` in order, in the same transaction (None entries skipped)."""

    async def run(tx: FencedTransaction) -> None:
        for write in writes:
            if write is not None:
                await write(tx)

    return run


class RecoveryEndings:
    """Ends interrupted turns of one conversation (on one branch) where recovery stops.

    `store_partial` arguments are the writes that store a partial reply the caller has put in
    the transcript already (None: nothing to store).
    """

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
    ) -> None:
        self._key = key
        self._shard_id = shard_id
        self._agent = agent
        self._transcript = transcript
        self._emit = emit
        self._writes = writes
        self._incidents = incidents
        self._sync_agent = sync_agent

    async def complete(
        self,
        request_id: str,
        store_partial: Write | None,
        *,
        message_ids: list[str] | None,
        continuation: bool,
    ) -> None:
        """The reply was complete in the log; only storing it was lost: store it and close
        the turn, no model call."""
        await self._writes.write(chain(store_partial, self._settle(request_id, "completed")))
        self._sync_agent()
        self._emit.messages(self._transcript.messages)
        self._emit.terminal(
            request_id,
            outcome=None,
            message_ids=message_ids,
            continuation=continuation,
            streamed=True,
        )

    async def skip(
        self, request_id: str, *, message_ids: list[str] | None, continuation: bool
    ) -> None:
        """Nothing was streamed and the message it answered is gone or answered already."""
        await self._writes.write(self._settle(request_id, "skipped"))
        self._emit.terminal(
            request_id,
            outcome="skipped",
            message_ids=message_ids,
            continuation=continuation,
            streamed=False,
        )

    async def park(
        self,
        request_id: str,
        store_partial: Write | None,
        incident: Incident,
        *,
        message_ids: list[str] | None,
        continuation: bool,
    ) -> None:
        """Waiting for a human is not a failure: the partial is stored, the turn ends where it
        stands, and the client's answer continues it."""
        await self._writes.write(
            chain(
                store_partial,
                self._settle(request_id, "completed"),
                self._incidents.record(incident, "skipped", "awaiting_client_interaction"),
            )
        )
        self._incidents.event("chat:recovery:skipped", incident, "awaiting_client_interaction")
        self._emit.terminal(
            request_id,
            outcome=None,
            message_ids=message_ids,
            continuation=continuation,
            streamed=True,
        )

    async def decline(
        self,
        request_id: str,
        store_partial: Write | None,
        incident: Incident,
        *,
        message_ids: list[str] | None,
        continuation: bool,
    ) -> None:
        """The agent said not to continue: the turn ends as aborted."""
        await self._writes.write(
            chain(
                store_partial,
                self._settle(request_id, "aborted"),
                self._incidents.record(incident, "skipped", "continue_disabled"),
            )
        )
        self._incidents.event("chat:recovery:skipped", incident, "continue_disabled")
        self._emit.terminal(
            request_id,
            outcome="aborted",
            message_ids=message_ids,
            continuation=continuation,
            streamed=True,
        )

    async def exhaust(
        self,
        incident: Incident,
        ctx: RecoveryContext,
        reason: SealReason,
        store_partial: Write | None,
        *,
        continuation: bool,
    ) -> None:
        """Give up on an incident: tell the agent, store the partial, end the turn with the
        terminal message and record it for clients that reconnect later."""
        text = self._agent.chat_recovery.terminal_message
        self._publish_exhausted(incident, ctx, reason, text)
        try:
            await self._agent.on_exhausted(_exhausted_context(ctx, reason, text))
        except Exception:
            log.exception("on_exhausted failed")
        await self._writes.write(
            chain(
                store_partial,
                self._settle(ctx.request_id, "error", text),
                self._incidents.record(incident, "exhausted", reason),
            )
        )
        self._sync_agent()
        if store_partial is not None:
            self._emit.messages(self._transcript.messages)
        self._emit.recovering(ctx.recovery_root_request_id, active=False)
        self._emit.terminal_error(ctx.request_id, text, continuation=continuation)

    def _publish_exhausted(
        self, incident: Incident, ctx: RecoveryContext, reason: SealReason, text: str
    ) -> None:
        with on_recovery_span(incident):
            self._emit_exhausted(incident, ctx, reason, text)
        end_recovery_span(incident, "chat:recovery:exhausted")

    def _emit_exhausted(
        self, incident: Incident, ctx: RecoveryContext, reason: SealReason, text: str
    ) -> None:
        emit_event(
            "chat:recovery:exhausted",
            agent=self._key.agent,
            name=self._key.name,
            tenant=self._key.tenant,
            payload={
                **incident.payload(reason),
                "recoveryRootRequestId": ctx.recovery_root_request_id,
                "streamId": ctx.stream_id,
                "createdAt": ctx.created_at,
                "partialText": ctx.partial_text,
                "terminalMessage": text,
            },
        )

    def _settle(self, request_id: str, status: TurnStatus, error: str | None = None) -> Write:
        """The write that settles the turn's record (this shard its owner)."""

        async def settle(tx: FencedTransaction) -> None:
            await tx.update_turn(request_id, status=status, error=error, owner=self._shard_id)

        return settle


def _exhausted_context(ctx: RecoveryContext, reason: SealReason, text: str) -> ExhaustedContext:
    return ExhaustedContext(
        incident_id=ctx.incident_id,
        request_id=ctx.request_id,
        recovery_root_request_id=ctx.recovery_root_request_id,
        attempt=ctx.attempt,
        max_attempts=ctx.max_attempts,
        recovery_kind=ctx.recovery_kind,
        stream_id=ctx.stream_id,
        created_at=ctx.created_at,
        partial_text=ctx.partial_text,
        partial_parts=ctx.partial_parts,
        reason=reason,
        terminal_message=text,
    )
