"""The gateway's tenancy in auth mode (docs/security.md): the directory of credentials, the
quota gate, the admin operations, and what the WebSocket route asks of them: which frames a
credential may send, the quotas of a new socket and of a chat request, and closing the sockets
whose credential was revoked.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from dataclasses import dataclass, field
from typing import Any, Final

from redis.exceptions import RedisError

from durachat.observability import EventType, emit
from durachat.protocol import MessageType
from durachat_gateway.auth.directory import AuthDirectory
from durachat_gateway.auth.principal import Principal
from durachat_gateway.connection import ClientConnection
from durachat_gateway.forwarder import FORWARDED, ForwardError
from durachat_gateway.quota_gate import QuotaGate
from durachat_gateway.tenant_admin import TenantAdmin
from durachat_infra.eventlog import LogReader
from durachat_infra.keys import ClusterKeys
from durachat_infra.quotas import QuotaCounters, Refusal
from durachat_infra.redis_client import RedisClient
from durachat_infra.settings import GatewaySettings
from durachat_infra.store import ConversationKey, DatabaseUnavailableError
from durachat_infra.store.port import StorePort, TenantStorePort

log = logging.getLogger(__name__)

REVOKED_CLOSE: Final = 1008
"""Close code of a socket whose credential was revoked (policy violation): clients do not
reconnect with it."""

RESPONSE: Final = MessageType.USE_CHAT_RESPONSE.value

UNAVAILABLE: Final = (RedisError, OSError, DatabaseUnavailableError)
"""What keeps the quotas from being checked: the counters or the store cannot be reached."""

_READ_FRAMES: Final = frozenset({MessageType.BRANCHES.value, MessageType.BRANCH_SWITCH.value})


def frame_scope(frame: dict[str, Any]) -> str:
    """The token scope a client frame needs: `chat` to change the conversation, `read` to
    list or view branches, `branches` to change them (`siblings` only reads), `events` for
    the rest (the resume handshake)."""
    kind = frame.get("type")
    if kind in FORWARDED:
        return "chat"
    if kind in _READ_FRAMES:
        return "read"
    if kind == MessageType.BRANCH_OP.value:
        return "read" if frame.get("op") == "siblings" else "branches"
    return "events"


def refused_turn(request_id: str, refusal: Refusal) -> list[dict[str, Any]]:
    """What a chat request refused by a quota gets, as the reference answers a failed turn:
    its error frame, naming the quota, then its terminal frame with `outcome: "error"`."""
    body = f"Quota exceeded: {refusal.quota}." + (
        f" Retry in {refusal.retry_after} s." if refusal.retry_after else ""
    )
    return [
        {
            "type": RESPONSE,
            "id": request_id,
            "body": body,
            "done": False,
            "error": True,
            "code": "quota_exceeded",
            "quota": refusal.quota,
            "retryAfter": refusal.retry_after,
        },
        {"type": RESPONSE, "id": request_id, "body": "", "done": True, "outcome": "error"},
    ]


def quota_refused(
    key: ConversationKey, refusal: Refusal, what: str, *, request_id: str | None = None
) -> None:
    """Tell the event feed a quota refused something (`what`: `connection`, `request` or
    `branch`; docs/observability.md#subscribing-to-events)."""
    payload: dict[str, Any] = {
        "quota": refusal.quota,
        "retryAfter": refusal.retry_after,
        "refused": what,
    }
    if request_id is not None:
        payload["requestId"] = request_id
    emit(
        EventType.QUOTA_REFUSED, agent=key.agent, name=key.name, tenant=key.tenant, payload=payload
    )


def quota_response_body(refusal: Refusal) -> bytes:
    """The JSON body of a 429."""
    return json.dumps(
        {"code": "quota_exceeded", "quota": refusal.quota, "message": refusal.message}
    ).encode()


@dataclass(slots=True)
class Tenancy:
    """Everything of the gateway that exists only when credentials are required."""

    directory: AuthDirectory
    counters: QuotaCounters
    gate: QuotaGate
    admin: TenantAdmin
    tenant_store: TenantStorePort
    sockets: dict[ClientConnection, Principal] = field(default_factory=dict)
    _closing: set[asyncio.Task[None]] = field(default_factory=set)

    @classmethod
    async def start(
        cls, settings: GatewaySettings, store: StorePort, redis: RedisClient, reader: LogReader
    ) -> Tenancy:
        """Load the directory and start following changes and counting."""
        assert settings.admin_key is not None
        directory = AuthDirectory(
            store,
            redis,
            ClusterKeys(settings.key_prefix),
            admin_key=settings.admin_key,
            defaults=settings.quotas,
            refresh=settings.auth_refresh_interval,
        )
        counters = QuotaCounters(redis, settings.key_prefix)
        gate = QuotaGate(
            counters,
            directory,
            store,
            gateway_id=settings.gateway_id,
            key_prefix=settings.key_prefix,
        )
        admin = TenantAdmin(
            store,
            redis,
            directory,
            counters,
            key_prefix=settings.key_prefix,
            signing_overlap=settings.token_max_ttl,
        )
        tenancy = cls(directory, counters, gate, admin, store)
        directory.on_reload.append(tenancy.expel_revoked)
        await directory.start()
        await gate.start()
        reader.observer = gate.observe
        return tenancy

    async def stop(self) -> None:
        """Stop following changes and renewing places."""
        await self.gate.stop()
        await self.directory.stop()

    async def admit_socket(
        self, principal: Principal, key: ConversationKey
    ) -> tuple[str | None, Refusal | None]:
        """The quotas of a new socket: a place among the tenant's connections, and the
        conversation (an existing one, or one more the tenant may have). Returns the place's
        handle, or the refusal."""
        refusal = await self.gate.new_conversation(key)
        if refusal is not None:
            quota_refused(key, refusal, "connection")
            return None, refusal
        handle, refusal = await self.gate.open_connection(key.tenant)
        if refusal is not None:
            quota_refused(key, refusal, "connection")
        return handle, refusal

    async def release_socket(self, tenant: str, handle: str, conn: ClientConnection) -> None:
        """A socket closed."""
        self.sockets.pop(conn, None)
        await self.gate.close_connection(tenant, handle)

    async def permit(
        self,
        conn: ClientConnection,
        principal: Principal,
        key: ConversationKey,
        frame: dict[str, Any],
    ) -> bool:
        """Whether a client frame may go on: the credential has the scope it needs, and a
        branch write stays within what the credential covers and the tenant's quotas. A frame
        that may not is answered here."""
        needed = frame_scope(frame)
        request_id = frame.get("id")
        if not principal.allows(needed):
            if frame["type"] == MessageType.USE_CHAT_REQUEST.value and isinstance(request_id, str):
                conn.send_json(
                    {
                        "type": RESPONSE,
                        "id": request_id,
                        "body": "",
                        "done": True,
                        "error": True,
                        "outcome": "error",
                    }
                )
            conn.send_error("insufficient_scope", f"the token lacks the {needed!r} scope")
            return False
        if frame["type"] != MessageType.BRANCH_OP.value or frame.get("op") == "siblings":
            return True
        op = {"op": frame.get("op"), "new_name": frame.get("name")}
        stopped = await self.check_branch_write(principal, key, op)
        if stopped is None:
            return True
        answer: dict[str, Any] = {
            "type": MessageType.BRANCH_OP.value,
            "op": frame.get("op"),
            "status": stopped[0],
            "body": stopped[1],
        }
        if isinstance(request_id, str):
            answer["id"] = request_id
        conn.send_json(answer)
        return False

    async def admit_request(
        self, key: ConversationKey, request_id: str, frame: dict[str, Any], size: int
    ) -> Refusal | None:
        """The quotas of a chat request (`size`: its frame's length): its size, then the
        tenant's turn quotas. A refusal, or None once it is counted.

        Raises:
            ForwardError: `unavailable` if the counters cannot be reached.
        """
        refusal = self.gate.check_request(key.tenant, frame)
        if refusal is None:
            try:
                _, refusal = await self.gate.admit(key, request_id, size)
            except UNAVAILABLE as exc:
                raise ForwardError("unavailable", f"quota counters unreachable: {exc}") from exc
        if refusal is not None:
            quota_refused(key, refusal, "request", request_id=request_id)
        return refusal

    async def check_branch_write(
        self, principal: Principal, key: ConversationKey, op: dict[str, Any]
    ) -> tuple[int, dict[str, Any], dict[str, str]] | None:
        """What a branch write may not do: fork into a conversation the credential does not
        cover (404, as if it did not exist), or make a conversation the tenant has no room
        for (429). None if it may go on."""
        try:
            if op.get("op") == "fork":
                key = ConversationKey(key.tenant, key.agent, str(op.get("new_name") or ""))
                if not principal.covers(key.agent, key.name):
                    return 404, {"code": "not_found", "message": "no such conversation"}, {}
        except ValueError:
            # A name the store refuses: the owner's answer says so.
            return None
        try:
            refusal = await self.gate.new_conversation(key)
        except UNAVAILABLE:
            return 503, {"code": "database_unavailable", "message": "retry"}, {}
        if refusal is None:
            return None
        quota_refused(key, refusal, "branch")
        body = json.loads(quota_response_body(refusal))
        return 429, body, {"Retry-After": str(max(1, refusal.retry_after))}

    def expel_revoked(self) -> None:
        """Close every socket whose credential is no longer accepted (revoked key, deleted
        tenant, removed signing key)."""
        for conn, principal in list(self.sockets.items()):
            if not self.directory.still_valid(principal):
                del self.sockets[conn]
                task = asyncio.get_running_loop().create_task(_expel(conn))
                self._closing.add(task)
                task.add_done_callback(self._closing.discard)


async def _expel(conn: ClientConnection) -> None:
    log.info("closing socket %s: its credential was revoked", conn.id)
    conn.closed = True
    with contextlib.suppress(RuntimeError, OSError):
        await conn.websocket.close(REVOKED_CLOSE, "credential revoked")
