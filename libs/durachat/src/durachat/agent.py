"""The agent API: what an application author writes.

An agent is a class with an `on_chat_message` hook that returns a stream of UI message chunks.
durachat hosts one instance per conversation on the shard that owns it::

    class ChatAgent(durachat.Agent):
        async def on_chat_message(self, turn: durachat.Turn) -> AsyncIterator[UIChunk]:
            async for chunk in self.stream_model(turn):
                yield chunk

Agents are registered under a kebab-case name (`ChatAgent` becomes `chat-agent`), the
`{agent}` segment of `/agents/{agent}/{name}`.
"""

from __future__ import annotations

import asyncio
import importlib
import re
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Protocol

from durachat.recovery import ChatRecovery, ExhaustedContext, RecoveryContext, RecoveryOptions
from durachat.tools import Tool, ToolLedger
from durachat.types import JSONDict, UIChunk, UIMessage


def kebab_case(name: str) -> str:
    """The reference's class-name to URL-namespace rule (`ChatAgent` → `chat-agent`)."""
    if name.isupper():
        return name.lower().replace("_", "-")
    out = re.sub(r"[A-Z]", lambda m: "-" + m.group(0).lower(), name)
    return out.lstrip("-").replace("_", "-").rstrip("-")


@dataclass(slots=True)
class Turn:
    """Everything `on_chat_message` gets for one turn."""

    request_id: str
    messages: list[UIMessage]
    """The conversation's transcript, ending with the message(s) to answer."""
    body: JSONDict | None = None
    """The custom fields of the client's request body (everything but messages and trigger)."""
    abort: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when the turn is cancelled; a hook should stop producing chunks."""
    continuation: bool = False
    client_tools: list[JSONDict] | None = None
    trigger: str = "submit-message"
    ledger: ToolLedger | None = None
    """Where server tool calls are recorded so none runs twice (set by the host)."""


TurnStatusName = Literal["completed", "error", "aborted", "skipped"]


@dataclass(frozen=True, slots=True)
class TurnResult:
    """How a turn ended (what `save_messages` and `continue_last_turn` return, and what
    `on_chat_response` is told)."""

    request_id: str
    status: TurnStatusName
    error: str | None = None
    message: UIMessage | None = None
    """The assistant message the turn produced or continued, if any."""
    continuation: bool = False


MessagesOrUpdate = list[UIMessage] | Callable[[list[UIMessage]], list[UIMessage]]


class AgentHost(Protocol):
    """What the host (a shard) offers an agent; see the methods of the same names on `Agent`."""

    async def persist_messages(self, messages: list[UIMessage]) -> None: ...

    async def save_messages(
        self, messages: MessagesOrUpdate, *, body: JSONDict | None
    ) -> TurnResult: ...

    async def continue_last_turn(self, *, body: JSONDict | None) -> TurnResult: ...

    async def wait_until_stable(self, timeout: float | None) -> bool: ...

    def has_pending_interaction(self) -> bool: ...

    def abort_request(self, request_id: str) -> bool: ...

    def abort_all_requests(self) -> None: ...

    async def reset_turn_state(self) -> None: ...

    async def stash(self, data: Any) -> None: ...


class Agent:
    """Base class of chat agents.

    Subclasses override `on_chat_message`. The default implementation streams the configured
    litellm `model` over the transcript.
    """

    name_override: ClassVar[str | None] = None
    """Kebab-case name to register under; derived from the class name when None."""

    model: str = "durachat/scripted"
    """litellm model string used by `stream_model`."""

    system_prompt: str | None = None

    tools: Sequence[Tool] = ()
    """Tools the model may call (see `durachat.tools.tool`); the client's own tools join them."""

    max_steps: int = 5
    """The most model calls one reply may make (each tool round trip is one more)."""

    max_persisted_messages: int | None = None
    """Keep at most this many messages (the newest); older ones are deleted. None: all."""

    message_concurrency: str | Mapping[str, Any] = "queue"
    """What a send does while a turn is running: `queue`, `latest`, `merge`, `drop`, or
    `{"strategy": "debounce", "debounce_ms": 750}`."""

    chat_recovery: ChatRecovery = ChatRecovery()
    """How interrupted turns are recovered (budgets, terminal message); see `durachat.recovery`."""

    stream_stall_timeout: float = 0.0
    """Seconds a model stream may stay silent before the turn counts as interrupted and is
    recovered (0: never)."""

    def __init__(self, conversation: str, *, model: str | None = None) -> None:
        self.conversation = conversation
        """The conversation's name (the `{name}` URL segment)."""
        if model is not None:
            self.model = model
        self.messages: list[UIMessage] = []
        """The current transcript, kept up to date by the host."""
        self.host: AgentHost | None = None
        """The host running this conversation (set by it; the programmatic API goes there)."""

    def _host(self) -> AgentHost:
        if self.host is None:
            raise RuntimeError("this agent is not hosted: the programmatic API needs a host")
        return self.host

    async def persist_messages(self, messages: list[UIMessage]) -> None:
        """Store messages (reconciled and upserted like a client sync) and show them to every
        tab, without starting a turn."""
        await self._host().persist_messages(messages)

    async def save_messages(
        self, messages: MessagesOrUpdate, *, body: JSONDict | None = None
    ) -> TurnResult:
        """Store messages, then run a turn on them, like a send from no connection.

        `messages` is a list, or a function of the current messages returning the new list
        (resolved when the turn's place in the queue comes, so it sees every earlier turn).
        Returns once the turn has ended. Calling it from inside `on_chat_message` would wait
        for itself: start it from elsewhere (a tool, `on_chat_response`, a background task).
        """
        return await self._host().save_messages(messages, body=body)

    async def continue_last_turn(self, *, body: JSONDict | None = None) -> TurnResult:
        """Run a continuation of the last assistant message (skipped when there is none)."""
        return await self._host().continue_last_turn(body=body)

    async def wait_until_stable(self, timeout: float | None = None) -> bool:
        """Wait until no turn runs or waits and no tool interaction is pending; False on
        timeout."""
        return await self._host().wait_until_stable(timeout)

    def has_pending_interaction(self) -> bool:
        """Whether a tool call waits for a client result or a human approval."""
        return self._host().has_pending_interaction()

    def abort_request(self, request_id: str) -> bool:
        """Abort a running turn (like a client cancel); False if it is not running."""
        return self._host().abort_request(request_id)

    def abort_all_requests(self) -> None:
        """Abort the running turn, if any; queued turns still run."""
        self._host().abort_all_requests()

    async def reset_turn_state(self) -> None:
        """Abort the running turn and drop every queued one and any pending continuation."""
        await self._host().reset_turn_state()

    async def stash(self, data: Any) -> None:
        """Keep JSON `data` with the running turn; if the turn is interrupted, recovery hands
        it back as `RecoveryContext.recovery_data`."""
        await self._host().stash(data)

    async def on_chat_recovery(self, ctx: RecoveryContext) -> RecoveryOptions:
        """Decide what happens to an interrupted turn: store its partial reply, and continue
        it. The default does both: the model is asked to continue the partial reply, which
        providers with assistant prefill (and the built-in scripted model) do seamlessly.
        Override for providers without prefill, e.g. to retry from scratch or to stop."""
        return RecoveryOptions()

    async def should_keep_recovering(self, ctx: RecoveryContext) -> bool:
        """Asked before every attempt after the first; False seals the incident
        (`recovery_aborted`)."""
        return True

    async def on_exhausted(self, ctx: ExhaustedContext) -> None:
        """Called when recovery gives up, before the terminal message is sent. Errors are
        logged and ignored."""

    def sanitize_message_for_persistence(self, message: UIMessage) -> UIMessage:
        """Change a message before it is stored (after the built-in sanitisation); return it
        unchanged by default. Must not mutate its argument."""
        return message

    async def on_chat_response(self, result: TurnResult) -> None:
        """Called after every turn ends (any kind). Override to react; errors are logged."""

    @classmethod
    def agent_name(cls) -> str:
        """The name this agent class is served under."""
        return cls.name_override or kebab_case(cls.__name__)

    def on_chat_message(self, turn: Turn) -> AsyncIterator[UIChunk]:
        """Produce the reply to a turn as UI message chunks."""
        return self.stream_model(turn)

    async def stream_model(self, turn: Turn, **litellm_kwargs: Any) -> AsyncIterator[UIChunk]:
        """Stream `self.model` over the turn's transcript as UI message chunks, running the
        server tools it calls between steps (see `durachat.steps`)."""
        from durachat.steps import stream_steps
        from durachat.tools import ToolSet, client_tools_from_schemas

        tools = ToolSet(self.tools).merged(client_tools_from_schemas(turn.client_tools))
        async for chunk in stream_steps(
            self.model,
            turn.messages,
            tools,
            system=self.system_prompt,
            abort=turn.abort,
            max_steps=self.max_steps,
            continuation=turn.continuation,
            ledger=turn.ledger,
            **litellm_kwargs,
        ):
            yield chunk


class AgentRegistry:
    """Agent classes by kebab-case name."""

    def __init__(self) -> None:
        self._agents: dict[str, type[Agent]] = {}

    def register(self, cls: type[Agent]) -> type[Agent]:
        """Register `cls` under its agent name (usable as a decorator)."""
        self._agents[cls.agent_name()] = cls
        return cls

    def get(self, name: str) -> type[Agent] | None:
        """The agent class served under `name`, if any."""
        return self._agents.get(name)

    def names(self) -> list[str]:
        """Every registered name."""
        return sorted(self._agents)

    def load(self, import_paths: Iterable[str]) -> None:
        """Import agents: `package.module` registers every Agent subclass it defines,
        `package.module:Class` registers one."""
        for raw in import_paths:
            path = raw.strip()
            if not path:
                continue
            module_name, _, attr = path.partition(":")
            module = importlib.import_module(module_name)
            if attr:
                cls = getattr(module, attr)
                if not (isinstance(cls, type) and issubclass(cls, Agent)):
                    raise TypeError(f"{path} is not an Agent subclass")
                self.register(cls)
                continue
            for value in vars(module).values():
                if (
                    isinstance(value, type)
                    and issubclass(value, Agent)
                    and value is not Agent
                    and value.__module__ == module.__name__
                ):
                    self.register(value)
