"""The event log port, on memory and on a real Redis: ordered batched appends, entry ids,
stream state changed atomically with its entry, per-branch state, fencing by the lease, trimming
to about `maxlen`, and one-shot reads (docs/architecture.md#the-event-log)."""

from __future__ import annotations

import asyncio
import json

import pytest

from durachat_infra.eventlog import (
    Kind,
    LogEntry,
    LogFencedError,
    StreamState,
    entry_id_key,
    only,
    state_fields,
)
from durachat_infra.keys import ConversationKeys
from support.log_backends import LogBackend


def frames(entries: list[LogEntry]) -> list[str]:
    return [entry.frame for entry in entries]


def assert_increasing(ids: list[str]) -> None:
    keys = [entry_id_key(i) for i in ids]
    assert keys == sorted(keys) and len(set(keys)) == len(keys), ids


async def write(backend: LogBackend, keys: ConversationKeys, n: int, start: int = 0) -> list[str]:
    """Append `n` chunks `{"n": start..}` and return their ids."""
    writer = backend.writer()
    done = [
        writer.append_waitable(keys, Kind.CHUNK, f'{{"n":{i}}}', request="r")
        for i in range(start, start + n)
    ]
    return list(await asyncio.gather(*done))


async def test_appends_are_ordered_and_batched(log_backend: LogBackend) -> None:
    keys = log_backend.keys("conv1")
    writer = log_backend.writer()
    for i in range(500):
        writer.append(keys, Kind.CHUNK, f'{{"n":{i}}}', request="r1")
    await writer.flush()

    entries = await log_backend.reads().read_range(keys)

    assert frames(entries) == [f'{{"n":{i}}}' for i in range(500)]
    assert all(entry.request == "r1" and entry.kind is Kind.CHUNK for entry in entries)
    assert_increasing([entry.id for entry in entries])


async def test_entries_keep_what_was_appended(log_backend: LogBackend) -> None:
    keys = log_backend.keys("fields")
    writer = log_backend.writer()
    writer.append(keys, Kind.FRAME, '{"a":1}')
    writer.append(keys, Kind.TERMINAL, '{"d":1}', target=only("c1"), request="r1", branch="7")
    change = {"status": "streaming", "req": "r2", "start": "$id"}
    control = writer.append_waitable(
        keys, Kind.CONTROL, '{"op":"start"}', request="r2", state=change
    )
    view = writer.append_waitable(keys, Kind.VIEW, '{"branch":"7"}', target="-c2", branch="*")
    control_id, view_id = await control, await view

    first, terminal, start, moved = await log_backend.reads().read_range(keys)

    assert (first.kind, first.target, first.request, first.state, first.branch) == (
        Kind.FRAME,
        "*",
        "",
        "",
        "",
    )
    assert (terminal.kind, terminal.frame, terminal.target, terminal.request, terminal.branch) == (
        Kind.TERMINAL,
        '{"d":1}',
        "=c1",
        "r1",
        "7",
    )
    # The entry keeps the change as given; `$id` is resolved by whoever applies it.
    assert (start.id, start.request, start.state_change()) == (control_id, "r2", change)
    assert start.control() == {"op": "start"}
    assert (moved.id, moved.kind, moved.target, moved.branch) == (view_id, Kind.VIEW, "-c2", "*")


async def test_state_changes_are_atomic_with_their_entry(log_backend: LogBackend) -> None:
    keys = log_backend.keys("conv2")
    writer = log_backend.writer()
    reads = log_backend.reads()
    writer.append(keys, Kind.CHUNK, '{"before":1}', request="r0")
    start = writer.append_waitable(
        keys,
        Kind.CONTROL,
        '{"op":"start"}',
        request="r1",
        state={"status": "streaming", "req": "r1", "start": "$id", "cont": "1"},
    )
    start_id = await start

    states, last = await reads.snapshot(keys)

    assert states == {"main": StreamState("streaming", "r1", start_id, True)}
    assert last == start_id
    assert await reads.read_state(keys) == states["main"]
    # A later change replaces only the fields it names.
    await asyncio.gather(
        writer.append_waitable(keys, Kind.TERMINAL, "{}", request="r1", state={"status": "done"})
    )
    assert await reads.read_state(keys) == StreamState("done", "r1", start_id, True)


async def test_each_branch_has_its_own_stream_state(log_backend: LogBackend) -> None:
    keys = log_backend.keys("branches")
    writer = log_backend.writer()
    pending = writer.append_waitable(
        keys, Kind.CONTROL, "{}", request="m1", state={"status": "pending", "req": "m1"}
    )
    streaming = writer.append_waitable(
        keys,
        Kind.CONTROL,
        "{}",
        request="b1",
        state=state_fields("42", {"status": "streaming", "req": "b1", "start": "$id"}),
        branch="42",
    )
    await pending
    start_id = await streaming
    reads = log_backend.reads()

    states = await reads.read_states(keys)

    assert states == {
        "main": StreamState("pending", "m1"),
        "42": StreamState("streaming", "b1", start_id),
    }
    assert await reads.read_state(keys, "42") == states["42"]
    assert await reads.read_state(keys, "7") == StreamState()
    assert (await reads.snapshot(keys))[0] == states
    assert await reads.read_states(log_backend.keys("nothing")) == {"main": StreamState()}


async def test_a_writer_without_the_lease_cannot_append(log_backend: LogBackend) -> None:
    keys = log_backend.keys("fenced")
    lost: list[ConversationKeys] = []
    writer = log_backend.writer(owner="old-owner", on_fenced=lost.append)
    await log_backend.set_lease(keys, "old-owner")
    first = writer.append_waitable(keys, Kind.CHUNK, '{"n":1}', request="r")
    assert await first
    await log_backend.set_lease(keys, "new-owner")
    second = writer.append_waitable(keys, Kind.CHUNK, '{"n":2}', request="r")
    with pytest.raises(LogFencedError):
        await second
    assert lost == [keys]
    assert frames(await log_backend.reads().read_range(keys)) == ['{"n":1}']


async def test_a_fenced_batch_is_refused_whole_and_others_go_through(
    log_backend: LogBackend,
) -> None:
    lost, held = log_backend.keys("lost"), log_backend.keys("held")
    refused: list[ConversationKeys] = []
    writer = log_backend.writer(owner="me", on_fenced=refused.append)
    await log_backend.set_lease(lost, None)
    await log_backend.set_lease(held, "me")

    # Appended in one tick: one batch, one script call per conversation.
    results = await asyncio.gather(
        writer.append_waitable(lost, Kind.CONTROL, "{}", request="r", state={"status": "pending"}),
        writer.append_waitable(held, Kind.FRAME, '{"kept":1}'),
        writer.append_waitable(lost, Kind.CHUNK, '{"n":1}', request="r"),
        return_exceptions=True,
    )
    writer.append(lost, Kind.CHUNK, '{"n":2}', request="r")
    await writer.flush()

    assert isinstance(results[0], LogFencedError) and isinstance(results[2], LogFencedError)
    assert isinstance(results[1], str)
    assert refused == [lost, lost]
    reads = log_backend.reads()
    assert await reads.read_range(lost) == []
    assert await reads.read_state(lost) == StreamState()
    assert frames(await reads.read_range(held)) == ['{"kept":1}']


async def test_a_writer_without_an_owner_does_not_check_the_lease(log_backend: LogBackend) -> None:
    keys = log_backend.keys("ownerless")
    await log_backend.set_lease(keys, "someone-else")

    [entry_id] = await write(log_backend, keys, 1)

    assert await log_backend.reads().last_id(keys) == entry_id


async def test_a_log_keeps_about_its_newest_maxlen_entries(log_backend: LogBackend) -> None:
    keys = log_backend.keys("capped")
    writer = log_backend.writer(maxlen=10)
    for i in range(1000):
        writer.append(keys, Kind.CHUNK, f'{{"n":{i}}}', request="r")
    await writer.flush()

    entries = await log_backend.reads().read_range(keys)

    # Redis trims whole nodes (`MAXLEN ~`): at least `maxlen` stay, far fewer than all.
    assert 10 <= len(entries) < 1000
    assert frames(entries) == [f'{{"n":{i}}}' for i in range(1000 - len(entries), 1000)]
    assert await log_backend.reads().first_id(keys) == entries[0].id


async def test_a_log_keeps_its_newest_entries_within_max_bytes(log_backend: LogBackend) -> None:
    keys = log_backend.keys("bytes")
    writer = log_backend.writer(max_bytes=100_000)
    blob = "x" * 10_000
    for i in range(200):
        writer.append(keys, Kind.CHUNK, f'{{"n":{i},"b":"{blob}"}}', request="r")
        if i % 7 == 0:
            await writer.flush()
    await writer.flush()

    entries = await log_backend.reads().read_range(keys)

    # Each entry holds about 10 kB: about ten fit, the newest ones, in order.
    assert 5 <= len(entries) <= 10, len(entries)
    assert [json.loads(e.frame)["n"] for e in entries] == list(range(200 - len(entries), 200))
    assert sum(len(e.frame) for e in entries) <= 100_000


async def test_one_entry_larger_than_max_bytes_is_kept(log_backend: LogBackend) -> None:
    keys = log_backend.keys("huge")
    writer = log_backend.writer(max_bytes=1_000)
    writer.append(keys, Kind.CHUNK, "small", request="r")
    writer.append(keys, Kind.CHUNK, "y" * 5_000, request="r")
    await writer.flush()

    assert frames(await log_backend.reads().read_range(keys)) == ["y" * 5_000]


async def test_entry_ids_keep_increasing_across_batches_and_trims(log_backend: LogBackend) -> None:
    keys = log_backend.keys("ids")
    first = await write(log_backend, keys, 3)
    second = await write(log_backend, keys, 3, start=3)
    await log_backend.maintenance().trim(keys, f"{entry_id_key(second[-1])[0] + 1}-0")
    assert await log_backend.reads().read_range(keys) == []

    third = await write(log_backend, keys, 1, start=6)

    assert_increasing(first + second + third)


async def test_reads_from_an_entry_on(log_backend: LogBackend) -> None:
    keys = log_backend.keys("reads")
    reads = log_backend.reads()
    assert await reads.read_range(keys) == []
    assert await reads.first_id(keys) is None
    assert await reads.last_id(keys) == "0-0"
    assert await reads.snapshot(keys) == ({"main": StreamState()}, "0-0")

    ids = await write(log_backend, keys, 8)

    assert [e.id for e in await reads.read_range(keys, ids[5])] == ids[5:]
    assert [e.id for e in await reads.read_range(keys, "-")] == ids
    assert await reads.first_id(keys) == ids[0]
    assert await reads.last_id(keys) == ids[-1]
    assert (await reads.snapshot(keys))[1] == ids[-1]
    past_the_end = f"{entry_id_key(ids[-1])[0] + 1}-0"
    assert await reads.read_range(keys, past_the_end) == []


async def test_read_range_pages_through_long_logs(log_backend: LogBackend) -> None:
    keys = log_backend.keys("long")
    writer = log_backend.writer()
    for i in range(2500):
        writer.append(keys, Kind.CHUNK, f'{{"n":{i}}}', request="r")
    await writer.flush()
    reads = log_backend.reads()
    first = await reads.first_id(keys)
    assert first is not None

    entries = await reads.read_range(keys, first, page=1000)

    assert frames(entries) == [f'{{"n":{i}}}' for i in range(2500)]


async def test_state_changes_are_json_of_strings(log_backend: LogBackend) -> None:
    keys = log_backend.keys("json")
    writer = log_backend.writer()
    terminal = json.dumps({"req": "r1", "body": 'a "quoted" ünïcode text'})
    await writer.append_waitable(
        keys, Kind.TERMINAL, "{}", request="r1", state={"status": "done", "terminal": terminal}
    )

    state = await log_backend.reads().read_state(keys)

    assert (state.status, state.terminal) == ("done", terminal)


async def test_a_refused_batch_is_written_again_once_the_lease_is_taken_back(
    log_backend: LogBackend,
) -> None:
    keys = log_backend.keys("taken-back")
    asked: list[ConversationKeys] = []
    refused: list[ConversationKeys] = []

    async def reclaim(lost: ConversationKeys) -> bool:
        asked.append(lost)
        assert writer.pending(lost)
        await log_backend.set_lease(lost, "me")
        return True

    writer = log_backend.writer(owner="me", on_fenced=refused.append, reclaim=reclaim)
    await log_backend.set_lease(keys, None)  # lost, as when Redis came back without it
    first = writer.append_waitable(keys, Kind.CHUNK, '{"n":1}', request="r")
    writer.append(keys, Kind.CHUNK, '{"n":2}', request="r")
    await writer.flush()
    writer.append(keys, Kind.CHUNK, '{"n":3}', request="r")
    await writer.flush()

    assert isinstance(await first, str)
    assert asked == [keys] and refused == []
    assert not writer.pending(keys)
    reads = log_backend.reads()
    assert frames(await reads.read_range(keys)) == ['{"n":1}', '{"n":2}', '{"n":3}']


async def test_a_refused_batch_whose_lease_is_not_taken_back_is_dropped(
    log_backend: LogBackend,
) -> None:
    keys = log_backend.keys("not-taken-back")
    refused: list[ConversationKeys] = []

    async def reclaim(lost: ConversationKeys) -> bool:
        return False

    writer = log_backend.writer(owner="me", on_fenced=refused.append, reclaim=reclaim)
    await log_backend.set_lease(keys, "someone-else")
    done = writer.append_waitable(keys, Kind.CHUNK, '{"n":1}', request="r")
    await writer.flush()
    with pytest.raises(LogFencedError):
        await done
    assert refused == [keys]
    assert await log_backend.reads().read_range(keys) == []
