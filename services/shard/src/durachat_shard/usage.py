"""Model tokens per tenant (docs/security.md#quotas): what the replies a shard streams use,
estimated from their text, added to each tenant's daily counter (the `tokens_per_day` quota)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter

from redis.exceptions import RedisError

from durachat.protocol import MAIN_BRANCH
from durachat.types import UIChunk
from durachat_infra.eventlog import LogWriter
from durachat_infra.keys import ConversationKeys
from durachat_infra.quotas import QuotaCounters, estimate_tokens
from durachat_infra.redis_client import RedisClient
from durachat_infra.tasks import cancel_and_wait
from durachat_shard.emitter import Emitter
from durachat_shard.metrics import MODEL_TOKENS

log = logging.getLogger(__name__)

_TEXT_FIELDS = ("delta", "inputTextDelta")
"""Where a chunk carries model text: text and reasoning deltas, a tool call's input."""


class TokenMeter:
    """Counts the characters of model text each tenant's replies stream (by model) and adds
    the tokens they make to the tenants' daily counters every `interval` seconds, in one round
    trip."""

    def __init__(self, counters: QuotaCounters, *, interval: float = 1.0) -> None:
        self._counters = counters
        self._interval = interval
        self._characters: Counter[tuple[str, str]] = Counter()
        self._task: asyncio.Task[None] | None = None

    def count(self, source: tuple[str, str], chunk: UIChunk) -> None:
        """Count a chunk of a reply of a tenant by a model (`source`: the two of them)."""
        for field in _TEXT_FIELDS:
            text = chunk.get(field)
            if isinstance(text, str):
                self._characters[source] += len(text)
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
        by_source = {source: estimate_tokens(n) for source, n in characters.items()}
        if not by_source:
            return
        used: Counter[str] = Counter()
        for (tenant, _model), tokens in by_source.items():
            used[tenant] += tokens
        try:
            await self._counters.add_tokens(dict(used))
        except (RedisError, OSError):
            # Counted again next time rather than lost.
            self._characters.update(characters)
            raise
        for (tenant, model), tokens in by_source.items():
            MODEL_TOKENS.labels(tenant, model).inc(tokens)

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
        redis: RedisClient,
        *,
        branch: str = MAIN_BRANCH,
        meter: TokenMeter,
        tenant: str,
        model: str = "",
    ) -> None:
        super().__init__(writer, keys, redis, branch=branch)
        self._meter = meter
        self._source = (tenant, model)

    def chunk(self, request_id: str, seq: int, chunk: UIChunk, *, continuation: bool) -> None:
        """One chunk of a request's stream, counted."""
        self._meter.count(self._source, chunk)
        super().chunk(request_id, seq, chunk, continuation=continuation)
