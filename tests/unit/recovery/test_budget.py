"""The recovery budget: attempts, progress, and the order of the seal checks
(docs/recovery.md#budgets)."""

from __future__ import annotations

from durachat.recovery import (
    ChatRecovery,
    IncidentState,
    evaluate,
    has_settled_tool_results,
    incident_id,
    partial_text,
)

CONFIG = ChatRecovery(max_attempts=3, no_progress_timeout=100.0, max_recovery_work=50)


def test_first_detection_opens_attempt_one_with_a_baseline() -> None:
    ev = evaluate(None, progress=7, now=1000.0, config=CONFIG)
    assert ev.first and ev.sealed is None
    assert ev.state.attempt == 1
    assert ev.state.work_baseline == 7 and ev.state.last_progress_at == 1000.0


def test_attempts_without_progress_count_up_to_the_limit() -> None:
    state: IncidentState | None = None
    sealed = []
    for tick in range(5):
        ev = evaluate(state, progress=7, now=1000.0 + tick, config=CONFIG)
        state = ev.state
        sealed.append(ev.sealed)
    assert [s is None for s in sealed] == [True, True, True, False, False]
    assert sealed[3] == "max_attempts_exceeded"


def test_progress_resets_the_attempt_count() -> None:
    first = evaluate(None, progress=5, now=1000.0, config=CONFIG).state
    second = evaluate(first, progress=5, now=1001.0, config=CONFIG).state
    assert second.attempt == 2
    third = evaluate(second, progress=9, now=1002.0, config=CONFIG).state
    assert third.attempt == 1 and third.last_progress_at == 1002.0


def test_work_budget_is_checked_before_attempts() -> None:
    first = evaluate(None, progress=10, now=1000.0, config=CONFIG).state
    ev = evaluate(first, progress=61, now=1001.0, config=CONFIG)
    assert ev.sealed == "work_budget_exceeded"


def test_no_progress_timeout() -> None:
    first = evaluate(None, progress=10, now=1000.0, config=CONFIG).state
    ev = evaluate(first, progress=10, now=1101.0, config=CONFIG)
    assert ev.sealed == "no_progress_timeout"


def test_state_survives_its_stored_form() -> None:
    state = evaluate(None, progress=3, now=5.0, config=CONFIG).state
    state.extra["reason"] = "x"
    again = IncidentState.from_json(state.attempt, state.to_json())
    assert again == state


def test_incident_ids_and_partials() -> None:
    assert incident_id("req", "u1") == "req:u1"
    assert incident_id("req", None) == "req:"
    parts = [
        {"type": "text", "text": "a "},
        {"type": "tool-x", "state": "input-available"},
        {"type": "text", "text": "b"},
    ]
    assert partial_text(parts) == "a b"
    assert not has_settled_tool_results(parts)
    assert has_settled_tool_results([{"type": "tool-x", "state": "output-error"}])
    assert has_settled_tool_results([{"type": "dynamic-tool", "state": "output-available"}])
