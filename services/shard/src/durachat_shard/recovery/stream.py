"""What an interrupted turn left in the event log, and how a recovered stream joins onto it.

A turn's owner writes every chunk to the conversation's event log before anyone sees it, so the
log holds exactly what clients received. The next owner reads the turn's stream back
(`rebuild_stream`), rebuilds the partial reply from it, and continues the turn under the same
request id: `Splice` rewrites the recovered model stream so that, to a client, it is the rest of
the stream it was already reading (no second `start`, the open text block continues).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from durachat.types import UIChunk
from durachat_infra.eventlog import Kind, LogEntry

PROGRESS_CHUNKS = frozenset(
    {
        "text-start",
        "text-delta",
        "reasoning-start",
        "reasoning-delta",
        "tool-input-start",
        "tool-input-delta",
        "tool-input-available",
        "tool-output-available",
        "tool-output-error",
        "tool-output-denied",
    }
)
"""Chunk types that count as progress of a turn (the reference's milestones and deltas)."""


@dataclass(slots=True)
class RebuiltStream:
    """The part of one request's stream that reached the event log."""

    request_id: str
    stream_id: str = ""
    """Id of the entry that started the stream ("" if it never started)."""
    chunks: list[UIChunk] = field(default_factory=list)
    """The chunks clients received, in order."""
    next_seq: int = 0
    """The `seq` the next chunk of the stream must carry."""
    ended: bool = False
    """A terminal frame was written: the stream is over."""
    continuation: bool = False
    """The stream's frames carry `continuation: true`."""
    base_id: str | None = None
    """For a continuation: the assistant message it extends."""
    base_parts: int = 0
    """For a continuation: how many parts that message had when the stream started."""
    traceparent: str = ""
    """The W3C traceparent of the turn that started the stream, when it was traced."""

    @property
    def progress(self) -> int:
        """How many chunks of the stream count as progress."""
        return sum(1 for c in self.chunks if c.get("type") in PROGRESS_CHUNKS)


def rebuild_stream(entries: list[LogEntry], request_id: str) -> RebuiltStream:
    """Collect the stream of `request_id` from a conversation's log entries (oldest first).

    Only the request's latest stream counts (a retried request starts a new one).
    """
    rebuilt = RebuiltStream(request_id)
    for entry in entries:
        if entry.request != request_id:
            continue
        if entry.kind is Kind.CONTROL:
            control = entry.control()
            if control.get("op") == "start":
                base = control.get("base")
                rebuilt = RebuiltStream(
                    request_id,
                    stream_id=entry.id,
                    continuation=bool(control.get("cont")),
                    base_id=base if isinstance(base, str) else None,
                    base_parts=int(control.get("baseParts") or 0),
                    traceparent=str(control.get("tp") or ""),
                )
        elif entry.kind is Kind.CHUNK:
            frame = json.loads(entry.frame)
            if frame.get("error") or not isinstance(frame.get("body"), str):
                continue
            rebuilt.chunks.append(json.loads(frame["body"]))
            seq = frame.get("seq")
            if isinstance(seq, int):
                rebuilt.next_seq = max(rebuilt.next_seq, seq + 1)
        elif entry.kind is Kind.TERMINAL:
            rebuilt.ended = True
    return rebuilt


class Splice:
    """Rewrites a recovered model stream into the continuation of an interrupted one.

    Given the chunks clients already have, it drops a second `start`, drops a `start-step`
    while the interrupted step is still open, and folds the first new text (or reasoning)
    block into the block that was open when the stream broke, under that block's id.
    """

    def __init__(self, sent: list[UIChunk]) -> None:
        self._started = False
        self._step_open = False
        self._open: dict[str, str] = {}
        for chunk in sent:
            kind = chunk.get("type")
            if kind == "start":
                self._started = True
            elif kind == "start-step":
                self._step_open = True
            elif kind == "finish-step":
                self._step_open = False
            elif kind in ("text-start", "reasoning-start"):
                self._open[str(kind).split("-")[0]] = str(chunk.get("id"))
            elif kind in ("text-end", "reasoning-end"):
                block = str(kind).split("-")[0]
                if self._open.get(block) == str(chunk.get("id")):
                    del self._open[block]
        self._renamed: dict[tuple[str, str], str] = {}

    def __call__(self, chunk: UIChunk) -> UIChunk | None:
        """The chunk to pass on (possibly rewritten), or None to drop it."""
        kind = chunk.get("type")
        if kind == "start" and self._started:
            return None
        if kind == "start-step" and self._step_open:
            self._step_open = False
            return None
        if kind in ("text-start", "reasoning-start"):
            block = str(kind).split("-")[0]
            open_id = self._open.pop(block, None)
            if open_id is not None:
                self._renamed[(block, str(chunk.get("id")))] = open_id
                return None
            return chunk
        if kind in ("text-delta", "text-end", "reasoning-delta", "reasoning-end"):
            block = str(kind).split("-")[0]
            renamed = self._renamed.get((block, str(chunk.get("id"))))
            if renamed is not None:
                return {**chunk, "id": renamed}
        return chunk
