"""Tests for durachat.tools.ToolSet and the per-call decision."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from durachat.tools import (
    ApprovalCheck,
    Tool,
    ToolCallDecision,
    ToolEventKind,
    ToolSet,
    client_tools_from_schemas,
    tool,
)


class Args(BaseModel):
    path: str


def server(name: str, needs_approval: bool | ApprovalCheck = False) -> Tool:
    return tool(
        name,
        description=f"server {name}",
        input=Args,
        execute=lambda a: a.path,
        needs_approval=needs_approval,
    )


def test_mapping_and_model_specs_in_order() -> None:
    a, b = server("a"), server("b")
    tools = ToolSet([a, b])
    assert list(tools) == ["a", "b"]
    assert len(tools) == 2
    assert tools["a"] is a
    assert tools.get("b") is b
    assert tools.get("missing") is None
    assert tools.for_model() == [a.to_openai(), b.to_openai()]
    assert ToolSet().for_model() == []


def test_duplicate_names_are_rejected() -> None:
    with pytest.raises(ValueError, match="duplicate tool name 'a'"):
        ToolSet([server("a"), server("a")])


def test_agent_tools_win_over_client_tools() -> None:
    agent = ToolSet([server("read"), server("write")])
    client = client_tools_from_schemas(
        [{"name": "write", "description": "client write"}, {"name": "pick"}]
    )
    merged = agent.merged(client)
    assert list(merged) == ["read", "write", "pick"]
    assert merged["write"] is agent["write"]
    assert merged["pick"].is_client
    assert merged.client_tool_names() == frozenset({"pick"})
    assert list(agent) == ["read", "write"]  # the original set is unchanged


def test_merged_first_of_others_wins() -> None:
    first, second = server("x"), server("x")
    assert ToolSet().merged([first, second])["x"] is first


async def test_decide() -> None:
    def risky(args: Args) -> bool:
        return args.path.startswith("/etc")

    tools = ToolSet(
        [
            server("run"),
            server("guarded", needs_approval=risky),
            tool("pick", description="client", input=Args),
            tool("confirm", description="client", input=Args, needs_approval=True),
        ]
    )
    assert await tools.decide("run", {"path": "/tmp"}) is ToolCallDecision.EXECUTE
    assert await tools.decide("guarded", {"path": "/tmp"}) is ToolCallDecision.EXECUTE
    assert await tools.decide("guarded", {"path": "/etc/x"}) is ToolCallDecision.REQUEST_APPROVAL
    assert await tools.decide("pick", {"path": "/"}) is ToolCallDecision.AWAIT_CLIENT
    assert await tools.decide("confirm", {"path": "/"}) is ToolCallDecision.REQUEST_APPROVAL
    assert await tools.decide("nope", {}) is ToolCallDecision.UNAVAILABLE


def test_unavailable_event() -> None:
    event = ToolSet([server("a"), server("b")]).unavailable("c1", "zap")
    assert event.kind is ToolEventKind.ERROR
    assert event.to_chunk() == {
        "type": "tool-output-error",
        "toolCallId": "c1",
        "errorText": "Model tried to call unavailable tool 'zap'. Available tools: a, b.",
    }
    assert ToolSet().unavailable("c1", "zap").error_text == (
        "Model tried to call unavailable tool 'zap'. No tools are available."
    )
