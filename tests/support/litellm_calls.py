"""Watching what litellm does with a call, for the model adapter's tests."""

from __future__ import annotations

from typing import Any

import pytest

from durachat.models._litellm import litellm


def count_builds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count litellm's end-of-stream rebuilds of a whole reply (`stream_chunk_builder`): one
    item per call, in the list returned."""
    calls: list[int] = []
    real = litellm.stream_chunk_builder

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(litellm, "stream_chunk_builder", spy)
    return calls
