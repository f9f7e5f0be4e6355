"""What every part of a conversation's actor works with: the conversation's identity, its
collaborators (agent, transcript, emitter, write chain) and its shared state."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

from durachat.agent import Agent
from durachat.observability import emit as emit_event
from durachat.types import JSONDict
from durachat_infra.store import ConversationKey, FencedTransaction
from durachat_shard.actor.state import ActorState
from durachat_shard.actor.writes import WriteChain
from durachat_shard.emitter import Emitter
from durachat_shard.transcript import Transcript


@dataclass(eq=False)
class ActorContext:
    """One conversation (on one branch) as the actor's parts see it."""

    conversation_id: int
    key: ConversationKey
    shard_id: str
    agent: Agent
    transcript: Transcript
    emit: Emitter
    writes: WriteChain[FencedTransaction]
    state: ActorState
    _background: set[asyncio.Task[None]] = field(default_factory=set)

    def sync_agent(self) -> None:
        """Give the agent the transcript as it is now (`Agent.messages`).

        The only place the agent's view is refreshed: after each change the actor has made
        durable or queued, never in the middle of one.
        """
        self.agent.messages = self.transcript.messages

    def event(self, kind: str, payload: JSONDict) -> None:
        """Publish an observability event of this conversation (docs/operations.md#events)."""
        emit_event(
            kind, agent=self.key.agent, name=self.key.name, tenant=self.key.tenant, payload=payload
        )

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        """Run `work` in the background (kept referenced until it is done)."""
        task = asyncio.create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
