"""The write chain: queued writes commit one at a time, in queue order; a failed one takes the
writes queued after it down with it and is reported; `run` is ordered but its errors are the
caller's."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from durachat_infra.store import DatabaseUnavailableError, FencedError
from durachat_shard.actor.writes import WriteChain
from support.actor_memory import MemoryDatabase, MemoryTransaction

pytestmark = pytest.mark.timeout(10)


Write = Callable[[MemoryTransaction], Awaitable[None]]


def note(label: str, *, before: asyncio.Event | None = None) -> Write:
    """A write that records `label` (after waiting for `before`, if given)."""

    async def write(tx: MemoryTransaction) -> None:
        if before is not None:
            await before.wait()
        await tx.note(label)

    return write


def refused(label: str) -> Write:
    async def write(tx: MemoryTransaction) -> None:
        await tx.note(label)
        raise DatabaseUnavailableError("the database went away")

    return write


def chain(db: MemoryDatabase) -> tuple[WriteChain[MemoryTransaction], list[BaseException]]:
    failures: list[BaseException] = []
    return WriteChain(db.run_transaction, on_failure=failures.append), failures


async def test_writes_commit_one_at_a_time_in_the_order_they_were_queued() -> None:
    db = MemoryDatabase()
    writes, failures = chain(db)
    slow = asyncio.Event()
    first = writes.behind(note("first", before=slow))
    second = writes.behind(note("second"))
    third = writes.behind(note("third"))
    # Queuing never waits: nothing has run yet, and the later writes wait for the slow one.
    assert not first.done() and not second.done() and db.committed == []
    await asyncio.sleep(0)
    assert db.committed == []
    slow.set()
    await third
    assert db.ops == [("note", "first"), ("note", "second"), ("note", "third")]
    assert db.most_open == 1
    assert failures == []


async def test_write_waits_for_its_own_commit() -> None:
    db = MemoryDatabase()
    writes, _ = chain(db)
    writes.behind(note("queued"))
    await writes.write(note("awaited"))
    assert db.ops == [("note", "queued"), ("note", "awaited")]


async def test_a_failed_write_fails_every_write_queued_after_it() -> None:
    db = MemoryDatabase()
    writes, failures = chain(db)
    ok = writes.behind(note("ok"))
    bad = writes.behind(refused("bad"))
    after = writes.behind(note("after"))
    results = await asyncio.gather(ok, bad, after, return_exceptions=True)
    assert results[0] is None
    assert isinstance(results[1], DatabaseUnavailableError)
    # The same error: memory is ahead of the database, nothing more may be applied.
    assert results[2] is results[1]
    assert db.ops == [("note", "ok")]
    assert db.rolled_back == [[("note", "bad")]]
    assert failures == [results[1], results[1]]


async def test_a_fenced_chain_applies_nothing_and_reports_it() -> None:
    db = MemoryDatabase(fenced=True)
    writes, failures = chain(db)
    with pytest.raises(FencedError):
        await writes.write(note("late"))
    assert db.committed == []
    assert len(failures) == 1 and isinstance(failures[0], FencedError)


async def test_run_comes_after_the_queued_writes_and_returns_its_result() -> None:
    db = MemoryDatabase()
    writes, _ = chain(db)
    slow = asyncio.Event()
    writes.behind(note("queued", before=slow))

    async def count(tx: MemoryTransaction) -> int:
        await tx.note("run")
        return len(db.committed)

    running = asyncio.ensure_future(writes.run(count))
    await asyncio.sleep(0)
    assert not running.done()
    slow.set()
    assert await running == 1
    assert db.ops == [("note", "queued"), ("note", "run")]


async def test_an_error_in_run_is_the_callers_and_the_chain_goes_on() -> None:
    db = MemoryDatabase()
    writes, failures = chain(db)

    async def broken(tx: MemoryTransaction) -> int:
        await tx.note("half")
        raise ValueError("no such branch")

    with pytest.raises(ValueError, match="no such branch"):
        await writes.run(broken)
    await writes.write(note("next"))
    assert db.ops == [("note", "next")]
    assert db.rolled_back == [[("note", "half")]]
    assert failures == []


async def test_settled_waits_for_everything_queued_and_swallows_failures() -> None:
    db = MemoryDatabase()
    writes, _ = chain(db)
    slow = asyncio.Event()
    writes.behind(note("first", before=slow))
    writes.behind(refused("second"))
    settling = asyncio.ensure_future(writes.settled())
    await asyncio.sleep(0)
    assert not settling.done()
    slow.set()
    await settling
    assert db.ops == [("note", "first")]
