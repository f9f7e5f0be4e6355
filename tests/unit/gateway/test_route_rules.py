"""Which scope each route and frame needs, and the size quotas of a chat request."""

from __future__ import annotations

import json
from typing import Any

import pytest
from redis.asyncio import Redis

from durachat_gateway.auth.directory import AuthDirectory
from durachat_gateway.auth.middleware import route_scope
from durachat_gateway.quota_gate import UNLIMITED_HEADROOM, QuotaGate, headroom_after
from durachat_gateway.tenancy import frame_scope, refused_turn
from durachat_infra.keys import ClusterKeys
from durachat_infra.quotas import Admission, QuotaCounters, Quotas, Refusal
from durachat_infra.settings import QuotaDefaults
from durachat_infra.store.memory import MemoryStore


@pytest.mark.parametrize(
    ("method", "rest", "websocket", "scope"),
    [
        ("GET", [], True, "events"),
        ("GET", ["get-messages"], False, "read"),
        ("POST", ["get-messages"], False, "read"),
        ("GET", ["branches"], False, "read"),
        ("POST", ["branches"], False, "branches"),
        ("PATCH", ["branches", "7"], False, "branches"),
        ("DELETE", ["branches", "7"], False, "branches"),
        ("POST", ["branches", "7", "fork"], False, "branches"),
        ("GET", ["messages", "m1", "siblings"], False, "read"),
    ],
)
def test_route_scopes(method: str, rest: list[str], websocket: bool, scope: str) -> None:
    assert route_scope(method, rest, websocket=websocket) == scope


@pytest.mark.parametrize(
    ("frame", "scope"),
    [
        ({"type": "cf_agent_use_chat_request"}, "chat"),
        ({"type": "cf_agent_chat_clear"}, "chat"),
        ({"type": "cf_agent_tool_result"}, "chat"),
        ({"type": "cf_agent_stream_resume_request"}, "events"),
        ({"type": "durachat_branches"}, "read"),
        ({"type": "durachat_branch_op", "op": "siblings"}, "read"),
        ({"type": "durachat_branch_op", "op": "fork"}, "branches"),
    ],
)
def test_frame_scopes(frame: dict[str, Any], scope: str) -> None:
    assert frame_scope(frame) == scope


def test_a_refused_turn_gets_the_error_frame_then_the_terminal_one() -> None:
    error, terminal = refused_turn("r1", Refusal("turns_per_minute", 7))

    assert error["error"] is True and error["done"] is False and error["id"] == "r1"
    assert "turns_per_minute" in error["body"] and error["quota"] == "turns_per_minute"
    assert terminal == {
        "type": "cf_agent_use_chat_response",
        "id": "r1",
        "body": "",
        "done": True,
        "outcome": "error",
    }


def request_frame(*messages: dict[str, Any]) -> dict[str, Any]:
    body = json.dumps({"messages": list(messages), "trigger": "submit-message"})
    return {"type": "cf_agent_use_chat_request", "id": "r", "init": {"body": body}}


def message(text: str) -> dict[str, Any]:
    return {"id": "m", "role": "user", "parts": [{"type": "text", "text": text}]}


def gate(**quotas: int) -> QuotaGate:
    redis = Redis()  # never used: the size checks read no counter
    directory = AuthDirectory(
        MemoryStore(),
        redis,
        ClusterKeys("t"),
        admin_key="adm",
        defaults=QuotaDefaults(**quotas),
        refresh=1.0,
    )
    return QuotaGate(
        QuotaCounters(redis, "t"), directory, MemoryStore(), gateway_id="gw", key_prefix="t"
    )


def test_message_size_and_count_quotas() -> None:
    limits = gate(max_message_bytes=200, max_messages_per_request=3)

    assert limits.check_request("acme", request_frame(message("short"))) is None
    big = limits.check_request("acme", request_frame(message("x" * 300)))
    assert big == Refusal("max_message_bytes", 0)
    # Multi-byte characters count as their UTF-8 bytes.
    wide = limits.check_request("acme", request_frame(message("é" * 90)))
    assert wide == Refusal("max_message_bytes", 0)
    many = limits.check_request("acme", request_frame(*[message("a")] * 4))
    assert many == Refusal("max_messages_per_request", 0)
    assert limits.check_request("acme", request_frame(*[message("a")] * 3)) is None


def test_zero_means_no_limit() -> None:
    limits = gate(max_message_bytes=0, max_messages_per_request=0)

    assert limits.check_request("acme", request_frame(*[message("x" * 5000)] * 50)) is None


def limits(**quotas: int) -> Quotas:
    return Quotas.resolve(QuotaDefaults(), quotas)


def test_headroom_is_a_quarter_of_the_tightest_turn_limit_left() -> None:
    both = limits(concurrent_turns=100, turns_per_minute=600, tokens_per_day=0)
    assert headroom_after(both, Admission(None, running=20, turns_left=500.0)) == 20
    assert headroom_after(both, Admission(None, running=90, turns_left=500.0)) == 2
    assert headroom_after(both, Admission(None, running=98, turns_left=500.0)) == 0
    tight = limits(concurrent_turns=1, turns_per_minute=2)
    assert headroom_after(tight, Admission(None, running=1, turns_left=1.0)) == 0
    free = limits(concurrent_turns=0, turns_per_minute=0, tokens_per_day=0)
    assert headroom_after(free, Admission(None, running=5)) == UNLIMITED_HEADROOM
    daily = limits(concurrent_turns=0, turns_per_minute=0, tokens_per_day=1000)
    assert headroom_after(daily, Admission(None, tokens_today=400)) == UNLIMITED_HEADROOM
    assert headroom_after(daily, Admission(None, tokens_today=600)) == 0
