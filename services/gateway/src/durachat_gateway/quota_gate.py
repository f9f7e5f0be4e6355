"""A gateway's side of the tenants' quotas (docs/security.md#quotas): places for connections,
admission of chat requests, the size of a request, and new conversations.

The counting itself happens in Redis (`durachat_infra.quotas`), so every gateway enforces the
same cluster-wide limits. A chat request's place among the tenant's running turns is given back
when this gateway sees the request's terminal frame in the conversation's log (the requester's
gateway follows that log while the requester is connected). A place whose end was missed (the
requester left mid-turn) is checked against the turn's stored status once the tenant reaches
its limit, and expires after `TURN_TTL` at the latest.

Counting is a Redis round trip, which would sit between a chat request and its first chunk. A
tenant found far from all its turn limits when its last request was counted has *headroom*:
for `HEADROOM_WINDOW` seconds this gateway forwards up to a quarter of what that tenant had
left at once and counts each in the background. Near a limit every request is counted before
it goes on, so limits hold exactly; a burst from several gateways racing within one window can
pass a limit only once their combined share of the headroom is used up (more than four
gateways, each forwarding its whole quarter before any count lands).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Final

from prometheus_client import Counter, Gauge
from redis.exceptions import RedisError

from durachat import limits
from durachat_gateway.auth.directory import AuthDirectory
from durachat_infra.eventlog import Kind, LogEntry
from durachat_infra.keys import ConversationKeys, conversation_tag
from durachat_infra.quotas import (
    CONNECTION_TTL,
    TURN_TTL,
    Admission,
    QuotaCounters,
    Quotas,
    Refusal,
    estimate_tokens,
    parse_turn_member,
    turn_member,
)
from durachat_infra.store import OPEN_TURN_STATUSES, ConversationKey, StoreError
from durachat_infra.store.port import StorePort
from durachat_infra.tasks import cancel_and_wait

log = logging.getLogger(__name__)

TENANT_CONNECTIONS = Gauge(
    "durachat_gateway_tenant_connections", "Open WebSockets on this gateway, by tenant", ["tenant"]
)
TENANT_TURNS = Counter(
    "durachat_gateway_tenant_turns_total", "Chat requests admitted, by tenant", ["tenant"]
)
QUOTA_REFUSALS = Counter(
    "durachat_gateway_quota_refusals_total", "Requests refused by a quota", ["tenant", "quota"]
)
OVERRUNS = Counter(
    "durachat_gateway_quota_overruns_total",
    "Requests forwarded on headroom that their count then found over a quota",
    ["tenant", "quota"],
)

UNSEEN_TURN_GRACE: Final = 30.0
"""Seconds a counted turn may have no stored row yet (its accept is still being written)."""

RECONCILE_EVERY: Final = 1.0
"""Seconds between two checks of one tenant's running turns against the store."""

_SMALLEST_MESSAGE: Final = len('{"id":"","role":"","parts":[]}')

HEADROOM_WINDOW: Final = 1.0
"""Seconds a count that found a tenant far from its limits lets later requests go on first."""

UNLIMITED_HEADROOM: Final = 1000
"""Requests a gateway forwards first in one window for a tenant without turn limits."""


@dataclass(slots=True)
class Headroom:
    """Requests of a tenant this gateway may forward before counting them, until `until`
    (monotonic seconds)."""

    until: float
    budget: int


def headroom_after(quotas: Quotas, admission: Admission) -> int:
    """How many requests may go on before being counted, after a count found these levels: a
    quarter of what is left of the tightest turn limit, none past half of a day's tokens."""
    left: list[float] = []
    if quotas.concurrent_turns:
        left.append(quotas.concurrent_turns - admission.running)
    if quotas.turns_per_minute and admission.turns_left is not None:
        left.append(admission.turns_left)
    if quotas.tokens_per_day and admission.tokens_today * 2 > quotas.tokens_per_day:
        return 0
    if not left:
        return UNLIMITED_HEADROOM
    return max(0, int(min(left) // 4))


@dataclass(slots=True)
class Admitted:
    """A turn this gateway admitted: its tenant, its member, and the count still on its way
    (a turn admitted on headroom)."""

    tenant: str
    member: str
    counting: asyncio.Task[None] | None = None


class QuotaGate:
    """Applies the tenants' quotas to what reaches this gateway."""

    def __init__(
        self,
        counters: QuotaCounters,
        directory: AuthDirectory,
        store: StorePort,
        *,
        gateway_id: str,
        key_prefix: str,
    ) -> None:
        self._counters = counters
        self._directory = directory
        self._store = store
        self._gateway_id = gateway_id
        self._prefix = key_prefix
        self._serial = itertools.count(1)
        self._connections: dict[str, set[str]] = defaultdict(set)
        self._turns: dict[tuple[str, str], Admitted] = {}
        """(log key, request id) → the turns this gateway admitted."""
        self._headroom: dict[str, Headroom] = {}
        self._counting: dict[str, set[asyncio.Task[None]]] = defaultdict(set)
        """By tenant: the counts still to land of turns admitted on headroom."""
        self._reconciled: dict[str, float] = {}
        self._task: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[None]] = set()

    def quotas(self, tenant: str) -> Quotas:
        """The quotas in force for a tenant."""
        return self._directory.quotas(tenant)

    async def start(self) -> None:
        """Keep this gateway's connections counted."""
        self._task = asyncio.create_task(self._renew(), name="quota-renew")

    async def stop(self) -> None:
        """Stop renewing (the places of open connections expire by themselves)."""
        await cancel_and_wait(self._task)

    # Connections -------------------------------------------------------------------------

    async def open_connection(self, tenant: str) -> tuple[str | None, Refusal | None]:
        """Take a place for a new connection: `(its handle, None)`, or `(None, refusal)`."""
        member = f"{self._gateway_id}:{next(self._serial)}"
        refusal = await self._counters.open_connection(
            tenant, member, self.quotas(tenant).connections
        )
        if refusal is not None:
            QUOTA_REFUSALS.labels(tenant, refusal.quota).inc()
            return None, refusal
        self._connections[tenant].add(member)
        TENANT_CONNECTIONS.labels(tenant).inc()
        return member, None

    async def close_connection(self, tenant: str, member: str) -> None:
        """Give a connection's place back."""
        self._connections[tenant].discard(member)
        TENANT_CONNECTIONS.labels(tenant).dec()
        try:
            await self._counters.close_connection(tenant, member)
        except (RedisError, OSError) as exc:
            log.warning("could not free a connection of %s (it expires): %s", tenant, exc)

    async def _renew(self) -> None:
        while True:
            await asyncio.sleep(CONNECTION_TTL / 3)
            members = {t: sorted(m) for t, m in self._connections.items() if m}
            try:
                await self._counters.renew_connections(members)
            except (RedisError, OSError) as exc:
                log.warning("could not renew connection places: %s", exc)

    # Conversations -----------------------------------------------------------------------

    async def new_conversation(self, key: ConversationKey) -> Refusal | None:
        """Whether `key` may be used: it exists, or the tenant may have one more. A
        conversation with an event log exists (one Redis read); others are looked up in the
        store."""
        limit = self.quotas(key.tenant).conversations
        if not limit or await self._counters.has_log(ConversationKeys(self._prefix, _tag(key))):
            return None
        if await self._store.find_conversation(key) is not None:
            return None
        if await self._store.count_conversations(key.tenant) < limit:
            return None
        QUOTA_REFUSALS.labels(key.tenant, "conversations").inc()
        return Refusal("conversations", 0)

    # Chat requests -----------------------------------------------------------------------

    def check_request(self, tenant: str, frame: dict[str, Any]) -> Refusal | None:
        """The size quotas of a chat request: how many messages it carries and how large each
        is. The body is parsed only when its length alone cannot settle both."""
        quotas = self.quotas(tenant)
        init = frame.get("init")
        body = init.get("body") if isinstance(init, dict) else None
        if not isinstance(body, str):
            return None
        max_bytes, max_count = quotas.max_message_bytes, quotas.max_messages_per_request
        # A character is at most four bytes; ASCII text is one byte a character.
        sizes = bool(max_bytes) and len(body) * (1 if body.isascii() else 4) > max_bytes
        count = bool(max_count) and len(body) > _SMALLEST_MESSAGE * max_count
        if not (sizes or count):
            return None
        try:
            # Bounded: a body nested too deep is the shard's to refuse (`too_deep`).
            messages = limits.loads(body).get("messages")
        except (ValueError, AttributeError):
            return None
        if not isinstance(messages, list):
            return None
        refusal = None
        if count and len(messages) > max_count:
            refusal = Refusal("max_messages_per_request", 0)
        elif sizes and any(_size(m) > max_bytes for m in messages):
            refusal = Refusal("max_message_bytes", 0)
        if refusal is not None:
            QUOTA_REFUSALS.labels(tenant, refusal.quota).inc()
        return refusal

    async def admit(
        self, key: ConversationKey, request_id: str, frame_chars: int
    ) -> tuple[str, Refusal | None]:
        """Admit a chat request of `key` against its tenant's turn quotas; returns the turn's
        member (to `release` it) and the refusal, if any. The request's text counts as input
        tokens."""
        tenant = key.tenant
        quotas = self.quotas(tenant)
        member = turn_member(key.agent, key.name, request_id)
        tokens = estimate_tokens(frame_chars)
        log_key = ConversationKeys(self._prefix, _tag(key)).log
        room = self._headroom.get(tenant)
        if room is not None and room.budget > 0 and time.monotonic() < room.until:
            room.budget -= 1
            counting = asyncio.get_running_loop().create_task(
                self._count_later(tenant, member, quotas, tokens)
            )
            pending = self._counting[tenant]
            pending.add(counting)
            counting.add_done_callback(pending.discard)
            self._turns[(log_key, request_id)] = Admitted(tenant, member, counting)
            TENANT_TURNS.labels(tenant).inc()
            return member, None
        if self._counting.get(tenant):
            # Turns this gateway let on before counting them are counted first, or this count
            # would not see them and the limit could be overrun.
            await asyncio.gather(*self._counting[tenant], return_exceptions=True)
        admission = await self._counters.admit_turn(tenant, member, quotas, tokens=tokens)
        refusal = admission.refusal
        if (
            refusal is not None
            and refusal.quota == "concurrent_turns"
            and await self._reconcile(tenant)
        ):
            admission = await self._counters.admit_turn(tenant, member, quotas, tokens=tokens)
            refusal = admission.refusal
        if refusal is not None:
            self._headroom.pop(tenant, None)
            QUOTA_REFUSALS.labels(tenant, refusal.quota).inc()
            return member, refusal
        self._note(tenant, quotas, admission)
        TENANT_TURNS.labels(tenant).inc()
        self._turns[(log_key, request_id)] = Admitted(tenant, member)
        return member, None

    def _note(self, tenant: str, quotas: Quotas, admission: Admission) -> None:
        """Remember how far the tenant is from its limits after a count."""
        budget = headroom_after(quotas, admission)
        if budget:
            self._headroom[tenant] = Headroom(time.monotonic() + HEADROOM_WINDOW, budget)
        else:
            self._headroom.pop(tenant, None)

    async def _count_later(self, tenant: str, member: str, quotas: Quotas, tokens: int) -> None:
        """Count a turn admitted on headroom."""
        try:
            admission = await self._counters.admit_turn(tenant, member, quotas, tokens=tokens)
        except (RedisError, OSError) as exc:
            log.warning("could not count a turn of %s: %s", tenant, exc)
            return
        if admission.refusal is None:
            self._note(tenant, quotas, admission)
            return
        # Other gateways took the rest meanwhile: this one has gone on uncounted.
        self._headroom.pop(tenant, None)
        OVERRUNS.labels(tenant, admission.refusal.quota).inc()

    async def release(self, key: ConversationKey, request_id: str) -> None:
        """A request admitted here will not run (it could not be delivered)."""
        log_key = ConversationKeys(self._prefix, _tag(key)).log
        found = self._turns.pop((log_key, request_id), None)
        if found is not None:
            await self._end(found)

    def observe(self, log_key: str, entries: list[LogEntry]) -> None:
        """Entries of a followed log: a terminal frame ends the turn it belongs to."""
        if not self._turns:
            return
        for entry in entries:
            if entry.kind is Kind.TERMINAL:
                found = self._turns.pop((log_key, entry.request), None)
                if found is not None:
                    task = asyncio.get_running_loop().create_task(self._end(found))
                    self._background.add(task)
                    task.add_done_callback(self._background.discard)

    async def _end(self, turn: Admitted) -> None:
        try:
            if turn.counting is not None:
                # Its count must land before it is taken back, or it would stay counted.
                await turn.counting
            await self._counters.end_turn(turn.tenant, turn.member)
        except (RedisError, OSError) as exc:
            log.warning("could not end a turn of %s (it expires): %s", turn.tenant, exc)

    async def _reconcile(self, tenant: str) -> bool:
        """Forget the tenant's counted turns that have ended (per the store); True if any
        went. At most once a second per tenant."""
        now = time.monotonic()
        if now - self._reconciled.get(tenant, 0.0) < RECONCILE_EVERY:
            return False
        self._reconciled[tenant] = now
        freed = False
        for member, expires in await self._counters.running_turns(tenant):
            parsed = parse_turn_member(member)
            if parsed is None or await self._ended(tenant, parsed, expires):
                await self._counters.end_turn(tenant, member)
                freed = True
        return freed

    async def _ended(self, tenant: str, turn: tuple[str, str, str], expires: float) -> bool:
        agent, name, request_id = turn
        try:
            conversation = await self._store.find_conversation(ConversationKey(tenant, agent, name))
            record = (
                None
                if conversation is None
                else await self._store.get_turn(conversation.id, request_id)
            )
        except (StoreError, ValueError):
            return False
        if record is None:
            return time.time() - (expires - TURN_TTL) > UNSEEN_TURN_GRACE
        return record.status not in OPEN_TURN_STATUSES


def _tag(key: ConversationKey) -> str:
    return conversation_tag(key.tenant, key.agent, key.name)


def _size(message: Any) -> int:
    return len(json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode())
