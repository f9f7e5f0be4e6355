"""Webhook deliveries (docs/observability.md#webhooks).

`WebhookDispatcher` runs beside the arq worker: it reads the stream of every tenant's events
as a member of the `webhooks` consumer group (so several jobs workers share the work and each
event is routed once), and for each webhook of the event's tenant that wants its type enqueues
one `deliver_webhook` job. The job POSTs the event, signed; a failure (no answer, or anything
but 2xx) is tried again with exponential backoff (arq's `Retry`), and after the last try the
delivery is pushed onto the webhook's dead-letter list.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import urlsplit

import httpx
from arq import Retry
from arq.connections import ArqRedis
from prometheus_client import Counter
from redis.exceptions import RedisError, ResponseError

from durachat.observability.feed import FeedEvent, type_matches
from durachat.webhooks import SIGNATURE_HEADER, TIMESTAMP_HEADER, sign_delivery
from durachat_infra.events.record import FIELD
from durachat_infra.events.webhooks import is_private_address
from durachat_infra.keys import EventKeys, JobKeys
from durachat_infra.redis_client import RedisClient
from durachat_infra.settings import WebhookSettings
from durachat_infra.store import DatabaseUnavailableError, StoreError, WebhookRecord
from durachat_infra.store.port import StorePort

log = logging.getLogger(__name__)

DELIVERIES = Counter(
    "durachat_jobs_webhook_deliveries_total",
    "Webhook delivery attempts by result",
    ["result"],
)

JOB_NAME: Final = "deliver_webhook"
CACHE_FOR: Final = 2.0
"""Seconds a tenant's webhooks are used before they are read again (a new webhook gets
events within about this long)."""
CLAIM_IDLE_MS: Final = 30_000
"""Events routed by a worker that died are taken over after this long."""


@dataclass
class WebhookDispatcher:
    """Routes the events of every tenant to their webhooks' delivery jobs."""

    redis: RedisClient
    queue: ArqRedis
    store: StorePort
    keys: EventKeys
    jobs: JobKeys
    consumer: str
    _cache: dict[str, tuple[float, list[WebhookRecord]]] = field(default_factory=dict)
    _task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start routing (in the running loop)."""
        self._task = asyncio.create_task(self._run(), name="webhook-dispatcher")

    async def stop(self) -> None:
        """Stop routing."""
        if self._task is None:
            return
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._task = None

    async def _run(self) -> None:
        stream, group = self.keys.all, self.keys.webhook_group
        claimed_at = 0.0
        while True:
            try:
                await self._ensure_group()
                if time.monotonic() - claimed_at > CLAIM_IDLE_MS / 1000:
                    claimed_at = time.monotonic()
                    answer = await self.redis.xautoclaim(
                        stream, group, self.consumer, CLAIM_IDLE_MS, "0-0", count=100
                    )
                    await self._route(answer[1])
                read = await self.redis.xreadgroup(
                    group, self.consumer, {stream: ">"}, count=200, block=1000
                )
                for _, entries in read or ():
                    await self._route(entries)
            except asyncio.CancelledError:
                raise
            except (RedisError, OSError, DatabaseUnavailableError, StoreError) as exc:
                log.warning("webhook routing paused: %s", exc)
                await asyncio.sleep(1.0)

    async def _ensure_group(self) -> None:
        try:
            await self.redis.xgroup_create(
                self.keys.all, self.keys.webhook_group, id="$", mkstream=True
            )
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    async def _route(self, entries: list[Any]) -> None:
        """Enqueue the deliveries of `entries`, then acknowledge them (an entry whose routing
        failed stays pending and is claimed again later)."""
        done: list[str] = []
        for entry_id, fields in entries:
            raw = (fields or {}).get(FIELD)
            if raw is not None:
                try:
                    event = FeedEvent.from_entry(str(entry_id), raw)
                except ValueError:
                    event = None
                if event is not None:
                    for hook in await self._hooks(event.tenant):
                        if type_matches(hook.types, event.type):
                            await self.queue.enqueue_job(
                                JOB_NAME,
                                event.tenant,
                                hook.id,
                                event.to_json(),
                                _queue_name=self.jobs.queue,
                                _job_id=self.jobs.job_id(f"wh:{hook.id}:{event.id}"),
                            )
            done.append(str(entry_id))
        if done:
            await self.redis.xack(self.keys.all, self.keys.webhook_group, *done)

    async def _hooks(self, tenant: str) -> list[WebhookRecord]:
        now = time.monotonic()
        cached = self._cache.get(tenant)
        if cached is not None and now - cached[0] < CACHE_FOR:
            return cached[1]
        hooks = await self.store.list_webhooks(tenant)
        if len(self._cache) > 10_000:
            self._cache.clear()
        self._cache[tenant] = (now, hooks)
        return hooks


@dataclass
class WebhookDelivery:
    """What a delivery job needs (`ctx["webhooks"]`)."""

    redis: RedisClient
    store: StorePort
    keys: EventKeys
    settings: WebhookSettings
    http: httpx.AsyncClient

    def backoff(self, attempt: int) -> float:
        """Seconds before the try after `attempt` (1-based)."""
        return float(min(self.settings.retry_max, self.settings.retry_base * 2 ** (attempt - 1)))

    async def deliver(self, tenant: str, webhook_id: str, body: str, *, attempt: int) -> str:
        """Make one try; raises `Retry` while tries remain after a failure. Returns
        `delivered`, `gone` (the webhook was deleted) or `dead_letter`."""
        hook = await self.store.get_webhook(tenant, webhook_id)
        if hook is None:
            return "gone"
        status, error = await self._post(hook, body, attempt)
        if status is not None and 200 <= status < 300:
            DELIVERIES.labels("delivered").inc()
            return "delivered"
        if error != "private_address" and attempt < self.settings.max_attempts:
            DELIVERIES.labels("retried").inc()
            raise Retry(defer=self.backoff(attempt))
        DELIVERIES.labels("dead_letter").inc()
        await self._bury(hook, body, attempt, status, error)
        return "dead_letter"

    async def _post(
        self, hook: WebhookRecord, body: str, attempt: int
    ) -> tuple[int | None, str | None]:
        if self.settings.block_private and await _resolves_privately(hook.url):
            return None, "private_address"
        raw = body.encode()
        timestamp = int(time.time())
        headers = {
            "content-type": "application/json",
            TIMESTAMP_HEADER: str(timestamp),
            SIGNATURE_HEADER: sign_delivery(hook.secret, timestamp, raw),
            "durachat-webhook-id": hook.id,
            "durachat-delivery-attempt": str(attempt),
            "user-agent": "durachat-webhooks",
        }
        try:
            response = await self.http.post(hook.url, content=raw, headers=headers)
        except httpx.HTTPError as exc:
            return None, f"{type(exc).__name__}: {exc}"[:500]
        return response.status_code, None if response.is_success else response.text[:500]

    async def _bury(
        self, hook: WebhookRecord, body: str, attempts: int, status: int | None, error: str | None
    ) -> None:
        entry = {
            "webhook_id": hook.id,
            "url": hook.url,
            "event": json.loads(body),
            "attempts": attempts,
            "status": status,
            "error": error,
            "failed_at": int(time.time() * 1000),
        }
        key = self.keys.dead_letters(hook.tenant, hook.id)
        pipe = self.redis.pipeline(transaction=False)
        pipe.lpush(key, json.dumps(entry, separators=(",", ":")))
        pipe.ltrim(key, 0, self.settings.dead_letter_max - 1)
        await pipe.execute()


async def _resolves_privately(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    if is_private_address(host):
        return True
    try:
        found = await asyncio.get_running_loop().getaddrinfo(host, None)
    except OSError:
        return False  # the POST fails on its own
    return any(is_private_address(str(info[4][0])) for info in found)


async def deliver_webhook(ctx: dict[str, Any], tenant: str, webhook_id: str, body: str) -> str:
    """arq job: one try of a webhook delivery (docs/observability.md#webhooks)."""
    delivery: WebhookDelivery = ctx["webhooks"]
    return await delivery.deliver(tenant, webhook_id, body, attempt=int(ctx.get("job_try", 1)))
