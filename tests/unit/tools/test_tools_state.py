"""Tests for durachat.tools.state: tool results and approvals from the client (§3.6, §3.7)."""

from __future__ import annotations

import copy

import pytest

from durachat.messages import TERMINAL_TOOL_STATES
from durachat.tools import (
    DEFAULT_TOOL_ERROR_TEXT,
    apply_tool_approval,
    apply_tool_result,
    approved_tool_parts,
    tool_part_name,
)
from durachat.types import UIPart


def part(state: str, call_id: str = "c1", **extra: object) -> UIPart:
    return {
        "type": "tool-search",
        "toolCallId": call_id,
        "toolName": "search",
        "state": state,
        "input": {"q": "x"},
    } | dict(extra)


# --- apply_tool_result ------------------------------------------------------------------------


@pytest.mark.parametrize("state", ["input-available", "approval-requested", "approval-responded"])
def test_result_applies_to_waiting_parts(state: str) -> None:
    before = part(state, approval={"id": "a1", "approved": True})
    snapshot = copy.deepcopy(before)
    after = apply_tool_result(before, output={"hits": 3})
    assert after == {
        **snapshot,
        "state": "output-available",
        "output": {"hits": 3},
        "preliminary": False,
    }
    assert before == snapshot  # pure


def test_error_result() -> None:
    after = apply_tool_result(part("input-available"), state="output-error", error_text="nope")
    assert after is not None
    assert (after["state"], after["errorText"]) == ("output-error", "nope")
    assert "output" not in after


def test_error_result_default_text_and_empty_text_kept() -> None:
    default = apply_tool_result(part("input-available"), state="output-error")
    empty = apply_tool_result(part("input-available"), state="output-error", error_text="")
    assert default is not None and default["errorText"] == DEFAULT_TOOL_ERROR_TEXT
    assert DEFAULT_TOOL_ERROR_TEXT == "Tool execution denied by user"
    assert empty is not None and empty["errorText"] == ""


def test_any_other_state_value_is_an_output() -> None:
    after = apply_tool_result(part("input-available"), output=1, state="output-available")
    also = apply_tool_result(part("input-available"), output=1, state="bogus")
    assert after == also
    assert after is not None and after["state"] == "output-available"


def test_first_write_wins_and_reapply_is_a_no_op() -> None:
    first = apply_tool_result(part("input-available"), output="first")
    assert first is not None
    assert apply_tool_result(first, output="first") is None
    assert apply_tool_result(first, output="second") is None
    assert apply_tool_result(first, state="output-error", error_text="late") is None


@pytest.mark.parametrize("state", sorted(TERMINAL_TOOL_STATES))
def test_terminal_parts_never_change(state: str) -> None:
    assert apply_tool_result(part(state, output="kept"), output="new") is None


@pytest.mark.parametrize("state", ["input-streaming", "unknown", None])
def test_parts_not_ready_for_a_result_do_not_change(state: str | None) -> None:
    assert apply_tool_result(part("x") | {"state": state}, output=1) is None


# --- apply_tool_approval ----------------------------------------------------------------------


def test_approval_of_requested_part_keeps_approval_fields() -> None:
    before = part("approval-requested", approval={"id": "ap-9", "signature": "sig"})
    after = apply_tool_approval(before, True)
    assert after == {
        **before,
        "state": "approval-responded",
        "approval": {"id": "ap-9", "signature": "sig", "approved": True},
    }
    assert before["approval"] == {"id": "ap-9", "signature": "sig"}  # pure


def test_denial_becomes_output_denied() -> None:
    after = apply_tool_approval(part("approval-requested", approval={"id": "ap-9"}), False)
    assert after is not None
    assert after["state"] == "output-denied"
    assert after["approval"] == {"id": "ap-9", "approved": False}


@pytest.mark.parametrize("approval", [None, "bogus", {"id": 5}])
def test_missing_approval_id_falls_back_to_the_call_id(approval: object) -> None:
    before = part("input-available", call_id="call-7")
    if approval is not None:
        before["approval"] = approval
    after = apply_tool_approval(before, True)
    assert after is not None
    assert after["approval"]["id"] == "call-7"
    assert after["approval"]["approved"] is True


def test_approval_reason_is_recorded() -> None:
    after = apply_tool_approval(part("approval-requested"), False, reason="too risky")
    assert after is not None
    assert after["approval"] == {"id": "c1", "approved": False, "reason": "too risky"}


@pytest.mark.parametrize(
    "state",
    ["approval-responded", "output-denied", "output-available", "output-error", "input-streaming"],
)
def test_approval_does_not_apply_to_other_states(state: str) -> None:
    assert apply_tool_approval(part(state), True) is None
    assert apply_tool_approval(part(state), False) is None


def test_answering_twice_is_a_no_op() -> None:
    approved = apply_tool_approval(part("approval-requested"), True)
    assert approved is not None
    assert apply_tool_approval(approved, True) is None
    assert apply_tool_approval(approved, False) is None


# --- helpers ----------------------------------------------------------------------------------


def test_tool_part_name() -> None:
    assert tool_part_name({"type": "tool-get_weather"}) == "get_weather"
    assert tool_part_name({"type": "dynamic-tool", "toolName": "mcp_x"}) == "mcp_x"
    assert tool_part_name({"type": "dynamic-tool"}) is None
    assert tool_part_name({"type": "text", "text": "hi"}) is None
    assert tool_part_name({}) is None


def test_approved_tool_parts() -> None:
    go = part("approval-responded", "a", approval={"id": "1", "approved": True})
    parts: list[object] = [
        {"type": "text", "text": "hi"},
        go,
        part("approval-responded", "b", approval={"id": "2", "approved": False}),
        part("approval-responded", "c"),
        part("approval-requested", "d", approval={"id": "4"}),
        part("output-available", "e", approval={"id": "5", "approved": True}),
        "junk",
    ]
    assert approved_tool_parts(parts) == [go]
