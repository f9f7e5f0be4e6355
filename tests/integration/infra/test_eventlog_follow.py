"""The event log port's follower, on memory and on a real Redis: many logs at once, entries after
a given id, in order and once, new logs picked up at once, failing handlers."""

from __future__ import annotations

import asyncio

from durachat_infra.eventlog import Kind, LogEntry, entry_id_key
from support.log_backends import LogBackend
from support.waiting import eventually


async def _has(entries: list[LogEntry], n: int) -> bool:
    await asyncio.sleep(0)
    return len(entries) >= n


async def test_reader_follows_many_logs_and_picks_up_new_ones(log_backend: LogBackend) -> None:
    reader = log_backend.follower(block_ms=10_000)
    await reader.start()
    writer = log_backend.writer()
    seen: dict[str, list[LogEntry]] = {"a": [], "b": []}
    a = log_backend.keys("a")
    b = log_backend.keys("b")
    reader.follow(a, "0-0", seen["a"].extend)
    writer.append(a, Kind.FRAME, '{"x":1}')
    await eventually(lambda: _has(seen["a"], 1))
    # A log followed while the reader is blocked is picked up at once, not after block_ms.
    reader.follow(b, "0-0", seen["b"].extend)
    for i in range(3):
        writer.append(b, Kind.FRAME, f'{{"y":{i}}}')
    await eventually(lambda: _has(seen["b"], 3), timeout=5)
    ids = [entry_id_key(e.id) for e in seen["b"]]
    assert ids == sorted(ids)
    reader.unfollow(a)
    writer.append(a, Kind.FRAME, '{"x":2}')
    writer.append(b, Kind.FRAME, '{"y":3}')
    await eventually(lambda: _has(seen["b"], 4))
    assert len(seen["a"]) == 1


async def test_follow_delivers_the_entries_after_an_id_in_order_and_once(
    log_backend: LogBackend,
) -> None:
    keys = log_backend.keys("after")
    writer = log_backend.writer()
    old = [writer.append_waitable(keys, Kind.CHUNK, f'{{"n":{i}}}', request="r") for i in range(5)]
    ids = list(await asyncio.gather(*old))
    reader = log_backend.follower()
    seen: list[LogEntry] = []
    batches: list[int] = []

    def handle(entries: list[LogEntry]) -> None:
        batches.append(len(entries))
        seen.extend(entries)

    await reader.start()
    reader.follow(keys, ids[2], handle)
    await eventually(lambda: _has(seen, 2))
    for i in range(5, 40):
        writer.append(keys, Kind.CHUNK, f'{{"n":{i}}}', request="r")
        if i % 7 == 0:
            await writer.flush()
    await eventually(lambda: _has(seen, 37))

    assert [e.frame for e in seen] == [f'{{"n":{i}}}' for i in range(3, 40)]
    assert [e.id for e in seen[:2]] == ids[3:]
    assert sum(batches) == len(seen) == 37


async def test_entries_of_a_log_followed_before_start_arrive_after_start(
    log_backend: LogBackend,
) -> None:
    keys = log_backend.keys("early")
    writer = log_backend.writer()
    await writer.append_waitable(keys, Kind.FRAME, '{"early":1}')
    reader = log_backend.follower()
    seen: list[LogEntry] = []
    reader.follow(keys, "0-0", seen.extend)

    await reader.start()
    writer.append(keys, Kind.FRAME, '{"late":1}')

    await eventually(lambda: _has(seen, 2))
    assert [e.frame for e in seen] == ['{"early":1}', '{"late":1}']


async def test_a_failing_handler_does_not_stop_delivery(log_backend: LogBackend) -> None:
    broken, fine = log_backend.keys("broken"), log_backend.keys("fine")
    reader = log_backend.follower()
    await reader.start()
    writer = log_backend.writer()
    calls: list[list[str]] = []
    seen: list[LogEntry] = []

    def explode_once(entries: list[LogEntry]) -> None:
        calls.append([e.frame for e in entries])
        if len(calls) == 1:
            raise RuntimeError("handler bug")

    reader.follow(broken, "0-0", explode_once)
    reader.follow(fine, "0-0", seen.extend)
    await writer.append_waitable(broken, Kind.FRAME, '{"n":1}')
    await eventually(lambda: _calls(calls, 1))
    writer.append(broken, Kind.FRAME, '{"n":2}')
    writer.append(fine, Kind.FRAME, '{"ok":1}')

    await eventually(lambda: _calls(calls, 2))
    await eventually(lambda: _has(seen, 1))
    # The failed entries are not handed over again; the later ones still are.
    assert calls == [['{"n":1}'], ['{"n":2}']]


async def test_a_stopped_reader_delivers_nothing(log_backend: LogBackend) -> None:
    stopped, watcher = log_backend.keys("stopped"), log_backend.keys("watcher")
    reader, other = log_backend.follower(), log_backend.follower()
    await reader.start()
    await other.start()
    seen: list[LogEntry] = []
    witness: list[LogEntry] = []
    reader.follow(stopped, "0-0", seen.extend)
    other.follow(stopped, "0-0", witness.extend)
    other.follow(watcher, "0-0", witness.extend)

    await reader.stop()
    writer = log_backend.writer()
    writer.append(stopped, Kind.FRAME, '{"n":1}')
    writer.append(watcher, Kind.FRAME, '{"n":2}')

    # The other reader got both entries, so the stopped one had every chance to see its own.
    await eventually(lambda: _has(witness, 2))
    assert seen == []


async def _calls(calls: list[list[str]], n: int) -> bool:
    await asyncio.sleep(0)
    return len(calls) >= n
