"""Model tokens per tenant (docs/security.md#quotas): what the replies a shard streams use,
estimated from their text, added to each tenant's daily counter (the `tokens_per_day` quota)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter

from prometheus_client import Counter as PromCounter
from redis.asyncio import Redis
from redis.exceptions import RedisError

from durachat.protocol import MAIN_BRANCH
from durachat.types import UIChunk
from durachat_infra.eventlog import LogWriter
from durachat_infra.keys import ConversationKeys
from durachat_infra.quotas import QuotaCounters, estimate_tokens
from durachat_infra.tasks import cancel_and_wait
from durachat_shard.emitter import Emitter

log = logging.getLogger(__name__)

TOKENS = PromCounter(
    "durachat_shard_tenant_tokens_total",
    "Model tokens of the replies streamed, estimated from their text, by tenant",
    ["tenant"],
)

_TEXT_FIELDS = ("delta", "inputTextDelta")
"""Where a chunk carries model text: text and reasoning deltas, a tool call's input."""


class TokenMeter:
    """Counts the characters of model text each tenant's replies stream and adds the tokens
    they make to the tenants' daily counters every `interval` seconds, in one round trip."""

    def __init__(self, counters: QuotaCounters, *, interval: float = 1.0) -> None:
        self._counters = counters
        self._interval = interval
        self._characters: Counter[str] = Counter()
        self._task: asyncio.Task[None] | None = None

    def count(self, tenant: str, chunk: UIChunk) -> None:
        """Count a chunk of a reply of `tenant`."""
        for field in _TEXT_FIELDS:
            text = chunk.get(field)
            if isinstance(text, str):
                self._characters[tenant] += len(text)
                return

    async def start(self) -> None:
        """Flush every `interval` until stopped."""
        self._task = asyncio.create_task(self._run(), name="token-meter")

    async def stop(self) -> None:
        """Stop, flushing what is counted."""
        await cancel_and_wait(self._task)
        with contextlib.suppress(RedisError, OSError):
            await self.flush()

    async def flush(self) -> None:
        """Add what was counted since the last flush."""
        characters, self._characters = self._characters, Counter()
        used = {tenant: estimate_tokens(n) for tenant, n in characters.items()}
        if not used:
            return
        try:
            await self._counters.add_tokens(used)
        except (RedisError, OSError):
            # Counted again next time rather than lost.
            self._characters.update(characters)
            raise
        for tenant, tokens in used.items():
            TOKENS.labels(tenant).inc(tokens)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            try:
                await self.flush()
            except (RedisError, OSError) as exc:
                log.warning("could not count tokens: %s", exc)


class MeteredEmitter(Emitter):
    """An `Emitter` whose reply chunks are counted against the conversation's tenant."""

    def __init__(
        self,
        writer: LogWriter,
        keys: ConversationKeys,
        redis: Redis,
        *,
        branch: str = MAIN_BRANCH,
        meter: TokenMeter,
        tenant: str,
    ) -> None:
        super().__init__(writer, keys, redis, branch=branch)
        self._meter = meter
        self._tenant = tenant

    def chunk(self, request_id: str, seq: int, chunk: UIChunk, *, continuation: bool) -> None:
        """One chunk of a request's stream, counted."""
        self._meter.count(self._tenant, chunk)
        super().chunk(request_id, seq, chunk, continuation=continuation)
