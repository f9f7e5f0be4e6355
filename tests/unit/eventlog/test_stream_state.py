"""The stream-state encoding: the changes each step of a stream makes, as stored in log entries
and the state hash, and how they decode (docs/architecture.md#the-event-log)."""

from __future__ import annotations

import json

from durachat_infra.eventlog import (
    ENTRY_ID,
    StreamState,
    branch_change,
    state_fields,
)


def test_changes_keep_their_stored_form() -> None:
    # Entries keep their change as JSON, so the field order is part of the log's format.
    stored = {
        "pending": StreamState.change_pending("r1"),
        "streaming": StreamState.change_streaming("r1", continuation=True),
        "ended": StreamState.change_ended(streamed=True),
        "skipped": StreamState.change_ended(streamed=False),
        "idle": StreamState.change_idle(),
        "cleared": StreamState.change_cleared(),
        "gave up": StreamState.change_gave_up("r1", "stopped ü"),
    }
    assert {name: json.dumps(change) for name, change in stored.items()} == {
        "pending": '{"status": "pending", "req": "r1", "start": "", "cont": "0", "terminal": ""}',
        "streaming": '{"status": "streaming", "req": "r1", "start": "$id", "cont": "1", '
        '"terminal": ""}',
        "ended": '{"status": "done"}',
        "skipped": '{"status": "idle"}',
        "idle": '{"status": "idle"}',
        "cleared": '{"status": "idle", "req": "", "start": "", "cont": "0", "terminal": "", '
        '"recovering": ""}',
        "gave up": '{"status": "done", "terminal": "{\\"req\\":\\"r1\\",\\"body\\":\\"stopped '
        '\\u00fc\\"}", "recovering": ""}',
    }


def test_a_stream_decodes_from_its_changes() -> None:
    state = StreamState()
    state.apply(StreamState.change_pending("r1"), "1-0")
    assert state == StreamState("pending", "r1")
    state.apply(StreamState.change_streaming("r1", continuation=False), "2-0")
    assert state == StreamState("streaming", "r1", "2-0")
    state.apply(StreamState.change_recovering("r1", active=True), "3-0")
    assert state.recovering == "r1" and state.recovering_at > 0
    state.apply(StreamState.change_gave_up("r1", "no luck"), "4-0")
    assert (state.status, state.recovering, state.gave_up()) == ("done", "", ("r1", "no luck"))
    state.apply(StreamState.change_pending("r2"), "5-0")
    assert state.gave_up() is None
    state.apply(StreamState.change_cleared(), "6-0")
    # When recovery last started is kept: it only matters while `recovering` is set.
    assert state == StreamState(recovering_at=state.recovering_at)


def test_branch_fields_are_prefixed_in_the_hash() -> None:
    change = StreamState.change_streaming("b1", continuation=False)
    assert state_fields("main", change) is change
    stored = state_fields("42", change)
    assert stored["42|start"] == ENTRY_ID
    assert branch_change("42", stored) == change
    assert branch_change("main", change) == change
    hash_fields = {**state_fields("main", StreamState.change_pending("m1")), **stored}
    states = StreamState.all_from_hash(
        {k: v.replace(ENTRY_ID, "9-0") for k, v in hash_fields.items()}
    )
    assert states == {
        "main": StreamState("pending", "m1"),
        "42": StreamState("streaming", "b1", "9-0"),
    }
