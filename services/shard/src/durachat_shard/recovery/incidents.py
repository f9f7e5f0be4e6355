"""Recovery incidents of one conversation: budgets, their records and their events.

An incident is one interrupted turn (its root request and the user message it answers) across
every attempt to recover it, on whichever shard. Its budget state lives in SQL so the next
owner after another crash counts on from it; every transition is published as a
`chat:recovery:*` event. Each attempt is a `chat.recovery` span, linked to the interrupted
turn's span, and carries the attempt's events (docs/observability.md#traces).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from opentelemetry import trace
from opentelemetry.trace import INVALID_SPAN, Span, SpanContext

from durachat.observability import emit
from durachat.recovery import (
    ChatRecovery,
    Evaluation,
    IncidentState,
    RecoveryKind,
    evaluate,
)
from durachat_infra.redis_client import RedisClient
from durachat_infra.store import Store
from durachat_shard.tracing import start_recovery_span

log = logging.getLogger(__name__)

TOKEN_WINDOW = 3600
"""Seconds of the per-tenant recovery token budget's window."""

FINAL_EVENTS = frozenset(
    {
        "chat:recovery:completed",
        "chat:recovery:failed",
        "chat:recovery:skipped",
        "chat:recovery:exhausted",
    }
)
"""Events after which an attempt is over (its span ends)."""


class IncidentWriter(Protocol):
    """Where an incident's record is written: a fenced transaction of its conversation."""

    async def save_incident(
        self, incident_id: str, *, request_id: str, status: str, attempt: int, data: dict[str, Any]
    ) -> None: ...


@dataclass(slots=True)
class Incident:
    """One incident being worked on."""

    incident_id: str
    request_id: str
    root_request_id: str
    kind: RecoveryKind
    state: IncidentState
    max_attempts: int
    span: Span = field(default=INVALID_SPAN)
    """This attempt's `chat.recovery` span (a no-op one when not traced)."""

    def payload(self, reason: str | None = None) -> dict[str, Any]:
        """The payload of its `chat:recovery:*` events (docs/recovery.md#events)."""
        out: dict[str, Any] = {
            "incidentId": self.incident_id,
            "requestId": self.request_id,
            "attempt": self.state.attempt,
            "maxAttempts": self.max_attempts,
            "recoveryKind": self.kind,
        }
        if reason is not None:
            out["reason"] = reason
        return out


class Incidents:
    """Opens, advances and closes the recovery incidents of one conversation."""

    def __init__(
        self,
        *,
        store: Store,
        conversation_id: int,
        tenant: str,
        agent: str,
        name: str,
        config: ChatRecovery,
        redis: RedisClient | None,
        key_prefix: str,
    ) -> None:
        self._store = store
        self._conversation_id = conversation_id
        self._tenant = tenant
        self._agent = agent
        self._name = name
        self.config = config
        self._redis = redis
        self._prefix = key_prefix

    async def open(
        self,
        incident_id: str,
        *,
        request_id: str,
        root: str,
        kind: RecoveryKind,
        progress: int,
        interrupted: SpanContext | None = None,
    ) -> tuple[Incident, Evaluation]:
        """Count one more attempt of `incident_id` and evaluate its budget; emits
        `detected` (first sight) and `attempt`. The attempt's span links to `interrupted`,
        the span of the turn that was cut off, when known."""
        stored = await self._store.get_incident(self._conversation_id, incident_id)
        previous = None if stored is None else IncidentState.from_json(stored.attempt, stored.data)
        evaluation = evaluate(previous, progress=progress, now=time.time(), config=self.config)
        incident = Incident(
            incident_id, request_id, root, kind, evaluation.state, self.config.max_attempts
        )
        incident.span = start_recovery_span(
            interrupted,
            {
                "durachat.recovery.incident_id": incident_id,
                "durachat.recovery.attempt": evaluation.state.attempt,
                "durachat.recovery.kind": kind,
                "durachat.request_id": request_id,
                "durachat.agent": self._agent,
                "durachat.tenant": self._tenant,
            },
        )
        if evaluation.first:
            self.event("chat:recovery:detected", incident)
        self.event("chat:recovery:attempt", incident)
        return incident, evaluation

    def record(
        self, incident: Incident, status: str, reason: str | None = None
    ) -> Callable[[IncidentWriter], Awaitable[None]]:
        """A write (for the actor's fenced write chain) storing the incident's status."""
        data = incident.state.to_json()
        data.update(
            {
                "rootRequestId": incident.root_request_id,
                "recoveryKind": incident.kind,
                "reason": reason,
            }
        )

        async def write(tx: IncidentWriter) -> None:
            await tx.save_incident(
                incident.incident_id,
                request_id=incident.request_id,
                status=status,
                attempt=incident.state.attempt,
                data=data,
            )

        return write

    def event(self, kind: str, incident: Incident, reason: str | None = None) -> None:
        """Publish a `chat:recovery:*` event (also a span event of the attempt's span)."""
        with on_recovery_span(incident):
            emit(
                kind,
                agent=self._agent,
                name=self._name,
                tenant=self._tenant,
                payload=incident.payload(reason),
            )
        end_recovery_span(incident, kind)

    async def tenant_budget_spent(self) -> bool:
        """Whether the tenant has used up its recovery tokens for this window."""
        budget = self.config.tenant_token_budget
        if budget is None or self._redis is None:
            return False
        used = await self._redis.get(self._budget_key())
        return int(used or 0) >= budget

    async def charge(self, text_chars: int) -> None:
        """Count the tokens a recovered turn used against the tenant's budget (estimated at
        four characters a token)."""
        if self.config.tenant_token_budget is None or self._redis is None or text_chars <= 0:
            return
        key = self._budget_key()
        try:
            pipe = self._redis.pipeline(transaction=False)
            pipe.incrby(key, max(1, text_chars // 4))
            pipe.expire(key, TOKEN_WINDOW * 2)
            await pipe.execute()
        except Exception:
            log.warning("could not count recovery tokens of tenant %s", self._tenant, exc_info=True)

    def _budget_key(self) -> str:
        window = int(time.time() // TOKEN_WINDOW)
        return f"{self._prefix}:tenant:{self._tenant}:recovery-tokens:{window}"


@contextlib.contextmanager
def on_recovery_span(incident: Incident) -> Iterator[None]:
    """Make the attempt's span the current one, so the events emitted meanwhile are recorded
    on it."""
    if not incident.span.is_recording():
        yield
        return
    with trace.use_span(incident.span, end_on_exit=False):
        yield


def end_recovery_span(incident: Incident, kind: str) -> None:
    """End the attempt's span once `kind` settled it, noting how it ended."""
    if kind in FINAL_EVENTS and incident.span.is_recording():
        incident.span.set_attribute("durachat.recovery.outcome", kind.rsplit(":", 1)[-1])
        incident.span.end()
