"""Retention (docs/recovery.md#retention): event logs trimmed to their window, abandoned streams
closed, old recovery incidents deleted."""

from __future__ import annotations

import json
import logging
import time
from datetime import timedelta
from typing import Any

from durachat.protocol.server_frames import done_frame
from durachat_infra.eventlog import (
    StreamState,
    branch_tag,
    entry_id_key,
    state_fields,
    state_prefix,
)
from durachat_infra.eventlog.scripts import CLOSE_ABANDONED
from durachat_infra.keys import ConversationKeys
from durachat_infra.redis_client import register_script
from durachat_infra.store._types import utcnow
from durachat_jobs.deps import JobDeps, job_deps

log = logging.getLogger(__name__)


def _log_keys(deps: JobDeps) -> str:
    return ConversationKeys.log_pattern(deps.keys.prefix)


def _conversation_keys(deps: JobDeps, log_key: str) -> ConversationKeys:
    return ConversationKeys.from_log_key(deps.keys.prefix, log_key)


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
    deps = job_deps(ctx)
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
    deps = job_deps(ctx)
    cutoff_ms = int((time.time() - deps.abandoned_stream_after) * 1000)
    script = register_script(deps.redis, CLOSE_ABANDONED)
    closed = 0
    async for log_key in deps.redis.scan_iter(match=_log_keys(deps), count=500, _type="STREAM"):
        keys = _conversation_keys(deps, str(log_key))
        for branch, state in (await _stream_states(deps, keys)).items():
            if state.status not in ("streaming", "pending") or not state.request:
                continue
            frame = done_frame(state.request, outcome="aborted")
            done = await script(
                keys=[keys.log, keys.state, keys.lease],
                args=[
                    state.request,
                    _json(frame),
                    cutoff_ms,
                    state_prefix(branch),
                    branch_tag(branch),
                    _json(state_fields(branch, StreamState.change_ended(streamed=True))),
                ],
            )
            closed += int(done)
    if closed:
        log.info("closed %d abandoned streams", closed)
    return closed


async def sweep_incidents(ctx: dict[str, Any]) -> int:
    """Delete recovery incidents untouched for `incident_retention`; returns how many."""
    deps = job_deps(ctx)
    assert deps.store is not None
    swept = await deps.store.sweep_incidents(utcnow() - timedelta(seconds=deps.incident_retention))
    if swept:
        log.info("swept %d stale recovery incidents", swept)
    return swept
