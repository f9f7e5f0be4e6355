"""The event log port's upkeep (the jobs service's side), on memory and on a real Redis:
listing logs, trimming before an id, and closing streams whose owner vanished."""

from __future__ import annotations

import asyncio
import time

from durachat_infra.eventlog import ALL, Kind, StreamState, entry_id_key, state_fields
from durachat_infra.keys import ConversationKeys
from support.log_backends import LogBackend

FRAME = '{"done":true,"id":"r1","outcome":"aborted"}'


def future_ms() -> int:
    return int(time.time() * 1000) + 60_000


async def open_stream(
    backend: LogBackend, keys: ConversationKeys, request: str, branch: str = "main"
) -> str:
    """Start a stream of `request` on `branch` (as a shard would); returns its start id."""
    writer = backend.writer()
    return await writer.append_waitable(
        keys,
        Kind.CONTROL,
        '{"op":"start"}',
        request=request,
        state=state_fields(branch, {"status": "streaming", "req": request, "start": "$id"}),
        branch="" if branch == "main" else branch,
    )


async def test_logs_lists_every_conversation_with_a_log_under_the_prefix(
    log_backend: LogBackend,
) -> None:
    writer = log_backend.writer()
    ours = {log_backend.keys("one"), log_backend.keys("two")}
    for keys in ours:
        writer.append(keys, Kind.FRAME, "{}")
    writer.append(ConversationKeys(f"{log_backend.prefix}x", "elsewhere"), Kind.FRAME, "{}")
    await writer.flush()

    found = [keys async for keys in log_backend.maintenance().logs()]

    assert sorted(found, key=lambda k: k.tag) == sorted(ours, key=lambda k: k.tag)


async def test_trim_deletes_the_entries_before_an_id(log_backend: LogBackend) -> None:
    keys = log_backend.keys("trim")
    writer = log_backend.writer()
    ids = list(
        await asyncio.gather(*(writer.append_waitable(keys, Kind.FRAME, "{}") for _ in range(6)))
    )
    upkeep = log_backend.maintenance()

    assert await upkeep.trim(keys, ids[3]) == 3
    assert await upkeep.trim(keys, ids[3]) == 0
    assert [e.id for e in await upkeep.read_range(keys)] == ids[3:]
    assert await upkeep.trim(log_backend.keys("no-log"), ids[3]) == 0
    assert await upkeep.trim(keys, f"{entry_id_key(ids[-1])[0] + 1}-0") == 3
    assert await upkeep.first_id(keys) is None


async def test_close_abandoned_ends_the_open_stream_of_a_branch(log_backend: LogBackend) -> None:
    keys = log_backend.keys("abandoned")
    start = await open_stream(log_backend, keys, "r1", branch="9")
    await open_stream(log_backend, keys, "m1")
    upkeep = log_backend.maintenance()

    closed = await upkeep.close_abandoned(
        keys, branch="9", request="r1", frame=FRAME, cutoff_ms=future_ms()
    )

    assert closed
    states = await upkeep.read_states(keys)
    assert states["9"] == StreamState("done", "r1", start)
    assert states["main"].status == "streaming"  # another branch's stream is left alone
    terminal = (await upkeep.read_range(keys))[-1]
    assert (terminal.kind, terminal.frame, terminal.target, terminal.request, terminal.branch) == (
        Kind.TERMINAL,
        FRAME,
        ALL,
        "r1",
        "9",
    )
    assert terminal.state_change() == {"9|status": "done"}
    # Closed once: the state no longer shows it open.
    assert not await upkeep.close_abandoned(
        keys, branch="9", request="r1", frame=FRAME, cutoff_ms=future_ms()
    )
    assert await upkeep.close_abandoned(
        keys, branch="main", request="m1", frame=FRAME, cutoff_ms=future_ms()
    )
    main = await upkeep.read_state(keys)
    assert main.status == "done"
    assert (await upkeep.read_range(keys))[-1].branch == ""


async def test_close_abandoned_leaves_held_recent_and_other_streams_alone(
    log_backend: LogBackend,
) -> None:
    keys = log_backend.keys("alive")
    await open_stream(log_backend, keys, "r1")
    upkeep = log_backend.maintenance()
    last = await upkeep.last_id(keys)

    await log_backend.set_lease(keys, "shard-1")
    held = await upkeep.close_abandoned(
        keys, branch="main", request="r1", frame=FRAME, cutoff_ms=future_ms()
    )
    await log_backend.set_lease(keys, None)
    recent = await upkeep.close_abandoned(
        keys, branch="main", request="r1", frame=FRAME, cutoff_ms=0
    )
    other_request = await upkeep.close_abandoned(
        keys, branch="main", request="r0", frame=FRAME, cutoff_ms=future_ms()
    )
    idle_branch = await upkeep.close_abandoned(
        keys, branch="5", request="r1", frame=FRAME, cutoff_ms=future_ms()
    )

    assert (held, recent, other_request, idle_branch) == (False, False, False, False)
    assert await upkeep.last_id(keys) == last
    assert (await upkeep.read_state(keys)).status == "streaming"


async def test_close_abandoned_ends_a_pending_stream(log_backend: LogBackend) -> None:
    keys = log_backend.keys("pending")
    writer = log_backend.writer()
    await writer.append_waitable(
        keys, Kind.CONTROL, "{}", request="r1", state={"status": "pending", "req": "r1"}
    )

    assert await log_backend.maintenance().close_abandoned(
        keys, branch="main", request="r1", frame=FRAME, cutoff_ms=future_ms()
    )
    assert (await log_backend.reads().read_state(keys)).status == "done"
