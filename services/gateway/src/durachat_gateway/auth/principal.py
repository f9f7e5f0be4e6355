"""Who a request acts for, once its credential is checked (docs/security.md#credentials)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Literal

from durachat_gateway.auth.tokens import SCOPES, TokenClaims

PRINCIPAL_SCOPE_KEY: Final = "durachat.principal"
"""Where the authentication middleware leaves the `Principal` in a request's ASGI scope."""

Kind = Literal["open", "admin", "key", "token"]

ALL_SCOPES: Final = frozenset(SCOPES)


@dataclass(frozen=True, slots=True)
class Principal:
    """The checked identity of a request.

    Attributes:
        kind: `open` (no authentication configured), `admin` (the admin key), `key` (a
            tenant's API key) or `token` (a client token).
        tenant: the tenant it acts for (None for the admin).
        scopes: what it may do with conversations.
        agent: the one agent a token is for (None: any).
        name: the one conversation a token is for.
        prefix: the prefix of the conversation names a token is for.
        key_id: the API key used, or the one a token was minted with.
        kid: the signing key of a token.
        subject: the end user a token names.
    """

    kind: Kind
    tenant: str | None
    scopes: frozenset[str] = ALL_SCOPES
    agent: str | None = None
    name: str | None = None
    prefix: str | None = None
    key_id: str | None = None
    kid: str | None = None
    subject: str | None = None

    @classmethod
    def of_token(cls, claims: TokenClaims) -> Principal:
        """The principal of a verified token."""
        return cls(
            kind="token",
            tenant=claims.tenant,
            scopes=claims.scopes,
            agent=claims.agent,
            name=claims.name,
            prefix=claims.prefix,
            key_id=claims.api_key,
            kid=claims.kid,
            subject=claims.subject,
        )

    def covers(self, agent: str, name: str) -> bool:
        """Whether it may use the conversation `(agent, name)` of its tenant."""
        if self.kind != "token":
            return self.tenant is not None
        if agent != self.agent:
            return False
        if self.name is not None:
            return name == self.name
        return self.prefix is not None and name.startswith(self.prefix)

    def allows(self, scope: str) -> bool:
        """Whether it has `scope`."""
        return scope in self.scopes


def principal_of(scope: dict[str, Any] | Any) -> Principal:
    """The principal the middleware attached to a request (a Starlette `Request`,
    `WebSocket` or raw ASGI scope)."""
    raw = scope.scope if hasattr(scope, "scope") else scope
    principal = raw.get(PRINCIPAL_SCOPE_KEY)
    if not isinstance(principal, Principal):
        raise RuntimeError("the request was not authenticated (no principal)")
    return principal


def tenant_of(scope: dict[str, Any] | Any) -> str:
    """The tenant a request acts for (the routes that reach it have one)."""
    tenant = principal_of(scope).tenant
    if tenant is None:
        raise RuntimeError("the request acts for no tenant")
    return tenant
