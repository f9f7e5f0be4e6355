"""Edits and regenerates fork a branch (docs/branching.md#edit-and-regenerate-fork-a-branch):
a chat request whose transcript leaves this branch's path is answered on a new branch forked
where it leaves, and its sender's connection moves there."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Protocol

from durachat.observability import EventType
from durachat.types import JSONDict
from durachat_infra.store import FencedError
from durachat_shard.actor.context import ActorContext
from durachat_shard.actor.state import RECENT_REQUESTS
from durachat_shard.requests import ChatRequest, FrameError
from durachat_shard.transcript import Fork

log = logging.getLogger(__name__)

FORK_ERROR = "The new branch could not be created. Please try again."

FORK_CANCEL_WAIT = 10.0
"""Seconds an edit or regenerate waits for the reply it cancels to end before forking."""


class BranchActor(Protocol):
    """The actor of another branch of the conversation, as a fork hands it frames."""

    def submit(self, connection_id: str, frame: JSONDict) -> Awaitable[None]: ...


OpenBranch = Callable[[str], Awaitable[BranchActor]]
"""The actor of another branch of this conversation (by id), activating it."""


class Forks:
    """Forks branches for requests that leave the path, and remembers where each went."""

    def __init__(self, ctx: ActorContext) -> None:
        self._ctx = ctx
        self.open_branch: OpenBranch | None = None
        """Where an edit or a regenerate is answered (set by the shard; None: no forks)."""
        self._forked: dict[str, Fork] = {}
        """Requests answered on a branch forked for them, by request id (with the branch id)."""

    def of(self, request_id: object) -> Fork | None:
        """The fork a request was answered on, if it was."""
        return self._forked.get(request_id) if isinstance(request_id, str) else None

    async def fork(self, requester: str, request: ChatRequest, frame: JSONDict, fork: Fork) -> None:
        """Answer an edit or a regenerate on a new branch forked where its transcript leaves
        this path; its sender views that branch from then on. Nothing here changes: a reply
        streaming here is cancelled first and its partial kept (the client left it behind)."""
        if self.open_branch is None:
            raise FrameError("branching_unavailable", "this conversation cannot fork branches")
        ctx = self._ctx
        messages = ctx.transcript.messages
        below = messages[fork.at - 1]["id"] if fork.at else None
        cancelled = ctx.state.abort_active()
        if cancelled is not None:
            ctx.event(EventType.MESSAGE_CANCEL, {"requestId": cancelled})
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(ctx.state.idle.wait(), FORK_CANCEL_WAIT)
        name = f"{fork.kind}-{uuid.uuid4().hex[:8]}"
        try:
            record = await ctx.writes.run(
                lambda tx: tx.create_branch(
                    name,
                    from_branch=ctx.transcript.branch,
                    fork_message_id=below,
                    at_root=below is None,
                )
            )
            actor = await self.open_branch(str(record.id))
        except FencedError:
            raise
        except Exception as exc:
            log.warning("conversation %s: could not fork: %r", ctx.conversation_id, exc)
            raise FrameError("fork_failed", FORK_ERROR) from exc
        branch = str(record.id)
        self._forked[request.request_id] = replace(fork, branch=branch)
        if len(self._forked) > RECENT_REQUESTS:
            del self._forked[next(iter(self._forked))]
        # In the log before anything the new branch sends: the gateway moves the sender first.
        ctx.emit.view(branch, reason=fork.kind, connection_id=requester)
        ctx.event(
            EventType.TRANSCRIPT_FORKED,
            {"requestId": request.request_id, "branch": record.to_json(), "kind": fork.kind},
        )
        await actor.submit(requester, frame)

    async def follow(self, requester: str, forked: Fork, frame: JSONDict) -> None:
        """A retry of a request that forked: its sender goes where the request is answered."""
        self._ctx.emit.view(forked.branch, reason=forked.kind, connection_id=requester)
        await self.pass_on(forked.branch, requester, frame)

    async def pass_on(self, branch: str, connection_id: str, frame: JSONDict) -> None:
        """Hand a frame to the actor of another branch (a request that forked, its retry or
        cancel)."""
        if self.open_branch is None:
            return
        actor = await self.open_branch(branch)
        await actor.submit(connection_id, frame)
