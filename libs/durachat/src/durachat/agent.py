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
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

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

    message_concurrency: str | Mapping[str, Any] = "queue"
    """What a send does while a turn is running: `queue`, `latest`, `merge`, `drop`, or
    `{"strategy": "debounce", "debounce_ms": 750}`."""

    def __init__(self, conversation: str, *, model: str | None = None) -> None:
        self.conversation = conversation
        """The conversation's name (the `{name}` URL segment)."""
        if model is not None:
            self.model = model
        self.messages: list[UIMessage] = []
        """The current transcript, kept up to date by the host."""

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
