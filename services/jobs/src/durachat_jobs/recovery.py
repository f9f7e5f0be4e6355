"""Recovery's part in the jobs service: finding turns whose owner is gone and handing them to
their conversation's current owner, which recovers them (docs/recovery.md#how-it-works)."""

from __future__ import annotations

import logging
import time
from datetime import timedelta
from typing import Any

from durachat_infra.cluster import wake_owner
from durachat_infra.keys import ConversationKeys, conversation_tag
from durachat_infra.store import ConversationKey
from durachat_infra.store._types import utcnow
from durachat_jobs.deps import JobDeps, job_deps

log = logging.getLogger(__name__)


async def recover_orphans(ctx: dict[str, Any]) -> int:
    """Find turns whose owner is gone and hand them to their conversation's current owner.

    A turn is orphaned when its owner no longer holds the conversation's lease, or its
    heartbeat is older than `turn_stale_after`. The current owner (by membership) is asked to
    activate the conversation, which recovers it. Returns how many conversations were handed
    over.
    """
    deps = job_deps(ctx)
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
