"""Tests for durachat.messages.reconcile (docs/architecture.md#storage)."""

from __future__ import annotations

import copy

import pytest

from durachat.messages import reconcile_messages, resolve_tool_merge_id, tool_call_ids
from durachat.types import UIMessage, UIPart


def user(message_id: str, text: str = "hi") -> UIMessage:
    return {"id": message_id, "role": "user", "parts": [{"type": "text", "text": text}]}


def says(message_id: str, text: str) -> UIMessage:
    return {
        "id": message_id,
        "role": "assistant",
        "parts": [{"type": "text", "text": text, "state": "done"}],
    }


def tool(call_id: str, state: str, **extra: object) -> UIPart:
    return {"type": "tool-t", "toolCallId": call_id, "toolName": "t", "state": state} | dict(extra)


def with_tools(message_id: str, *parts: UIPart) -> UIMessage:
    return {"id": message_id, "role": "assistant", "parts": list(parts)}


# --- tool-output merge ------------------------------------------------------------------------


@pytest.mark.parametrize("stale", ["input-available", "approval-requested", "approval-responded"])
def test_stale_client_tool_part_takes_server_output(stale: str) -> None:
    server = [user("u1"), with_tools("a1", tool("c1", "output-available", input={}, output=42))]
    incoming = [user("u1"), with_tools("a1", tool("c1", stale, input={"mine": 1}))]
    result = reconcile_messages(incoming, server)
    assert result[1]["parts"] == [tool("c1", "output-available", input={"mine": 1}, output=42)]
    assert incoming[1]["parts"][0]["state"] == stale  # input untouched


def test_server_error_carries_only_error_text() -> None:
    server = [with_tools("a1", tool("c1", "output-error", errorText="fail", output="stray"))]
    incoming = [with_tools("a1", tool("c1", "input-available", input={}))]
    result = reconcile_messages(incoming, server)
    assert result[0]["parts"] == [tool("c1", "output-error", input={}, errorText="fail")]


def test_server_denial_carries_approval() -> None:
    approval = {"id": "ap", "approved": False}
    server = [with_tools("a1", tool("c1", "output-denied", approval=approval))]
    incoming = [with_tools("a1", tool("c1", "approval-requested", approval={"id": "ap"}))]
    result = reconcile_messages(incoming, server)
    assert result[0]["parts"] == [tool("c1", "output-denied", approval=approval)]


@pytest.mark.parametrize("client_state", ["input-streaming", "output-available", "output-error"])
def test_non_stale_client_parts_keep_their_state(client_state: str) -> None:
    server = [with_tools("a1", tool("c1", "output-available", output="server"))]
    incoming = [with_tools("a1", tool("c1", client_state, output="client"))]
    result = reconcile_messages(incoming, server)
    assert result[0] is incoming[0]


def test_unsettled_server_parts_do_not_merge() -> None:
    server = [with_tools("a1", tool("c1", "approval-requested"))]
    incoming = [with_tools("a1", tool("c1", "input-available"))]
    assert reconcile_messages(incoming, server)[0] is incoming[0]


def test_tool_merge_ignores_user_messages_and_other_calls() -> None:
    server = [with_tools("a1", tool("c1", "output-available", output=1))]
    odd_user: UIMessage = {"id": "u", "role": "user", "parts": [tool("c1", "input-available")]}
    other = with_tools("a1", tool("c2", "input-available"))
    result = reconcile_messages([odd_user, other], server)
    assert result[0] is odd_user
    assert result[1] is other


# --- assistant id reconciliation --------------------------------------------------------------


def test_identical_replies_reconcile_one_to_one() -> None:
    server = [user("u1"), says("s1", "Sure"), user("u2"), says("s2", "Sure")]
    incoming = [user("u1"), says("c1", "Sure"), user("u2"), says("c2", "Sure")]
    result = reconcile_messages(incoming, server)
    assert [m["id"] for m in result] == ["u1", "s1", "u2", "s2"]


def test_identical_reply_claims_the_unclaimed_server_message() -> None:
    server = [user("u1"), says("s1", "Sure"), user("u2"), says("s2", "Sure")]
    incoming = [user("u1"), says("s1", "Sure"), user("u2"), says("local", "Sure")]
    result = reconcile_messages(incoming, server)
    assert [m["id"] for m in result] == ["u1", "s1", "u2", "s2"]


def test_new_identical_reply_does_not_collapse_onto_claimed_one() -> None:
    server = [user("u1"), says("s1", "Sure"), user("u2")]
    incoming = [user("u1"), says("s1", "Sure"), user("u2"), says("fresh", "Sure")]
    result = reconcile_messages(incoming, server)
    assert [m["id"] for m in result] == ["u1", "s1", "u2", "fresh"]


def test_assistant_adopts_server_id_by_content() -> None:
    server = [user("u1"), says("assistant_1_x", "Hello there")]
    incoming = [user("u1"), says("client-id", "Hello there")]
    result = reconcile_messages(incoming, server)
    assert result[1] == says("assistant_1_x", "Hello there")
    assert incoming[1]["id"] == "client-id"


def test_content_match_uses_sanitized_parts() -> None:
    server_message = says("s1", "Hi")
    server_message["parts"][0]["providerMetadata"] = {"openai": {"itemId": "old"}}
    incoming_message = says("c1", "Hi")
    incoming_message["parts"][0]["providerMetadata"] = {"openai": {"itemId": "new"}}
    result = reconcile_messages([incoming_message], [server_message])
    assert result[0]["id"] == "s1"


def test_custom_sanitize_is_used_for_content_key() -> None:
    server = [says("s1", "A")]
    incoming = [says("c1", "B")]

    def blank(message: UIMessage) -> UIMessage:
        return {**message, "parts": []}

    assert reconcile_messages(incoming, server, blank)[0]["id"] == "s1"
    assert reconcile_messages(incoming, server)[0]["id"] == "c1"


def test_different_content_keeps_client_id() -> None:
    result = reconcile_messages([says("c1", "Yes")], [says("s1", "No")])
    assert result[0]["id"] == "c1"


def test_tool_messages_never_matched_by_content() -> None:
    parts = [tool("c1", "output-available", input={}, output=1)]
    server = [with_tools("s1", *copy.deepcopy(parts))]
    incoming = [with_tools("c-local", *copy.deepcopy(parts))]
    assert reconcile_messages(incoming, server)[0]["id"] == "c-local"


def test_plain_reply_not_matched_against_server_tool_message() -> None:
    server = [with_tools("s1", {"type": "text", "text": "x", "state": "done"}, tool("c", "x"))]
    incoming = [says("c1", "x")]
    assert reconcile_messages(incoming, server)[0]["id"] == "c1"


def test_user_messages_never_matched_by_content() -> None:
    result = reconcile_messages([user("local", "same")], [user("server", "same")])
    assert result[0]["id"] == "local"


def test_empty_server_returns_incoming_messages() -> None:
    incoming = [says("c1", "x")]
    result = reconcile_messages(incoming, [])
    assert result == incoming
    assert result[0] is incoming[0]


def test_duplicate_incoming_ids_claim_once() -> None:
    server = [says("s1", "A"), says("s2", "A")]
    incoming = [says("s1", "A"), says("s1", "A")]
    result = reconcile_messages(incoming, server)
    assert [m["id"] for m in result] == ["s1", "s2"]


# --- resolve_tool_merge_id --------------------------------------------------------------------


def test_resolve_tool_merge_id_adopts_server_owner() -> None:
    server = [user("u1"), with_tools("s1", tool("c1", "output-available"))]
    message = with_tools("local", {"type": "text", "text": "x"}, tool("c1", "input-available"))
    assert resolve_tool_merge_id(message, server) == "s1"


def test_resolve_tool_merge_id_keeps_own_id() -> None:
    server = [with_tools("s1", tool("c1", "output-available"))]
    assert resolve_tool_merge_id(with_tools("s1", tool("c1", "x")), server) == "s1"
    assert resolve_tool_merge_id(with_tools("n", tool("c9", "x")), server) == "n"
    assert resolve_tool_merge_id(says("n", "text"), server) == "n"


def test_resolve_tool_merge_id_checks_every_tool_part() -> None:
    server = [with_tools("mine", tool("c1", "x")), with_tools("s2", tool("c2", "x"))]
    message = with_tools("mine", tool("c1", "x"), tool("c2", "x"))
    assert resolve_tool_merge_id(message, server) == "s2"


def test_resolve_tool_merge_id_only_for_assistants() -> None:
    server = [with_tools("s1", tool("c1", "x"))]
    odd: UIMessage = {"id": "u", "role": "user", "parts": [tool("c1", "x")]}
    assert resolve_tool_merge_id(odd, server) == "u"
    server_user: list[UIMessage] = [{"id": "su", "role": "user", "parts": [tool("c1", "x")]}]
    assert resolve_tool_merge_id(with_tools("n", tool("c1", "x")), server_user) == "n"


def test_tool_call_ids() -> None:
    message = with_tools(
        "a",
        tool("c1", "x"),
        {"type": "text", "text": "t"},
        {"type": "dynamic-tool", "toolName": "d", "toolCallId": "c2", "state": "x"},
        tool("", "x"),
    )
    assert tool_call_ids(message) == {"c1", "c2"}
    assert tool_call_ids({"id": "x", "role": "user"}) == set()
