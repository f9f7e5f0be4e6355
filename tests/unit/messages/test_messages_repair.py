"""Tests for durachat.messages.repair (docs/agents.md#storage)."""

from __future__ import annotations

import copy

import pytest

from durachat.messages import INTERRUPTED_TOOL_ERROR, repair_transcript
from durachat.types import UIMessage, UIPart


def tool(state: str | None, call_id: str = "c1", name: str = "search", **extra: object) -> UIPart:
    part: UIPart = {"type": f"tool-{name}", "toolCallId": call_id, "input": {"q": "x"}}
    if state is not None:
        part["state"] = state
    return part | dict(extra)


def dynamic(state: str, call_id: str = "d1", name: str = "ask", **extra: object) -> UIPart:
    part: UIPart = {
        "type": "dynamic-tool",
        "toolName": name,
        "toolCallId": call_id,
        "state": state,
        "input": {},
    }
    return part | dict(extra)


def assistant(*parts: UIPart, message_id: str = "a1") -> UIMessage:
    return {"id": message_id, "role": "assistant", "parts": list(parts)}


def user(message_id: str = "u1") -> UIMessage:
    return {"id": message_id, "role": "user", "parts": [{"type": "text", "text": "hi"}]}


def errored(part: UIPart) -> UIPart:
    return part | {"state": "output-error", "errorText": INTERRUPTED_TOOL_ERROR}


# --- what is repaired -------------------------------------------------------------------------


def test_error_text() -> None:
    assert INTERRUPTED_TOOL_ERROR == "The tool call was interrupted before a result was recorded."


@pytest.mark.parametrize("state", ["input-streaming", "input-available", None, "bogus"])
def test_unsettled_server_tool_parts_become_errors(state: str | None) -> None:
    part = tool(state, title="Search", providerExecuted=False)
    messages = [user(), assistant({"type": "text", "text": "let me look"}, part)]
    repaired, changed = repair_transcript(messages)
    assert changed == [1]
    assert repaired[1]["parts"] == [{"type": "text", "text": "let me look"}, errored(part)]
    assert repaired[1]["id"] == "a1"


def test_dynamic_tool_parts_are_repaired() -> None:
    part = dynamic("input-available")
    repaired, changed = repair_transcript([assistant(part)])
    assert changed == [0]
    assert repaired[0]["parts"] == [errored(part)]


def test_streaming_input_is_normalised_to_an_object() -> None:
    partial = tool("input-streaming", input='{"q": "unfinish')
    parsed = tool("input-streaming", call_id="c2", input='{"q": "done"}')
    missing = tool("input-streaming", call_id="c3")
    del missing["input"]
    repaired, _ = repair_transcript([assistant(partial, parsed, missing)])
    assert [part["input"] for part in repaired[0]["parts"]] == [{}, {"q": "done"}, {}]
    assert all(part["state"] == "output-error" for part in repaired[0]["parts"])


# --- what is kept -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "part",
    [
        tool("approval-requested", approval={"id": "ap1"}),
        tool("approval-responded", approval={"id": "ap1", "approved": True}),
        tool("approval-responded", approval={"id": "ap1", "approved": False}),
    ],
)
def test_approval_parts_are_kept(part: UIPart) -> None:
    messages = [assistant(part)]
    repaired, changed = repair_transcript(messages)
    assert changed == []
    assert repaired[0] is messages[0]


@pytest.mark.parametrize(
    "part", [tool("input-available", name="confirm"), dynamic("input-available", name="confirm")]
)
def test_input_available_client_tools_are_kept(part: UIPart) -> None:
    messages = [assistant(part)]
    repaired, changed = repair_transcript(messages, client_tool_names={"confirm"})
    assert changed == []
    assert repaired[0] is messages[0]


def test_client_tool_names_only_keep_their_own_tools() -> None:
    client = tool("input-available", call_id="c1", name="confirm")
    server = tool("input-available", call_id="c2", name="search")
    repaired, changed = repair_transcript(
        [assistant(client, server)], client_tool_names=frozenset({"confirm"})
    )
    assert changed == [0]
    assert repaired[0]["parts"] == [client, errored(server)]


def test_streaming_client_tool_is_still_repaired() -> None:
    part = tool("input-streaming", name="confirm")
    repaired, _ = repair_transcript([assistant(part)], client_tool_names={"confirm"})
    assert repaired[0]["parts"] == [errored(part)]


def test_client_tool_names_match_the_tool_name_not_the_part_type() -> None:
    part = tool("input-available", name="confirm")
    repaired, _ = repair_transcript([assistant(part)], client_tool_names={"tool-confirm"})
    assert repaired[0]["parts"] == [errored(part)]


@pytest.mark.parametrize(
    "part",
    [
        tool("output-available", output={"hits": 3}),
        tool("output-error", errorText="boom"),
        tool("output-denied", approval={"id": "ap1", "approved": False, "reason": "no"}),
        tool("input-available", output=None),  # an output field settles it, whatever the state
        tool("input-available", result="legacy"),
        dynamic("output-error", errorText="boom"),
    ],
)
def test_settled_parts_are_kept(part: UIPart) -> None:
    messages = [assistant(part)]
    repaired, changed = repair_transcript(messages)
    assert changed == []
    assert repaired[0] is messages[0]


def test_non_tool_parts_and_parts_without_call_id_are_kept() -> None:
    messages = [
        assistant(
            {"type": "text", "text": "x"},
            {"type": "reasoning", "text": "y"},
            {"type": "data-progress", "data": {"state": "input-available"}},
            {"type": "tool-search", "state": "input-available"},
            {"type": "tool-search", "toolCallId": "", "state": "input-available"},
            {"type": "step-start"},
        ),
        {"id": "odd", "role": "assistant"},
    ]
    repaired, changed = repair_transcript(messages)
    assert changed == []
    assert all(new is old for new, old in zip(repaired, messages, strict=True))


# --- input normalisation on kept and settled parts --------------------------------------------


@pytest.mark.parametrize(
    ("state", "extra"),
    [("output-available", {"output": 1}), ("approval-requested", {"approval": {"id": "a"}})],
)
def test_string_inputs_of_kept_parts_are_normalised(state: str, extra: dict[str, object]) -> None:
    part = tool(state, input='{"q": "x"}') | extra
    messages = [assistant(part)]
    repaired, changed = repair_transcript(messages)
    assert changed == [0]
    assert repaired[0]["parts"] == [part | {"input": {"q": "x"}}]
    assert part["input"] == '{"q": "x"}'


def test_missing_input_of_a_settled_part_becomes_an_empty_object() -> None:
    part = tool("output-error", errorText="boom")
    del part["input"]
    repaired, changed = repair_transcript([assistant(part)])
    assert changed == [0]
    assert repaired[0]["parts"] == [part | {"input": {}}]


# --- custom repair ----------------------------------------------------------------------------


def test_repair_part_decides_the_replacement() -> None:
    seen: list[UIPart] = []

    def as_text(part: UIPart) -> UIPart:
        seen.append(copy.deepcopy(part))
        part["mutated"] = True  # its own copy: the transcript must not see this
        return {"type": "text", "text": f"(interrupted {part['toolCallId']})"}

    original = tool("input-streaming", input='{"q": "x"}')
    kept = tool("approval-requested", call_id="c2", approval={"id": "ap"})
    messages = [assistant(original, kept)]
    snapshot = copy.deepcopy(messages)
    repaired, changed = repair_transcript(messages, repair_part=as_text)
    assert changed == [0]
    assert repaired[0]["parts"] == [{"type": "text", "text": "(interrupted c1)"}, kept]
    assert seen == [original | {"input": {"q": "x"}}]  # called with the normalised input
    assert messages == snapshot


def test_repair_part_may_modify_the_part_it_gets() -> None:
    def settle(part: UIPart) -> UIPart:
        part["state"] = "output-available"
        part["output"] = "skipped"
        return part

    original = tool("input-available")  # input already an object: nothing else is copied
    messages = [assistant(original)]
    snapshot = copy.deepcopy(messages)
    repaired, changed = repair_transcript(messages, repair_part=settle)
    assert changed == [0]
    assert repaired[0]["parts"] == [original | {"state": "output-available", "output": "skipped"}]
    assert messages == snapshot


def test_repair_part_returning_an_equal_part_changes_nothing() -> None:
    messages = [assistant(tool("input-available"))]
    repaired, changed = repair_transcript(messages, repair_part=lambda part: part)
    assert changed == []
    assert repaired[0] is messages[0]


# --- transcript-level behaviour ---------------------------------------------------------------


def test_changed_indices_and_shared_unchanged_messages() -> None:
    messages = [
        user("u1"),
        assistant(tool("output-available", output=1), message_id="a1"),
        user("u2"),
        assistant(tool("input-available", call_id="c2"), message_id="a2"),
        user("u3"),
        assistant(dynamic("input-streaming"), message_id="a3"),
    ]
    snapshot = copy.deepcopy(messages)
    repaired, changed = repair_transcript(messages)
    assert changed == [3, 5]
    assert repaired is not messages
    assert [message["id"] for message in repaired] == ["u1", "a1", "u2", "a2", "u3", "a3"]
    for index in (0, 1, 2, 4):
        assert repaired[index] is messages[index]
    assert messages == snapshot


def test_repairing_twice_changes_nothing_the_second_time() -> None:
    messages = [
        user(),
        assistant(
            tool("input-streaming", call_id="c1", input="{"),
            tool("input-available", call_id="c2", name="confirm"),
            tool("input-available", call_id="c3"),
            tool("approval-responded", call_id="c4", approval={"id": "a", "approved": True}),
            tool("output-available", call_id="c5", input='{"a": 1}', output=2),
            dynamic("input-available"),
        ),
    ]
    once, changed = repair_transcript(messages, client_tool_names={"confirm"})
    assert changed == [1]
    twice, changed_again = repair_transcript(once, client_tool_names={"confirm"})
    assert changed_again == []
    assert all(new is old for new, old in zip(twice, once, strict=True))
    assert [part.get("state") for part in once[1]["parts"]] == [
        "output-error",
        "input-available",
        "output-error",
        "approval-responded",
        "output-available",
        "output-error",
    ]


def test_empty_transcript() -> None:
    assert repair_transcript([]) == ([], [])
