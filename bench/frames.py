"""Micro-benchmark of building a chunk frame, the frame the server builds once per streamed chunk
(`python -m bench.frames`).

It times what the shard's emitter does per chunk: serialise the UI chunk, build the
`cf_agent_use_chat_response` frame around it with `durachat.protocol.server_frames.chunk_frame`,
and serialise that with `encode_json`; and, as the reference, the way frames were built before
there were constructors (a dict literal and `json.dumps` with options, twice). It checks that
both give the same text, and prints the best time of a few repeats, in nanoseconds per frame.
"""

from __future__ import annotations

import argparse
import json
import timeit
from collections.abc import Callable
from typing import Any

from durachat.protocol import MessageType, encode_json
from durachat.protocol.server_frames import chunk_frame
from durachat.types import UIChunk

CHUNK: UIChunk = {"type": "text-delta", "id": "txt-0", "delta": "word° "}
REQUEST_ID = "kT3m9xQa"


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def hand_built(seq: int, continuation: bool) -> str:
    """A chunk frame as the emitter built it by hand before (the reference)."""
    frame: dict[str, Any] = {
        "body": _dumps(CHUNK),
        "done": False,
        "id": REQUEST_ID,
        "type": MessageType.USE_CHAT_RESPONSE.value,
        "seq": seq,
    }
    if continuation:
        frame["continuation"] = True
    return _dumps(frame)


def constructed(seq: int, continuation: bool) -> str:
    """A chunk frame as the emitter builds it now."""
    frame = chunk_frame(REQUEST_ID, seq, encode_json(CHUNK), continuation=continuation)
    return encode_json(frame)


def time_ns(build: Callable[[int, bool], str], *, continuation: bool, number: int) -> float:
    """The best time of five repeats of `number` builds, in ns per frame."""
    best = min(
        timeit.repeat(lambda: build(17, continuation), number=number, repeat=5),
    )
    return best / number * 1e9


def main(argv: list[str] | None = None) -> int:
    """Run the comparison and print a small table."""
    parser = argparse.ArgumentParser(prog="python -m bench.frames", description=__doc__)
    parser.add_argument("--number", type=int, default=200_000, help="builds per repeat")
    args = parser.parse_args(argv)
    for continuation in (False, True):
        if hand_built(3, continuation) != constructed(3, continuation):
            raise SystemExit("the constructed frame differs from the hand-built one")
    print("chunk frame, ns per frame (best of 5)   hand-built   constructed")
    for continuation in (False, True):
        before = time_ns(hand_built, continuation=continuation, number=args.number)
        after = time_ns(constructed, continuation=continuation, number=args.number)
        label = "continuation" if continuation else "plain"
        print(f"  {label:<37}{before:>10.0f}{after:>14.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
