"""What a gateway checks credentials against, held in memory: every tenant, its API keys
(hashed) and its token signing keys, with the quotas in force for each tenant.

Checking a credential reads no database: the directory is loaded from the store at start-up
and again whenever the cluster's auth version (a Redis counter) moves, which every change made
through the admin API raises. Gateways poll the counter every `refresh` seconds, so a revoked
key stops working everywhere within about that long (docs/security.md#revocation); a full
reload every `FULL_RELOAD` seconds catches changes made behind the API's back.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Final

from redis.exceptions import RedisError

from durachat_gateway.auth.credentials import parse_api_key, same_secret, secret_matches
from durachat_gateway.auth.principal import Principal
from durachat_gateway.auth.tokens import TokenError, key_id_of, verify
from durachat_infra.keys import ClusterKeys
from durachat_infra.quotas import Quotas
from durachat_infra.redis_client import RedisClient
from durachat_infra.settings import QuotaDefaults
from durachat_infra.store import (
    ApiKeyRecord,
    DatabaseUnavailableError,
    SigningKeyRecord,
    TenantRecord,
)
from durachat_infra.store.port import TenantStorePort
from durachat_infra.tasks import cancel_and_wait

log = logging.getLogger(__name__)

FULL_RELOAD: Final = 30.0
"""Seconds between reloads even when the auth version did not move."""

VERIFIED_CACHE: Final = 10_000
"""Tokens remembered as verified (a browser reconnects with the same token; checking a JWT's
signature again costs more than the rest of a connect's checks together)."""


class AuthError(Exception):
    """A credential was refused: `status` 401 (missing or not valid) or 403 (valid, but not
    for this route); `code` is stable."""

    def __init__(self, code: str, message: str, *, status: int = 401) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status


class AuthDirectory:
    """Tenants and their credentials, in memory, kept in step with the store."""

    def __init__(
        self,
        store: TenantStorePort,
        redis: RedisClient,
        keys: ClusterKeys,
        *,
        admin_key: str,
        defaults: QuotaDefaults,
        refresh: float,
    ) -> None:
        self._store = store
        self._redis = redis
        self._version_key = keys.auth_version
        self._admin_key = admin_key
        self._defaults = defaults
        self._refresh = refresh
        self._tenants: dict[str, TenantRecord] = {}
        self._quotas: dict[str, Quotas] = {}
        self._keys: dict[str, ApiKeyRecord] = {}
        self._signing: dict[str, SigningKeyRecord] = {}
        self._current: dict[str, SigningKeyRecord] = {}
        self._version: str | None = None
        self._loaded_at = 0.0
        self._verified: dict[str, tuple[Principal, float]] = {}
        """Token → (its principal, its expiry in epoch seconds); emptied on every reload."""
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self.on_reload: list[Callable[[], None]] = []
        """Called after every reload (the gateway closes connections whose credential died)."""

    async def start(self) -> None:
        """Load, then follow changes."""
        self._version = await self._read_version()
        await self.reload()
        self._task = asyncio.create_task(self._follow(), name="auth-directory")

    async def stop(self) -> None:
        """Stop following changes."""
        await cancel_and_wait(self._task)

    async def reload(self) -> None:
        """Read every tenant and key again."""
        async with self._lock:
            credentials = await self._store.load_credentials()
            tenants = {t.id: t for t in credentials.tenants}
            signing = {k.id: k for k in credentials.signing_keys if k.tenant in tenants}
            current: dict[str, SigningKeyRecord] = {}
            for record in sorted(signing.values(), key=lambda k: (k.created_at, k.id)):
                if record.retires_at is None:
                    current[record.tenant] = record
            self._tenants = tenants
            self._quotas = {
                t.id: Quotas.resolve(self._defaults, t.quotas) for t in tenants.values()
            }
            self._keys = {k.id: k for k in credentials.api_keys if k.tenant in tenants}
            self._signing = signing
            self._current = current
            self._verified = {}
            self._loaded_at = time.monotonic()
        for listener in list(self.on_reload):
            try:
                listener()
            except Exception:
                log.exception("an auth reload listener failed")

    async def announce(self) -> None:
        """Tell every gateway that tenants or keys changed (and reload this one now)."""
        self._version = str(await self._redis.incr(self._version_key))
        await self.reload()

    async def _read_version(self) -> str | None:
        value = await self._redis.get(self._version_key)
        return None if value is None else str(value)

    async def _follow(self) -> None:
        while True:
            await asyncio.sleep(self._refresh)
            try:
                version = await self._read_version()
                stale = time.monotonic() - self._loaded_at > FULL_RELOAD
                if version != self._version or stale:
                    self._version = version
                    await self.reload()
            except (RedisError, OSError, DatabaseUnavailableError) as exc:
                log.warning("could not refresh tenants and keys: %s", exc)

    def tenant(self, tenant_id: str) -> TenantRecord | None:
        """A tenant as last loaded."""
        return self._tenants.get(tenant_id)

    def quotas(self, tenant_id: str) -> Quotas:
        """The quotas in force for a tenant (the defaults for one not loaded yet)."""
        found = self._quotas.get(tenant_id)
        return found if found is not None else Quotas.resolve(self._defaults, {})

    def quotas_of(self, record: TenantRecord) -> Quotas:
        """The quotas in force for a tenant as stored (whether loaded here yet or not)."""
        return Quotas.resolve(self._defaults, record.quotas)

    def signing_key(self, tenant_id: str) -> SigningKeyRecord | None:
        """The key that signs the tenant's new tokens, if it has one."""
        return self._current.get(tenant_id)

    def authenticate(self, credential: str | None) -> Principal:
        """Who `credential` (the admin key, an API key or a client token) is.

        Raises:
            AuthError: missing, unknown, expired or revoked (all 401).
        """
        if not credential:
            raise AuthError("missing_credentials", "this route needs a credential (Bearer)")
        if same_secret(credential, self._admin_key):
            return Principal(kind="admin", tenant=None)
        parsed = parse_api_key(credential)
        if parsed is not None:
            return self._api_key(*parsed)
        return self._token(credential)

    def _api_key(self, key_id: str, secret: str) -> Principal:
        record = self._keys.get(key_id)
        if record is None or not secret_matches(secret, record.secret_hash):
            raise AuthError("invalid_credentials", "unknown or revoked API key")
        return Principal(kind="key", tenant=record.tenant, key_id=key_id)

    def _token(self, token: str) -> Principal:
        remembered = self._verified.get(token)
        if remembered is not None:
            principal, expires = remembered
            if time.time() < expires and self.still_valid(principal):
                return principal
            del self._verified[token]
        principal, expires = self._verify_token(token)
        if len(self._verified) >= VERIFIED_CACHE:
            self._verified.clear()
        self._verified[token] = (principal, expires)
        return principal

    def _verify_token(self, token: str) -> tuple[Principal, float]:
        kid = key_id_of(token)
        if kid is None:
            raise AuthError("invalid_credentials", "not an API key or a client token")
        signing = self._signing.get(kid)
        if signing is None:
            raise AuthError("invalid_token", "the token's signing key is unknown")
        if _retired(signing):
            raise AuthError("revoked_token", "the token's signing key was rotated out")
        try:
            claims = verify(token, kid=kid, secret=signing.secret)
        except TokenError as exc:
            raise AuthError(exc.code, exc.message) from exc
        if claims.tenant != signing.tenant:
            raise AuthError("invalid_token", "the token names another tenant than its key")
        if claims.api_key is not None and claims.api_key not in self._keys:
            raise AuthError("revoked_token", "the API key the token was minted with is revoked")
        return Principal.of_token(claims), claims.expires_at.timestamp()

    def still_valid(self, principal: Principal) -> bool:
        """Whether a credential checked earlier would still be accepted (its key not revoked,
        its tenant not deleted, its signing key not rotated out). A token's expiry is checked
        when it is presented, not afterwards."""
        if principal.kind in ("open", "admin"):
            return True
        if principal.tenant not in self._tenants:
            return False
        if principal.kind == "key":
            return principal.key_id in self._keys
        signing = self._signing.get(principal.kid or "")
        if signing is None or _retired(signing):
            return False
        return principal.key_id is None or principal.key_id in self._keys


def _retired(record: SigningKeyRecord) -> bool:
    return record.retires_at is not None and record.retires_at <= datetime.now(UTC)


def bearer(authorization: str | None) -> str | None:
    """The credential of an `Authorization: Bearer <credential>` header."""
    if not authorization:
        return None
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() != "bearer":
        return None
    return value.strip() or None
