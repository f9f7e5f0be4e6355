"""The tools available to one model call: `ToolSet`, and what to do with each tool call."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from enum import StrEnum

from durachat.tools.events import ToolEvent
from durachat.tools.tool import Tool
from durachat.types import JSONDict

__all__ = ["ToolCallDecision", "ToolSet"]


class ToolCallDecision(StrEnum):
    """What the turn engine does with a completed tool call (`tool-input-available`)."""

    EXECUTE = "execute"
    """A server tool: `run_tool` it now and stream its events."""
    REQUEST_APPROVAL = "request-approval"
    """Stream `approval_request_chunk(call_id)` and end the turn; the call runs in the
    continuation after the user approves it."""
    AWAIT_CLIENT = "await-client"
    """A client tool: leave the part `input-available` and end the turn; the client answers
    with `cf_agent_tool_result`."""
    UNAVAILABLE = "unavailable"
    """No such tool: stream `ToolSet.unavailable(...)` as the call's error result."""


class ToolSet(Mapping[str, Tool]):
    """An immutable mapping of tool name to `Tool`, in definition order."""

    __slots__ = ("_tools",)

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        """Collect tools.

        Raises:
            ValueError: Two tools have the same name.
        """
        self._tools: dict[str, Tool] = {}
        for item in tools:
            if item.name in self._tools:
                raise ValueError(f"duplicate tool name {item.name!r}")
            self._tools[item.name] = item

    def __getitem__(self, name: str) -> Tool:
        return self._tools[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._tools)

    def __len__(self) -> int:
        return len(self._tools)

    def __repr__(self) -> str:
        return f"ToolSet({list(self._tools.values())!r})"

    def merged(self, others: Iterable[Tool]) -> ToolSet:
        """Return a set with this set's tools plus those of `others` whose names are new.

        Use it as `ToolSet(agent_tools).merged(client_tools)`: on a name clash the agent's tool
        wins, so a client cannot replace a server tool. Among `others`, the first of a name wins.
        """
        tools = dict(self._tools)
        for item in others:
            tools.setdefault(item.name, item)
        return ToolSet(tools.values())

    def for_model(self) -> list[JSONDict]:
        """Return the OpenAI tool definitions for litellm (`Tool.to_openai()` of each tool).

        An empty set gives `[]`; pass `tools=toolset.for_model() or None`, since OpenAI rejects
        an empty `tools` array.
        """
        return [item.to_openai() for item in self._tools.values()]

    def client_tool_names(self) -> frozenset[str]:
        """Return the names of the tools without server `execute` (resolved by the client)."""
        return frozenset(name for name, item in self._tools.items() if item.is_client)

    async def decide(self, tool_name: str, raw_input: object) -> ToolCallDecision:
        """Decide what to do with a tool call the model completed.

        Order: unknown name → UNAVAILABLE; approval needed (`Tool.requires_approval`) →
        REQUEST_APPROVAL, for client tools too; no `execute` → AWAIT_CLIENT; else EXECUTE.
        A call the user has approved (`approval-responded`) is executed without deciding again.

        Raises:
            Exception: Whatever the tool's approval check raises.
        """
        found = self._tools.get(tool_name)
        if found is None:
            return ToolCallDecision.UNAVAILABLE
        if await found.requires_approval(raw_input):
            return ToolCallDecision.REQUEST_APPROVAL
        if found.is_client:
            return ToolCallDecision.AWAIT_CLIENT
        return ToolCallDecision.EXECUTE

    def unavailable(self, call_id: str, tool_name: str) -> ToolEvent:
        """Return the ERROR event for a call to a tool that is not in this set."""
        available = (
            f"Available tools: {', '.join(self._tools)}."
            if self._tools
            else "No tools are available."
        )
        return ToolEvent.failure(
            call_id, f"Model tried to call unavailable tool '{tool_name}'. {available}"
        )
