"""`messageConcurrency`: what happens to a send that arrives while another turn is running.

Only overlapping `submit-message` requests are affected; regenerations, continuations and
programmatic turns always queue.

* `queue` (default): it runs after the turns before it.
* `latest`: its message is stored at once; when its turn reaches the front and a newer
  overlapping send exists, it is skipped (the newest turn sees every message).
* `merge`: like `latest`, and the run of user messages sent while busy becomes one message
  (texts joined by a blank line; id, role and metadata of the last).
* `drop`: refused before anything is stored: the sender gets the server's transcript back and
  a `skipped` terminal frame.
* `debounce`: like `latest`, but a turn reaching the front first waits until `debounce_ms`
  after its send, then checks for a newer one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

Strategy = Literal["queue", "latest", "merge", "drop", "debounce"]
STRATEGIES: tuple[Strategy, ...] = ("queue", "latest", "merge", "drop", "debounce")
DEFAULT_DEBOUNCE_MS = 750


@dataclass(frozen=True, slots=True)
class Concurrency:
    """A resolved concurrency policy."""

    strategy: Strategy = "queue"
    debounce_ms: int = DEFAULT_DEBOUNCE_MS

    @property
    def supersedes(self) -> bool:
        """Whether a newer overlapping send makes an older queued one skip."""
        return self.strategy in ("latest", "merge", "debounce")

    @classmethod
    def parse(cls, raw: str | Mapping[str, Any] | None) -> Concurrency:
        """Read an agent's `message_concurrency` (`"latest"`, or
        `{"strategy": "debounce", "debounce_ms": 500}`; `debounceMs` is accepted too)."""
        if raw is None:
            return cls()
        options: Mapping[str, Any] = {} if isinstance(raw, str) else raw
        strategy = raw if isinstance(raw, str) else str(raw.get("strategy", "queue"))
        if strategy not in STRATEGIES:
            raise ValueError(f"unknown message_concurrency strategy {strategy!r}")
        delay = options.get("debounce_ms", options.get("debounceMs", DEFAULT_DEBOUNCE_MS))
        # An invalid delay falls back to the default rather than failing every send.
        valid = isinstance(delay, int | float) and not isinstance(delay, bool) and delay >= 0
        return cls(strategy, int(delay) if valid else DEFAULT_DEBOUNCE_MS)


def merge_user_messages(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """One user message out of a run of them: text parts joined by a blank line, other parts
    appended in order, id, role and metadata of the last."""
    last = messages[-1]
    texts = [
        str(part.get("text", ""))
        for message in messages
        for part in message.get("parts") or []
        if isinstance(part, dict) and part.get("type") == "text"
    ]
    others = [
        part
        for message in messages
        for part in message.get("parts") or []
        if isinstance(part, dict) and part.get("type") != "text"
    ]
    merged: dict[str, Any] = {
        "id": last["id"],
        "role": last.get("role", "user"),
        "parts": [{"type": "text", "text": "\n\n".join(texts)}, *others],
    }
    if "metadata" in last:
        merged["metadata"] = last["metadata"]
    return merged
