"""`run_transaction` on every backend: writes queued together keep their order and their own
outcomes; on SQLite, a write waiting for an outside writer never stops the event loop."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from sqlalchemy import event

from durachat_infra.store import (
    ConversationKey,
    FencedError,
    Store,
    StoreError,
)
from durachat_infra.store.port import StorePort, TransactionPort
from support.databases import SQLiteDatabases
from support.waiting import eventually


@pytest.fixture
async def sqlite_store(sqlite_databases: SQLiteDatabases) -> AsyncIterator[tuple[Store, str]]:
    url = await sqlite_databases.create(migrated=True)
    store = Store.from_url(url)
    yield store, url
    await store.close()
    await sqlite_databases.drop(url)


async def _claimed(store: StorePort, name: str) -> int:
    conversation = await store.get_or_create_conversation(ConversationKey("default", "a", name))
    await store.claim(conversation.id, 1)
    return conversation.id


async def test_writes_queued_together_each_get_their_own_result(store: StorePort) -> None:
    conversation_id = await _claimed(store, "order")

    def append(i: int) -> Callable[[TransactionPort], Awaitable[int]]:
        async def work(tx: TransactionPort) -> int:
            [pk] = await tx.insert_chain(None, [{"id": f"m{i}", "role": "user", "parts": []}])
            return pk

        return work

    pks = await asyncio.gather(
        *(store.run_transaction(conversation_id, 1, append(i)) for i in range(60))
    )
    assert len(set(pks)) == 60


async def test_sqlite_runs_writes_queued_together_in_their_order(
    sqlite_store: tuple[Store, str],
) -> None:
    store, _ = sqlite_store
    conversation_id = await _claimed(store, "order")

    def append(i: int) -> Callable[[TransactionPort], Awaitable[int]]:
        async def work(tx: TransactionPort) -> int:
            [pk] = await tx.insert_chain(None, [{"id": f"m{i}", "role": "user", "parts": []}])
            return pk

        return work

    pks = await asyncio.gather(
        *(store.run_transaction(conversation_id, 1, append(i)) for i in range(60))
    )
    # Each write ran after the ones queued before it: keys grow in the order of queueing.
    assert pks == sorted(pks)
    assert len(set(pks)) == 60


async def test_a_failed_write_fails_alone(store: StorePort) -> None:
    good = await _claimed(store, "good")
    stale = await _claimed(store, "stale")
    await store.claim(stale, 2)

    async def add(tx: TransactionPort) -> None:
        await tx.insert_chain(None, [{"id": "x", "role": "user", "parts": []}])

    results = await asyncio.gather(
        store.run_transaction(good, 1, add),
        store.run_transaction(stale, 1, add),  # fenced: epoch 2 is stored
        store.run_transaction(good, 1, add),
        return_exceptions=True,
    )
    assert results[0] is None and results[2] is None
    assert isinstance(results[1], FencedError)
    assert len(await store.load_path(good)) == 0  # no branch moved, but the rows exist
    assert len(await store.load_path(stale)) == 0


async def test_an_exception_in_work_rolls_back_only_that_write(store: StorePort) -> None:
    conversation_id = await _claimed(store, "rollback")

    async def broken(tx: TransactionPort) -> None:
        [pk] = await tx.insert_chain(None, [{"id": "lost", "role": "user", "parts": []}])
        await tx.set_leaf("main", pk)
        raise RuntimeError("the work failed")

    async def fine(tx: TransactionPort) -> None:
        [pk] = await tx.insert_chain(None, [{"id": "kept", "role": "user", "parts": []}])
        await tx.set_leaf("main", pk)

    outcome = await asyncio.gather(
        store.run_transaction(conversation_id, 1, broken),
        store.run_transaction(conversation_id, 1, fine),
        return_exceptions=True,
    )
    assert isinstance(outcome[0], RuntimeError | StoreError)
    assert outcome[1] is None
    assert [m.message["id"] for m in await store.load_path(conversation_id)] == ["kept"]


async def test_a_write_waiting_for_an_outside_writer_lets_the_loop_run(
    sqlite_store: tuple[Store, str],
) -> None:
    store, url = sqlite_store
    conversation_id = await _claimed(store, "outside")
    outside = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
    outside.execute("BEGIN IMMEDIATE")  # an operator's shell holding the write lock

    async def add(tx: TransactionPort) -> None:
        [pk] = await tx.insert_chain(None, [{"id": "after", "role": "user", "parts": []}])
        await tx.set_leaf("main", pk)

    write = asyncio.ensure_future(store.run_transaction(conversation_id, 1, add))
    gaps: list[float] = []
    last = time.monotonic()
    try:
        for _ in range(30):
            await asyncio.sleep(0.01)
            now = time.monotonic()
            gaps.append(now - last)
            last = now
        assert not write.done(), "the write went through while the lock was held outside"
    finally:
        outside.execute("COMMIT")
        outside.close()
    await asyncio.wait_for(write, 10)
    # The loop kept turning while the write waited (a blocked loop would show a ~5 s gap).
    assert max(gaps) < 1.0, gaps
    assert [m.message["id"] for m in await store.load_path(conversation_id)] == ["after"]


async def test_a_write_gives_up_when_the_outside_lock_outlasts_the_busy_timeout(
    sqlite_store: tuple[Store, str],
) -> None:
    store, url = sqlite_store
    conversation_id = await _claimed(store, "timeout")
    with contextlib.closing(
        sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
    ) as outside:
        outside.execute("BEGIN IMMEDIATE")

        async def add(tx: TransactionPort) -> None:
            await tx.insert_chain(None, [{"id": "never", "role": "user", "parts": []}])

        started = time.monotonic()
        with pytest.raises(StoreError):
            await store.run_transaction(conversation_id, 1, add)
        assert time.monotonic() - started < 15
        outside.execute("ROLLBACK")


async def test_a_lookup_sqlite_refuses_on_the_loop_is_made_again_on_a_reader_thread(
    sqlite_store: tuple[Store, str],
) -> None:
    store, url = sqlite_store
    key = ConversationKey("default", "a", "busy")
    created = await store.get_or_create_conversation(key)
    # SQLite's exclusive locking mode needs every other connection to the file closed.
    await store.close()
    outside = sqlite3.connect(
        url.removeprefix("sqlite:///"), isolation_level=None, check_same_thread=False
    )
    lookups = Store.from_url(url)
    try:
        # A connection in exclusive locking mode keeps the lock it wrote under and refuses
        # readers too: the lookup on the loop's thread fails at once (no busy timeout there).
        outside.execute("PRAGMA locking_mode = EXCLUSIVE")
        outside.execute("BEGIN IMMEDIATE")
        outside.execute("UPDATE conversations SET name = name WHERE id = ?", (created.id,))
        outside.execute("COMMIT")
        on_reader_thread = threading.Event()
        event.listen(lookups.engine.sync_engine, "do_connect", lambda *_: on_reader_thread.set())
        lookup = asyncio.ensure_future(lookups.find_conversation(key))

        async def waiting_on_a_reader_thread() -> bool:
            assert not lookup.done() or lookup.exception() is None, lookup.exception()
            return on_reader_thread.is_set()

        await eventually(waiting_on_a_reader_thread)
    finally:
        outside.close()
    try:
        found = await asyncio.wait_for(lookup, 10)
        assert found is not None and found.id == created.id
    finally:
        await lookups.close()
