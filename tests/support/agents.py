"""Agents only the tests serve: the demo agent under each concurrency strategy."""

from __future__ import annotations

from durachat.demo import ChatAgent


class LatestAgent(ChatAgent):
    """`latest`."""

    message_concurrency = "latest"


class MergeAgent(ChatAgent):
    """`merge`."""

    message_concurrency = "merge"


class DropAgent(ChatAgent):
    """`drop`."""

    message_concurrency = "drop"


class DebounceAgent(ChatAgent):
    """`debounce`, 300 ms."""

    message_concurrency = {"strategy": "debounce", "debounce_ms": 300}
