"""Edits and regenerates keep the viewer where it is (docs/branching.md#edit-and-regenerate):
a chat request whose transcript leaves this branch's path is answered on this same branch,
after the path it replaces has been kept as a new branch. The branch rewinds to where the
request leaves it, so a client that never names a branch sees what the reference shows, and
nothing is deleted."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid

from durachat.observability import EventType
from durachat_infra.store import BranchRecord, FencedError, FencedTransaction
from durachat_shard.actor.context import ActorContext
from durachat_shard.requests import ChatRequest, FrameError
from durachat_shard.transcript import Fork

log = logging.getLogger(__name__)

FORK_ERROR = "The replaced messages could not be kept. Please try again."

FORK_CANCEL_WAIT = 10.0
"""Seconds an edit or regenerate waits for the reply it cancels to end before rewinding."""


class Forks:
    """Keeps the path an edit or a regenerate replaces as a branch, and rewinds this one."""

    def __init__(self, ctx: ActorContext) -> None:
        self._ctx = ctx

    async def rewind(self, request: ChatRequest, fork: Fork) -> None:
        """Make room on this branch for an edit or a regenerate: a reply streaming here is
        cancelled first and its partial stored, then the messages from where the request's
        transcript leaves the path down to the leaf are kept as a new branch (forked from this
        one), and this branch's leaf moves back to where the request leaves it. The request
        then runs here like any other."""
        ctx = self._ctx
        cancelled = ctx.state.abort_active()
        if cancelled is not None:
            ctx.event(EventType.MESSAGE_CANCEL, {"requestId": cancelled})
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(ctx.state.idle.wait(), FORK_CANCEL_WAIT)
        transcript = ctx.transcript
        at = min(fork.at, len(transcript.messages))
        if at == len(transcript.messages):
            return  # the reply it replaces was never stored (cancelled before its first part)
        messages = transcript.messages
        below = messages[at - 1]["id"] if at else None
        name = f"{fork.kind}-{uuid.uuid4().hex[:8]}"
        change = transcript.rewind(at)

        async def keep_and_rewind(tx: FencedTransaction) -> BranchRecord:
            # The leaf in SQL is the old one: every write queued before this one has run.
            record = await tx.create_branch(
                name,
                from_branch=transcript.branch,
                fork_message_id=below,
                at_root=below is None,
                keep_leaf=True,
            )
            await change.apply(tx)
            return record

        try:
            kept = await ctx.writes.run(keep_and_rewind)
        except FencedError:
            raise
        except Exception as exc:
            log.warning("conversation %s: could not rewind: %r", ctx.conversation_id, exc)
            raise FrameError("fork_failed", FORK_ERROR) from exc
        transcript.cut(at)
        ctx.sync_agent()
        ctx.event(
            EventType.TRANSCRIPT_FORKED,
            {"requestId": request.request_id, "kind": fork.kind, "branch": kept.to_json()},
        )
