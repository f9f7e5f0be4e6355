"""The small parsers of `durachat load`: durations, rates, scenarios, URLs, metrics, SLOs."""

from __future__ import annotations

import pytest

from durachat.loadtest.cli import scenario_classes
from durachat.loadtest.frames import chat_request, http_url, socket_url, user_message
from durachat.loadtest.memory import parse_rss, parse_target
from durachat.loadtest.report import Slo
from durachat.loadtest.settings import parse_range, parse_weights
from durachat.loadtest.units import format_duration, parse_duration, parse_fraction


def test_durations_and_rates() -> None:
    assert parse_duration("5m") == 300
    assert parse_duration("1m30s") == 90
    assert parse_duration("250ms") == 0.25
    assert parse_duration("2") == 2
    assert parse_fraction("0.1%") == pytest.approx(0.001)
    assert parse_fraction("0.02") == 0.02
    assert format_duration(0.25) == "250 ms"
    assert format_duration(300) == "5m00s"
    for bad in ("", "5 minutes", "m5"):
        with pytest.raises(ValueError):
            parse_duration(bad)
    with pytest.raises(ValueError):
        parse_fraction("150%")


def test_scenarios_name_user_classes_and_weights() -> None:
    assert scenario_classes("chat:3,resume") == (
        ["ChatUser", "ResumeUser"],
        {"ChatUser": 3, "ResumeUser": 1},
    )
    assert scenario_classes("MyUser:2") == (["MyUser"], {"MyUser": 2})
    with pytest.raises(ValueError):
        scenario_classes("chatty")
    assert parse_weights("ChatUser=3, IdleTabUser") == {"ChatUser": 3, "IdleTabUser": 1}
    assert parse_range("1-3") == (1.0, 3.0)
    assert parse_range("2") == (2.0, 2.0)


def test_urls_keep_prefixes_and_carry_the_token() -> None:
    assert (
        socket_url("https://chat.example/api/", "chat-agent", "a b", connection_id="pk")
        == "wss://chat.example/api/agents/chat-agent/a%20b?_pk=pk"
    )
    assert socket_url("http://127.0.0.1:8080", "x", "y", connection_id="p", token="t.k") == (
        "ws://127.0.0.1:8080/agents/x/y?_pk=p&token=t.k"
    )
    assert http_url("ws://h:1/p", "/v1/tokens") == "http://h:1/p/v1/tokens"


def test_a_chat_request_carries_the_transcript_as_json() -> None:
    message = user_message("hello", "u1")
    frame = chat_request([message], trigger="regenerate-message", request_id="r1")
    assert frame["type"] == "cf_agent_use_chat_request" and frame["id"] == "r1"
    assert frame["init"]["method"] == "POST"
    assert '"trigger": "regenerate-message"' in frame["init"]["body"]


def test_resident_memory_is_read_from_prometheus_text() -> None:
    text = (
        "# HELP process_resident_memory_bytes Resident memory size in bytes.\n"
        "# TYPE process_resident_memory_bytes gauge\n"
        "process_resident_memory_bytes 1.2345e+08\n"
        "process_virtual_memory_bytes 9e9\n"
    )
    assert parse_rss(text) == 1.2345e08
    assert parse_rss("other 1\n") is None
    assert parse_target("gw=http://h:1/metrics") == ("gw", "http://h:1/metrics")
    assert parse_target("http://h:1/metrics") == ("h:1", "http://h:1/metrics")


def test_slos_compare_summary_values() -> None:
    summary = {"latency_ms": {"ttfc": {"p99": 340.0}}, "totals": {"error_rate": 0.002}}
    assert Slo("ttfc p99", "latency_ms.ttfc.p99", 2000, "ms").check(summary)["passed"]
    assert not Slo("error rate", "totals.error_rate", 0.001, "").check(summary)["passed"]
    missing = Slo("delivery p99", "latency_ms.delivery.p99", 100, "ms").check(summary)
    assert missing["value"] is None and not missing["passed"]
