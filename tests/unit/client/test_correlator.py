"""The client's correlator: requests waiting for the server's answers (resume probes and branch
requests alike), and the operation an error that names no request belongs to."""

from __future__ import annotations

import asyncio

import pytest

from durachat.client import ClientError
from durachat.client.correlator import Answer, Correlator
from durachat.client.reply import new_reply

pytestmark = pytest.mark.timeout(10)


async def test_answers_come_in_order_and_an_error_after_them() -> None:
    correlator = Correlator()
    with correlator.waiting("op", "op-1") as waiter:
        waiter.answer(Answer("moved"))
        waiter.answer(Answer("answer", frame={"status": 200}))
        waiter.fail(ClientError("disconnected", "the socket dropped"))
        assert (await waiter.next()).kind == "moved"
        answer = await waiter.next()
        assert answer.kind == "answer" and answer.frame == {"status": 200}
        with pytest.raises(ClientError) as raised:
            await waiter.next()
        assert raised.value.code == "disconnected"


async def test_a_waiter_waits_until_answered() -> None:
    correlator = Correlator()
    with correlator.waiting("probe", "p1") as waiter:
        pending = asyncio.ensure_future(waiter.next())
        found = correlator.find("p1", "probe")
        assert found is waiter
        found.answer(Answer("none"))
        assert (await pending).kind == "none"


async def test_waiters_are_found_by_key_and_kind_while_they_wait() -> None:
    correlator = Correlator()
    with correlator.waiting("probe", "p1") as probe, correlator.waiting("op", "o1") as op:
        assert correlator.find("p1", "probe") is probe
        assert correlator.find("o1", "op") is op
        # A key answers only for the kind it was registered with.
        assert correlator.find("p1", "op") is None
        assert correlator.find("nope", "probe") is None
        assert correlator.of_kind("probe") == [probe]
        assert correlator.of_kind("list") == []
    assert correlator.find("p1", "probe") is None
    assert correlator.of_kind("op") == []


async def test_an_error_belongs_to_the_last_operation_still_waiting() -> None:
    correlator = Correlator()
    assert correlator.take_last() is None
    reply = new_reply("r1", observed=False)
    correlator.note_sent(reply)
    assert correlator.take_last() is reply
    assert correlator.take_last() is None  # taken: a second error belongs to nothing
    with correlator.waiting("list", "l1") as waiter:
        assert correlator.take_last() is waiter
        correlator.note_sent(waiter)  # put back: the error was not its own
    # Its block ended: it waits no more.
    assert correlator.take_last() is None
    correlator.note_sent(reply)
    correlator.note_sent(None)  # a cancel or a clear: an error then belongs to nothing
    assert correlator.take_last() is None


async def test_a_waiter_that_ended_leaves_a_later_operation_last() -> None:
    correlator = Correlator()
    reply = new_reply("r1", observed=False)
    with correlator.waiting("probe", "p1"):
        correlator.note_sent(reply)
    assert correlator.take_last() is reply


async def test_fail_all_fails_every_kind_of_waiter() -> None:
    correlator = Correlator()
    error = ClientError("closed", "the client was closed")
    with correlator.waiting("probe", "p1") as probe, correlator.waiting("switch", "s1") as switch:
        correlator.fail_all(error)
        for waiter in (probe, switch):
            with pytest.raises(ClientError) as raised:
                await waiter.next()
            assert raised.value is error
