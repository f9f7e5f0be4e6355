"""Following one reply stream: timing its chunks and checking that each arrived exactly once.

A `ReplyStream` is fed the `cf_agent_use_chat_response` frames of one request id, live or
replayed after a reconnect (docs/protocol.md#resume-handshake). It times the chunks for an
`Observer` and records what went wrong. The checks hold for any server speaking the agents chat
protocol: with `seq` numbers (durachat sends them) every chunk is matched by number; without
them, a replay is matched by position against what arrived before the drop.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Final, Protocol

from durachat.messages import StreamAccumulator
from durachat.types import JSONDict, UIMessage

STRUCTURAL: Final = frozenset({"start", "start-step"})
"""Chunks a server sends before the model says anything: not counted as the first chunk."""

STAMP_KEYS: Final = ("loadtest", "bench")
"""`providerMetadata.<key>.t` (nanoseconds since the epoch) stamps when a chunk left the model:
`loadtest-agent` (durachat.loadtest.agent) and the benchmark's agent set it."""


class Observer(Protocol):
    """Receives the timings of a stream (milliseconds)."""

    def chunk(self) -> None:
        """A chunk was accepted (each chunk once, replays of known chunks excluded)."""

    def first_chunk(self, ms: float) -> None:
        """Time from the request (or tool answer) to the first chunk that is not structural."""

    def chunk_gap(self, ms: float) -> None:
        """Time between two consecutive chunks of the reply."""

    def delivery(self, ms: float) -> None:
        """Time from the server's stamp on a chunk to its arrival."""

    def resume_gap(self, ms: float) -> None:
        """Time from losing the connection to the first chunk not received before."""


@dataclass(frozen=True, slots=True)
class PendingCall:
    """A tool call the reply ended with that waits for this client."""

    tool_call_id: str
    tool_name: str
    needs_approval: bool


def chunk_stamp(chunk: JSONDict) -> int | None:
    """The server's stamp on a chunk (ns since the epoch), if it has one."""
    meta = chunk.get("providerMetadata")
    if not isinstance(meta, dict):
        return None
    for key in STAMP_KEYS:
        entry = meta.get(key)
        if isinstance(entry, dict) and isinstance(entry.get("t"), int):
            return int(entry["t"])
    return None


@dataclass
class ReplyStream:
    """One request's reply as this client receives it."""

    request_id: str
    sent_at: float
    observer: Observer
    continuation: bool = False
    accepted: list[tuple[int | None, str]] = field(default_factory=list)
    by_seq: dict[int, str] = field(default_factory=dict)
    next_seq: int = 0
    problems: list[str] = field(default_factory=list)
    error_texts: list[str] = field(default_factory=list)
    outcome: str | None = None
    done_at: float | None = None
    first_chunk_at: float | None = None
    last_chunk_at: float | None = None
    dropped_at: float | None = None
    replaying: bool = False
    replay_pos: int = 0
    replay_ended_at: float | None = None
    replayed: int = 0
    accumulator: StreamAccumulator = field(default_factory=StreamAccumulator)

    @property
    def done(self) -> bool:
        """Whether the terminal frame arrived."""
        return self.done_at is not None

    def on_frame(self, frame: JSONDict, now: float, wall_ns: int) -> None:
        """Take one response frame of this request (`now`: perf_counter seconds; `wall_ns`:
        time.time_ns() at arrival)."""
        if frame.get("continuation"):
            self.continuation = True
        replay = bool(frame.get("replay"))
        body = frame.get("body")
        if frame.get("error"):
            self.error_texts.append(str(body))
            if frame.get("done"):
                self._finish(now, frame.get("outcome") or "error")
            return
        if frame.get("done"):
            self._finish(now, frame.get("outcome"))
            return
        if replay and frame.get("replayComplete"):
            self.replaying = False
            self.replay_ended_at = now
            return
        if isinstance(body, str) and body:
            seq = frame.get("seq")
            self._chunk(seq if isinstance(seq, int) else None, body, replay, now, wall_ns)

    def dropped(self, now: float) -> None:
        """The connection was lost while the reply streamed."""
        if not self.done:
            self.dropped_at = now
            self.replaying = False

    def replay_started(self) -> None:
        """The client ACKed the server's resume offer: a replay from the start follows."""
        self.replaying = True
        self.replay_pos = 0

    def failure(self) -> str | None:
        """Why the reply counts as failed (a short code), or None."""
        if self.error_texts:
            return "error_frame"
        if self.outcome not in (None, "completed"):
            return f"outcome_{self.outcome}"
        if self.problems:
            return self.problems[0]
        return None

    def message(self) -> UIMessage:
        """The assistant message the accepted chunks make."""
        return self.accumulator.to_message()

    def text(self) -> str:
        """The reply's text."""
        parts = self.accumulator.parts
        return "".join(str(p.get("text", "")) for p in parts if p.get("type") == "text")

    def pending_calls(self) -> list[PendingCall]:
        """The tool calls that wait for this client: an approval, or a client tool's output."""
        calls: list[PendingCall] = []
        for part in self.accumulator.parts:
            kind = str(part.get("type", ""))
            if not (kind.startswith("tool-") or kind == "dynamic-tool"):
                continue
            name = str(part.get("toolName", "")) if kind == "dynamic-tool" else kind[5:]
            state = part.get("state")
            if state in ("approval-requested", "input-available"):
                calls.append(
                    PendingCall(str(part.get("toolCallId")), name, state == "approval-requested")
                )
        return calls

    def tool_outputs(self) -> int:
        """How many tool parts of the reply have an output."""
        return sum(1 for p in self.accumulator.parts if p.get("state") == "output-available")

    def _finish(self, now: float, outcome: object) -> None:
        if self.done:
            self.problems.append("duplicate_terminal")
            return
        self.done_at = now
        self.replaying = False
        self.outcome = outcome if isinstance(outcome, str) else "completed"
        if self.by_seq and len(self.by_seq) != max(self.by_seq) + 1:
            self.problems.append("missing_chunks")

    def _chunk(self, seq: int | None, body: str, replay: bool, now: float, wall_ns: int) -> None:
        if self.done:
            self.problems.append("chunk_after_terminal")
            return
        if replay:
            self.replayed += 1
            position = self.replay_pos
            self.replay_pos += 1
            known = self.by_seq.get(seq) if seq is not None else None
            if known is None and seq is None and position < len(self.accepted):
                known = self.accepted[position][1]
            if known is not None:
                if known != body:
                    self.problems.append("replay_mismatch")
                return
        elif seq is not None:
            if seq in self.by_seq:
                self.problems.append("duplicate_chunk")
                return
            if seq != self.next_seq:
                self.problems.append("seq_gap")
        self._accept(seq, body, replay, now, wall_ns)

    def _accept(self, seq: int | None, body: str, replay: bool, now: float, wall_ns: int) -> None:
        self.accepted.append((seq, body))
        if seq is not None:
            self.by_seq[seq] = body
            self.next_seq = max(self.next_seq, seq + 1)
        try:
            chunk = json.loads(body)
        except ValueError:
            self.problems.append("invalid_chunk")
            return
        if not isinstance(chunk, dict):
            self.problems.append("invalid_chunk")
            return
        self.observer.chunk()
        self.accumulator.apply(chunk)
        if self.dropped_at is not None:
            self.observer.resume_gap((now - self.dropped_at) * 1000)
            self.dropped_at = None
        elif self.first_chunk_at is None:
            if chunk.get("type") not in STRUCTURAL:
                self.first_chunk_at = now
                self.observer.first_chunk((now - self.sent_at) * 1000)
        elif self.last_chunk_at is not None:
            self.observer.chunk_gap((now - self.last_chunk_at) * 1000)
        self.last_chunk_at = now
        stamp = chunk_stamp(chunk)
        if stamp is not None and not replay:
            self.observer.delivery((wall_ns - stamp) / 1e6)
