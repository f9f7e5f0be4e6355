"""Bounded buffers on a real gateway (docs/operations.md#buffers): a slow reader is closed
with 1013, which it receives, and resumes from its cursor; a large broadcast leaves the
gateway's resident memory within a bound."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import websockets

from durachat_infra.local.cluster import LocalCluster
from support.cluster import running_cluster
from support.wsclient import chat_request, user_message

AGENT = "blob-agent"
MB = 1024 * 1024
SEND_BUFFER = 16 * MB

RSS_BOUND = 64 * MB
"""How far above its resting size the gateway may grow while it relays 400 broadcasts of
1 MB to a fast and a slow reader: a log read (at most 8 entries), the two send buffers
(16 MiB each), socket buffers and the allocator's slack. Unbounded, the slow reader's queue
alone would hold hundreds of megabytes."""


@pytest.fixture(scope="module")
def buffer_cluster(
    tmp_path_factory: pytest.TempPathFactory, redis_url: str
) -> Iterator[LocalCluster]:
    env = {"DURACHAT_SEND_BUFFER_BYTES": str(SEND_BUFFER)}
    tmp: Path = tmp_path_factory.mktemp("buffers")
    with running_cluster(tmp, redis_url, gateways=1, shards=1, env=env) as cluster:
        yield cluster


def rss(pid: int) -> int:
    """Resident memory of a process, in bytes (`VmRSS`)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def socket_url(cluster: LocalCluster, name: str, **query: str) -> str:
    url = cluster.urls[0].replace("http", "ws", 1) + f"/agents/{AGENT}/{name}"
    return url + "?" + "&".join(f"{k}={v}" for k, v in query.items())


BLOB = re.compile(r'data-blob\\",\s*\\"id\\":\s*\\"blob-(\d+)')
"""The number of a blob chunk, found in the first bytes of its frame (the chunk is JSON text
inside the frame's JSON, so its quotes are escaped); frames of 1 MB are not parsed whole."""


def blob_of(raw: str) -> int | None:
    found = BLOB.search(raw, 0, 300)
    return int(found.group(1)) if found else None


async def read_all(ws: Any, request_id: str) -> tuple[int, list[int]]:
    """Read until the request's terminal frame, keeping only the numbers of its blobs."""
    frames, blobs = 0, []
    async for raw in ws:
        frames += 1
        blob = blob_of(raw)
        if blob is not None:
            blobs.append(blob)
            continue
        frame = json.loads(raw)
        if frame.get("id") == request_id and frame.get("done"):
            return frames, blobs
    raise AssertionError("the socket closed before the terminal frame")


CURSOR = re.compile(r'"cursor":"([0-9]+-[0-9]+)"')


async def read_slowly(ws: Any, pause: float, seen: list[dict[str, Any]]) -> int | None:
    """Read one frame per `pause`, keeping the small part of each; the close code."""
    try:
        async for raw in ws:
            cursor = CURSOR.search(raw, max(0, len(raw) - 200))
            seen.append({"cursor": cursor.group(1) if cursor else None, "blob": blob_of(raw)})
            await asyncio.sleep(pause)
    except websockets.ConnectionClosed as closed:
        return closed.rcvd.code if closed.rcvd is not None else None
    return ws.close_code  # type: ignore[no-any-return]


async def test_a_slow_reader_is_closed_with_1013_and_the_gateway_stays_small(
    buffer_cluster: LocalCluster,
) -> None:
    gateway = next(p for p in buffer_cluster.processes if p.role == "gateway")
    name = f"big-{uuid.uuid4().hex[:8]}"
    sender = await websockets.connect(socket_url(buffer_cluster, name), max_size=None)
    slow = await websockets.connect(socket_url(buffer_cluster, name), max_size=None, max_queue=1)
    try:
        # Warm up (first turn, imports), then measure the resting size.
        warm = chat_request([user_message("warm")], blobs=2, size=1000)
        await sender.send(json.dumps(warm))
        await read_all(sender, warm["id"])
        resting = rss(gateway.pid)

        seen: list[dict[str, Any]] = []
        slow_reader = asyncio.create_task(read_slowly(slow, 0.2, seen))
        peak = resting
        sampling = True

        async def sample() -> None:
            nonlocal peak
            while sampling:
                peak = max(peak, rss(gateway.pid))
                await asyncio.sleep(0.02)

        sampler = asyncio.create_task(sample())
        big = chat_request([user_message("big")], blobs=400, size=MB, pause=0.01)
        started = time.monotonic()
        await sender.send(json.dumps(big))
        async with asyncio.timeout(120):
            _, blobs = await read_all(sender, big["id"])
        took = time.monotonic() - started
        async with asyncio.timeout(60):
            code = await slow_reader
        sampling = False
        await sampler
    finally:
        await sender.close()
        await slow.close()

    assert blobs == list(range(400)), blobs[:10]
    assert code == 1013, (code, len(seen))
    grown = peak - resting
    print(
        f"gateway RSS resting {resting / MB:.0f} MiB, peak {peak / MB:.0f} MiB "
        f"(+{grown / MB:.0f} MiB) relaying 400 x 1 MB in {took:.1f} s; "
        f"the slow reader read {len(seen)} frames before 1013"
    )
    assert grown < RSS_BOUND, f"the gateway grew by {grown / MB:.0f} MiB"


async def test_a_reader_closed_for_being_slow_resumes_from_its_cursor(
    buffer_cluster: LocalCluster,
) -> None:
    name = f"resume-{uuid.uuid4().hex[:8]}"
    sender = await websockets.connect(socket_url(buffer_cluster, name), max_size=None)
    slow = await websockets.connect(
        socket_url(buffer_cluster, name, cursor=""), max_size=None, max_queue=1
    )
    try:
        seen: list[dict[str, Any]] = []
        slow_reader = asyncio.create_task(read_slowly(slow, 0.3, seen))
        request = chat_request([user_message("blobs")], blobs=40, size=MB, pause=0.01)
        await sender.send(json.dumps(request))
        async with asyncio.timeout(60):
            await read_all(sender, request["id"])
            code = await slow_reader
        assert code == 1013, code
        before = [s["blob"] for s in seen if s["blob"] is not None]
        cursor = next(s["cursor"] for s in reversed(seen) if s["cursor"])
        again = await websockets.connect(
            socket_url(buffer_cluster, name, cursor=cursor), max_size=None
        )
        try:
            async with asyncio.timeout(60):
                _, after = await read_all(again, request["id"])
        finally:
            await again.close()
    finally:
        await sender.close()
        with contextlib.suppress(Exception):
            await slow.close()
    # Every blob once, in order, across the two connections.
    assert before + after == list(range(40)), (before, after)
    assert len(before) < 40
