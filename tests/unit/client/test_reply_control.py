"""A reply's control, which the client drives with response frames: chunks in `seq` order,
replays and gaps, how the reply ends, and what the `Reply` users hold shows of it."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from durachat.client import ClientError
from durachat.client.reply import new_reply
from durachat.client.reply_control import ReplyControl

pytestmark = pytest.mark.timeout(10)

CHUNKS: list[dict[str, Any]] = [
    {"type": "start", "messageId": "a1"},
    {"type": "text-start", "id": "t"},
    {"type": "text-delta", "id": "t", "delta": "hello"},
    {"type": "text-end", "id": "t"},
    {"type": "finish"},
]


def chunk(seq: int, **flags: Any) -> dict[str, Any]:
    return {"id": "r1", "body": json.dumps(CHUNKS[seq]), "done": False, "seq": seq, **flags}


def end(**flags: Any) -> dict[str, Any]:
    return {"id": "r1", "body": "", "done": True, **flags}


def control() -> ReplyControl:
    return new_reply("r1", observed=False, user_message_id="u1")


async def test_chunks_in_seq_order_assemble_the_message() -> None:
    reply = control()
    assert reply.needs_seed and not reply.received
    for seq in range(len(CHUNKS)):
        assert reply.handle(chunk(seq))
    assert not reply.handle(chunk(2))  # a duplicate changes nothing
    reply.handle(end())
    assert reply.done and reply.reply.outcome == "completed"
    assert reply.reply.chunks == CHUNKS
    assert reply.reply.message_id == "a1"
    assert await reply.reply.text() == "hello"
    assert [c async for c in reply.reply] == CHUNKS  # iterable again after the end


async def test_a_gap_is_repaired_by_one_replay() -> None:
    reply = control()
    reply.handle(chunk(0))
    assert not reply.handle(chunk(2))  # chunk 1 is missing
    assert reply.take_gap()
    assert not reply.take_gap()  # asked once
    reply.begin_replay()  # what an ACK starts

    def replaying() -> bool:  # read afresh each time (mypy would narrow the attribute)
        return reply.reply.replaying

    assert replaying()
    assert not reply.handle(chunk(3))  # live, still behind the replay
    for seq in range(4):
        reply.handle(chunk(seq, replay=True))
    reply.handle({"id": "r1", "body": "", "done": False, "replay": True, "replayComplete": True})
    assert not replaying()
    reply.handle(chunk(4))
    assert reply.reply.chunks == CHUNKS


async def test_a_gap_on_a_socket_that_already_asked_goes_on_with_what_there_is() -> None:
    reply = control()
    reply.handle(chunk(0))
    reply.handle(chunk(2))
    assert reply.take_gap()
    assert reply.handle(chunk(3))  # no replay came: chunk 3 is taken as it is
    assert not reply.take_gap()
    reply.new_socket()  # on a new socket a gap may be repaired again
    assert not reply.handle({**chunk(4), "seq": 5})
    assert reply.take_gap()


async def test_a_recovering_replay_without_chunks_orphans_the_reply() -> None:
    reply = control()
    reply.handle(chunk(0))
    reply.begin_replay(recovering=True)
    reply.handle(end(replay=True))
    assert not reply.done and not reply.reply.replaying
    assert reply.take_orphaned()
    assert not reply.take_orphaned()
    reply.adopt({"id": "a1", "role": "assistant", "parts": [{"type": "text", "text": "stored"}]})
    assert reply.reply.outcome == "completed"
    assert await reply.reply.text() == "stored"


async def test_a_live_end_does_not_overtake_the_replay() -> None:
    reply = control()
    reply.begin_replay()
    reply.handle(end(outcome="aborted"))
    assert not reply.done
    reply.handle(chunk(0, replay=True))
    reply.handle(end(replay=True, outcome="aborted"))
    assert reply.reply.outcome == "aborted"


async def test_a_rejection_ends_only_a_reply_that_received_nothing() -> None:
    refused = ClientError("invalid_messages", "no")
    fresh = control()
    assert fresh.reject(refused)
    assert fresh.reply.outcome == "error" and fresh.reply.error is refused

    streaming = control()
    streaming.handle(chunk(0))
    assert not streaming.reject(refused)
    assert not streaming.done and streaming.reply.error is None

    # A rejected request first gets an error terminal frame, then the `durachat_error`,
    # whose code is the better error.
    rejected = control()
    rejected.handle({"id": "r1", "body": "bad", "done": True, "error": True, "outcome": "error"})
    assert rejected.reply.error is not None and rejected.reply.error.code == "stream_error"
    assert not rejected.reject(refused)
    assert rejected.reply.error is refused


async def test_a_detached_reply_stays_out_of_the_transcript() -> None:
    messages = [{"id": "u1", "role": "user", "parts": []}]
    reply = control()
    assert reply.merge_into(messages) is messages  # nothing assembled yet
    reply.handle(chunk(0))
    merged = reply.merge_into(messages)
    assert [m["id"] for m in merged] == ["u1", "a1"] and merged is not messages
    reply.detach()
    assert reply.merge_into(messages) is messages


async def test_final_follows_the_continuations() -> None:
    first, second = control(), new_reply("r2", observed=True)
    follow: asyncio.Future[ReplyControl | None] = asyncio.get_running_loop().create_future()
    first.follow = follow
    first.finish("completed")
    follow.set_result(second)
    second.finish("completed")
    assert await first.reply.final() is second.reply
