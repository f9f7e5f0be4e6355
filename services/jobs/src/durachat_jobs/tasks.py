"""The jobs the worker runs: membership upkeep, orphaned-turn detection and retention."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import httpx
from redis.asyncio import Redis

from durachat.protocol import MessageType
from durachat_infra.cluster import ClusterView, wake_owner
from durachat_infra.eventlog import (
    MAIN,
    StreamState,
    entry_id_key,
    state_fields,
    state_prefix,
)
from durachat_infra.eventlog.scripts import CLOSE_ABANDONED
from durachat_infra.keys import ClusterKeys, ConversationKeys, conversation_tag
from durachat_infra.store import ConversationKey, Store
from durachat_infra.store._types import utcnow

log = logging.getLogger(__name__)


@dataclass(slots=True)
class JobDeps:
    """What the jobs share, built once by the worker (`ctx["durachat"]`)."""

    redis: Redis
    keys: ClusterKeys
    shard_ttl: float
    store: Store | None = None
    view: ClusterView | None = None
    http: httpx.AsyncClient | None = None
    turn_stale_after: float = 10.0
    log_retention: float = 86_400.0
    abandoned_stream_after: float = 600.0
    incident_retention: float = 3_600.0
    backoff: dict[ConversationKey, tuple[float, float]] = field(default_factory=dict)
    """Conversations whose owner did not take them: (next try, current delay)."""
    scanning: asyncio.Lock = field(default_factory=asyncio.Lock)
    """Held by the orphan scan running now (scans never overlap)."""


def _deps(ctx: dict[str, Any]) -> JobDeps:
    deps: JobDeps = ctx["durachat"]
    return deps


async def sweep_membership(ctx: dict[str, Any]) -> int:
    """Drop shard ids whose heartbeat record expired from the membership index.

    Gateways skip such ids already; sweeping keeps the index from growing with every restart.
    """
    deps = _deps(ctx)
    cutoff = time.time() - deps.shard_ttl
    removed = 0
    for shard_id in await deps.redis.zrangebyscore(deps.keys.shards, "-inf", cutoff):
        if not await deps.redis.exists(deps.keys.shard(shard_id)):
            removed += int(await deps.redis.zrem(deps.keys.shards, shard_id))
    if removed:
        log.info("swept %d dead shard ids", removed)
    return removed


async def recover_orphans(ctx: dict[str, Any]) -> int:
    """Find turns whose owner is gone and hand them to their conversation's current owner.

    A turn is orphaned when its owner no longer holds the conversation's lease, or its
    heartbeat is older than `turn_stale_after`. The current owner (by membership) is asked to
    activate the conversation, which recovers it. Returns how many conversations were handed
    over.
    """
    deps = _deps(ctx)
    assert deps.store is not None and deps.view is not None and deps.http is not None
    if deps.scanning.locked():
        return 0  # the previous scan is still handing conversations over
    async with deps.scanning:
        return await _recover_orphans(deps)


async def _recover_orphans(deps: JobDeps) -> int:
    assert deps.store is not None and deps.view is not None and deps.http is not None
    turns = await deps.store.all_open_turns()
    if not turns:
        return 0
    prefix = deps.keys.prefix
    pipe = deps.redis.pipeline(transaction=False)
    for open_turn in turns:
        key = open_turn.key
        pipe.get(ConversationKeys(prefix, conversation_tag(key.tenant, key.agent, key.name)).lease)
    holders = await pipe.execute()
    now = utcnow()
    stale = timedelta(seconds=deps.turn_stale_after)
    orphaned: dict[ConversationKey, str] = {}
    for open_turn, holder in zip(turns, holders, strict=True):
        turn = open_turn.turn
        beat = turn.heartbeat_at or turn.created_at
        if holder is not None and holder != turn.owner:
            # Another shard holds it already; it recovered (or is recovering) the turn.
            continue
        if holder == turn.owner and now - beat < stale:
            continue
        orphaned.setdefault(open_turn.key, "lease gone" if holder is None else "heartbeat stale")
    handed = 0
    clock = time.monotonic()
    for key, reason in orphaned.items():
        next_try, delay = deps.backoff.get(key, (0.0, 1.0))
        if clock < next_try:
            continue
        if await wake_owner(deps.view, key, deps.http):
            log.info("handed an orphaned turn of %s to its owner (%s)", key, reason)
            deps.backoff.pop(key, None)
            handed += 1
        else:
            # Not taken yet (the old lease has not expired, or no shard serves the agent).
            deps.backoff[key] = (clock + delay, min(delay * 2, 60.0))
    for key in [k for k in deps.backoff if k not in orphaned]:
        del deps.backoff[key]
    return handed


def _log_keys(deps: JobDeps) -> str:
    return f"{deps.keys.prefix}:{{*}}:log"


def _conversation_keys(deps: JobDeps, log_key: str) -> ConversationKeys:
    tag = log_key[len(deps.keys.prefix) + 2 : -len("}:log")]
    return ConversationKeys(deps.keys.prefix, tag)


async def _stream_states(deps: JobDeps, keys: ConversationKeys) -> dict[str, StreamState]:
    """The stream state of every branch of a conversation."""
    fields = await deps.redis.hgetall(keys.state)  # type: ignore[misc]
    return StreamState.all_from_hash(fields)


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


async def trim_logs(ctx: dict[str, Any]) -> int:
    """Trim every conversation's event log to the retention window; returns entries removed.

    The entries of a stream that is still open are kept whatever their age: its clients can
    still resume it.
    """
    deps = _deps(ctx)
    cutoff_ms = int((time.time() - deps.log_retention) * 1000)
    removed = 0
    async for log_key in deps.redis.scan_iter(match=_log_keys(deps), count=500, _type="STREAM"):
        keys = _conversation_keys(deps, str(log_key))
        min_id = f"{cutoff_ms}-0"
        for state in (await _stream_states(deps, keys)).values():
            if state.status == "streaming" and state.start:
                min_id = min(min_id, state.start, key=entry_id_key)
        removed += int(await deps.redis.xtrim(keys.log, minid=min_id, approximate=False))
    if removed:
        log.info("trimmed %d event log entries past retention", removed)
    return removed


async def close_abandoned_streams(ctx: dict[str, Any]) -> int:
    """Close streams that are still marked open although no shard holds their conversation
    and nothing was written for `abandoned_stream_after`; returns how many were closed.

    Their clients get the terminal frame (`outcome: "aborted"`) instead of waiting forever.
    """
    deps = _deps(ctx)
    cutoff_ms = int((time.time() - deps.abandoned_stream_after) * 1000)
    script = deps.redis.register_script(CLOSE_ABANDONED)
    closed = 0
    async for log_key in deps.redis.scan_iter(match=_log_keys(deps), count=500, _type="STREAM"):
        keys = _conversation_keys(deps, str(log_key))
        for branch, state in (await _stream_states(deps, keys)).items():
            if state.status not in ("streaming", "pending") or not state.request:
                continue
            frame = {
                "body": "",
                "done": True,
                "id": state.request,
                "type": MessageType.USE_CHAT_RESPONSE.value,
                "outcome": "aborted",
            }
            done = await script(
                keys=[keys.log, keys.state, keys.lease],
                args=[
                    state.request,
                    _json(frame),
                    cutoff_ms,
                    state_prefix(branch),
                    "" if branch == MAIN else branch,
                    _json(state_fields(branch, {"status": "done"})),
                ],
            )
            closed += int(done)
    if closed:
        log.info("closed %d abandoned streams", closed)
    return closed


async def sweep_incidents(ctx: dict[str, Any]) -> int:
    """Delete recovery incidents untouched for `incident_retention`; returns how many."""
    deps = _deps(ctx)
    assert deps.store is not None
    swept = await deps.store.sweep_incidents(utcnow() - timedelta(seconds=deps.incident_retention))
    if swept:
        log.info("swept %d stale recovery incidents", swept)
    return swept
