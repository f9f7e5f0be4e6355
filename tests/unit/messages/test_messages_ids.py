"""Tests for durachat.messages.ids."""

from __future__ import annotations

import re
import time

from durachat.messages import new_assistant_id, new_request_id


def test_assistant_id_shape_and_timestamp() -> None:
    before = time.time_ns() // 1_000_000
    message_id = new_assistant_id()
    after = time.time_ns() // 1_000_000
    match = re.fullmatch(r"assistant_(\d+)_([0-9a-z]{9})", message_id)
    assert match is not None
    assert before <= int(match.group(1)) <= after


def test_assistant_ids_are_unique() -> None:
    assert len({new_assistant_id() for _ in range(200)}) == 200


def test_request_id_shape() -> None:
    for _ in range(100):
        assert re.fullmatch(r"[A-Za-z0-9_-]{8}", new_request_id())


def test_request_ids_are_unique() -> None:
    assert len({new_request_id() for _ in range(200)}) == 200
