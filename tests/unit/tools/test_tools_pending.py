"""Tests for durachat.tools.pending: waiting on the client (§8.3, §8.5)."""

from __future__ import annotations

import pytest

from durachat.tools import (
    parallel_batch_incomplete,
    pending_client_interaction,
    pending_interaction,
)
from durachat.types import UIPart


def part(state: str, name: str = "search") -> UIPart:
    return {"type": f"tool-{name}", "toolCallId": f"{name}-{state}", "state": state}


TEXT: UIPart = {"type": "text", "text": "hello", "state": "done"}


@pytest.mark.parametrize("state", ["input-available", "approval-requested"])
def test_pending_interaction_states(state: str) -> None:
    assert pending_interaction([TEXT, part(state)])


@pytest.mark.parametrize(
    "state",
    ["input-streaming", "approval-responded", "output-available", "output-error", "output-denied"],
)
def test_not_pending(state: str) -> None:
    assert not pending_interaction([TEXT, part(state), "junk"])


def test_pending_client_interaction_ignores_server_tool_orphans() -> None:
    clients = {"pick_color"}
    assert not pending_client_interaction([part("input-available", "search")], clients)
    assert pending_client_interaction([part("input-available", "pick_color")], clients)
    assert pending_client_interaction([part("approval-requested", "search")], clients)
    dynamic = {"type": "dynamic-tool", "toolName": "pick_color", "state": "input-available"}
    assert pending_client_interaction([dynamic], clients)
    assert not pending_client_interaction([part("output-available", "pick_color"), 1], clients)


@pytest.mark.parametrize(
    "settled", ["output-available", "output-error", "output-denied", "approval-responded"]
)
@pytest.mark.parametrize("waiting", ["input-available", "approval-requested"])
def test_batch_incomplete_when_settled_and_waiting_siblings(settled: str, waiting: str) -> None:
    assert parallel_batch_incomplete([part(settled, "a"), TEXT, part(waiting, "b")])
    assert parallel_batch_incomplete([part(waiting, "b"), part(settled, "a")])


def test_batch_complete_cases() -> None:
    assert not parallel_batch_incomplete([])
    # Nothing answered yet: the whole batch waits, nothing to hold back.
    assert not parallel_batch_incomplete(
        [part("input-available", "a"), part("input-available", "b")]
    )
    # Everything answered.
    assert not parallel_batch_incomplete([part("output-available", "a"), part("output-error", "b")])
    # Still streaming input is neither waiting nor settled.
    assert not parallel_batch_incomplete(
        [part("output-available", "a"), part("input-streaming", "b")]
    )


def test_batch_settled_must_be_a_tool_part() -> None:
    odd = {"type": "data-x", "state": "output-available"}
    assert not parallel_batch_incomplete([odd, part("input-available")])
