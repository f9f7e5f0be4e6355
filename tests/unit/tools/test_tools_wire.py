"""Tool events and approval chunks applied through the message builder
(docs/protocol.md#how-chunks-become-parts)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from pydantic import BaseModel

from durachat.messages import apply_chunk_to_parts, find_tool_part
from durachat.tools import (
    apply_tool_approval,
    approval_request_chunk,
    approved_tool_parts,
    new_approval_id,
    run_tool,
    tool,
)
from durachat.types import UIPart


class Args(BaseModel):
    n: int


def called(call_id: str = "c1") -> list[UIPart]:
    parts: list[UIPart] = []
    for chunk in (
        {"type": "tool-input-start", "toolCallId": call_id, "toolName": "count"},
        {
            "type": "tool-input-available",
            "toolCallId": call_id,
            "toolName": "count",
            "input": {"n": 2},
        },
    ):
        apply_chunk_to_parts(parts, chunk)
    return parts


@tool(description="Count up", input=Args)
async def count(args: Args) -> AsyncIterator[int]:
    for i in range(1, args.n + 1):
        yield i


async def test_streamed_events_build_the_tool_part() -> None:
    parts = called()
    outputs = []
    async for event in run_tool(count, "c1", parts[0]["input"]):
        apply_chunk_to_parts(parts, event.to_chunk())
        outputs.append(parts[0]["output"])
    assert outputs == [1, 2, 2]
    assert parts[0]["state"] == "output-available"
    assert parts[0]["output"] == 2


async def test_error_event_builds_an_output_error_part() -> None:
    parts = called()
    async for event in run_tool(count, "c1", {"n": "two"}):
        apply_chunk_to_parts(parts, event.to_chunk())
    assert parts[0]["state"] == "output-error"
    assert parts[0]["errorText"].startswith("Invalid input for tool count: n:")


async def test_approval_round_trip_then_execution() -> None:
    parts = called()
    chunk = approval_request_chunk("c1", "ap-1")
    assert chunk == {"type": "tool-approval-request", "approvalId": "ap-1", "toolCallId": "c1"}
    apply_chunk_to_parts(parts, chunk)
    assert parts[0]["state"] == "approval-requested"
    target = find_tool_part(parts, "c1")
    assert target is not None
    answered = apply_tool_approval(target, True)
    assert answered is not None
    assert answered["approval"] == {"id": "ap-1", "approved": True}
    parts[0] = answered
    (approved,) = approved_tool_parts(parts)
    async for event in run_tool(count, approved["toolCallId"], approved["input"]):
        apply_chunk_to_parts(parts, event.to_chunk())
    assert (parts[0]["state"], parts[0]["output"]) == ("output-available", 2)


def test_approval_ids_are_fresh() -> None:
    first, second = new_approval_id(), new_approval_id()
    assert first != second
    assert first.startswith("approval_")
    assert approval_request_chunk("c1")["approvalId"].startswith("approval_")
